package diagnose

import (
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Confidence is built from how much of the regression the winning part
// explains plus corroborating signals, minus contradictions.
const (
	confBase         = 0.30
	confExplained    = 0.35 // × share of the headline's growth explained
	confMaxBonus     = 0.35
	confMin, confMax = 0.05, 0.97
	// maxBaselineBuckets caps the baseline part of the correlation series
	// (a baseline from last week need not be read bucket by bucket).
	maxBaselineBuckets = 600
	// strongR is the coefficient that counts as corroboration.
	strongR = 0.5
	// kvFull is the KV-cache usage at which vLLM starts holding requests.
	kvFull = 0.9
	// similarWeight: a runner-up scoring at least this share of the
	// winner's score is a cause of similar weight.
	similarWeight = 0.6
	// prefillShareOfQueue: prefill growth of at least this share of the
	// queue's makes a queue without KV pressure read as waiting behind
	// long prefills.
	prefillShareOfQueue = 0.4
	// longerAnswers is the output-token ratio at which answers count as
	// longer (slow requests' p50 against the reference).
	longerAnswers = 1.5
)

// analysis carries one Diagnose call's intermediate results.
type analysis struct {
	in          Input
	rules       *verdictTable
	width       time.Duration
	winCols     *columns
	baseCols    *columns
	hasBaseline bool
	mode        mode
	groups      []*group
	ranked      []candidate
	winner      candidate
	slo         *SLOResult
	comps       map[string]ComponentStats
	corrs       []Correlation
	series      []Bucket
	bubble      []Attribution
	attrs       *attrIndex // built on the first bubble-up
	metricsWin  []telemetry.MetricPoint
	metricsBase []telemetry.MetricPoint
	evidence    []Evidence
	bonus       float64
	penalty     float64
	cause       string // the "because …" clause of the summary
	// errors is the window's failures when the errors verdict claimed it.
	errors *errorFigures
	// blockedQueue is the queue candidate a prefill verdict took over
	// (queue time spent behind other requests' long prefills), if any.
	blockedQueue *candidate
	// server holds the servers' metrics when they stand in for a split
	// the calls do not carry (no server spans); nil otherwise.
	server *serverFigures
}

// Diagnose explains the window's slow requests; see the package comment and
// DESIGN.md "Diagnosis" for the rules.
func Diagnose(in Input) Diagnosis {
	return diagnoseWith(in, verdicts)
}

// diagnoseWith diagnoses with the given verdict rules.
func diagnoseWith(in Input, rules *verdictTable) Diagnosis {
	if in.Baseline.IsZero() {
		in.Baseline = DefaultBaseline(in.Window)
	}
	a := &analysis{in: in, rules: rules, width: Buckets(in.Window),
		winCols: newColumns(in.Requests), baseCols: newColumns(in.BaselineRequests)}
	a.hasBaseline = len(in.BaselineRequests) >= minBaselineRequests
	a.server = newServerFigures(in)
	if a.server != nil {
		a.in.Events = append(slices.Clip(a.in.Events), a.server.sm.Events...)
	}
	for _, m := range in.Metrics {
		switch {
		case in.Window.Contains(m.Time):
			a.metricsWin = append(a.metricsWin, m)
		case in.Baseline.Contains(m.Time):
			a.metricsBase = append(a.metricsBase, m)
		}
	}
	// The parts below read only the input (and the columns, computed once
	// whoever asks first): on two cores they run at once, and a diagnosis's
	// Go time after its last read roughly halves.
	var (
		wg         sync.WaitGroup
		baseSeries []Bucket
		reqCorrs   []Correlation
		cmp        *Comparison
		workload   *WorkloadShape
		cost       *TaskCost
	)
	parallel := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	parallel(func() { a.comps = componentStats(a.winCols, a.baseCols) })
	parallel(func() { baseSeries = a.correlationBaselineSeries() })
	parallel(func() {
		reqCorrs = requestCorrelations(in.Requests)
		a.slo = sloResult(in.SLO, in.Requests)
	})
	parallel(func() {
		workload = workloadShape(in.Requests)
		cost = CostPerTask(in.Requests, in.Prices)
	})
	if a.hasBaseline {
		parallel(func() {
			c := compare(a.baseCols, a.winCols, CompareOptions{
				BeforeMetrics: a.metricsBase, AfterMetrics: a.metricsWin, Prices: in.Prices,
				BeforeTotal: in.BaselineTotal, AfterTotal: in.WindowTotal, TotalsEstimated: in.TotalsEstimated,
			})
			cmp = &c
		})
	}
	a.series = series(in.Window, a.width, a.winCols, sampleScale(in.WindowTotal, len(in.Requests)), in.RequestBuckets, in.Metrics, in.Events)
	wg.Wait()
	a.corrs = append(bucketCorrelations(append(baseSeries, a.series...), fmtWidth(a.width)+" bucket"), reqCorrs...)

	d := Diagnosis{
		Verdict:           VerdictHealthy,
		TTFT:              Percentiles{a.comps[ComponentTTFT].P50, a.comps[ComponentTTFT].P95, a.comps[ComponentTTFT].P99},
		Components:        a.comps,
		Series:            a.series,
		Correlations:      a.corrs,
		Window:            in.Window,
		Baseline:          in.Baseline,
		BucketSeconds:     a.width.Seconds(),
		Requests:          orLen(in.WindowTotal, len(in.Requests)),
		BaselineRequests:  orLen(in.BaselineTotal, len(in.BaselineRequests)),
		AnalyzedRequests:  len(in.Requests),
		RequestsEstimated: in.TotalsEstimated,
		BaselineDataFrom:  lateFirstStart(in.BaselineRequests, in.Baseline),
	}
	d.Answers = Answers{
		Workload: workload,
		SLO:      a.slo,
		Decode:   decodeBound(in.Requests, a.corrs),
		Cost:     cost,
	}
	d.Answers.Compare = cmp
	if a.server != nil {
		a.server.apply(a, &d)
	}
	if len(in.Requests) == 0 && a.server == nil {
		d.Summary = "No LLM requests in the window, so there is nothing to diagnose."
		d.Answers.Cause = VerdictHealthy
		a.waitingAtEndEvidence()
		d.Evidence = a.numbered()
		return d.withEmptyLists()
	}

	if len(in.Requests) > 0 {
		a.groups = buildGroups(a.winCols, a.baseCols)
		d.Answers.Bound = ttftBound(a.group("ttft"))
		a.chooseMode()
	}
	if r := a.claim(); r != nil {
		d.Verdict, d.Answers.Cause = r.Verdict, r.Verdict
		d.BubbleUp = a.bubbleUpFor(a.primaryGroup())
		a.asides()
		d.Confidence = a.confidence()
		if r.Summary != nil {
			d.Summary = r.Summary(a)
		} else {
			d.Summary = a.summary(r.Verdict)
		}
		a.waitingAtEndEvidence()
		d.Evidence = a.numbered()
		return d.withEmptyLists()
	}
	if a.mode == modeHealthy {
		d.Confidence, d.Summary = a.healthy()
		d.Answers.Cause = VerdictHealthy
		d.BubbleUp = a.bubbleUpFor(a.primaryGroup())
		if clauses := a.asides(); len(clauses) > 0 {
			d.Summary = strings.TrimSuffix(d.Summary, ".") + "; but " + strings.Join(clauses, "; ") + "."
			d.Confidence = round2(math.Max(confMin, d.Confidence-a.penalty))
		}
		a.waitingAtEndEvidence()
		d.Evidence = a.numbered()
		return d.withEmptyLists()
	}
	verdict := a.attribute()
	d.Verdict = verdict
	d.Answers.Cause = verdict
	d.BubbleUp = a.bubble
	a.asides()
	d.Confidence = a.confidence()
	d.Summary = a.summary(verdict)
	a.waitingAtEndEvidence()
	d.Evidence = a.numbered()
	return d.withEmptyLists()
}

// withEmptyLists turns nil lists into empty ones: JSON readers get [] rather
// than null for "nothing found".
func (d Diagnosis) withEmptyLists() Diagnosis {
	if d.Evidence == nil {
		d.Evidence = []Evidence{}
	}
	if d.Series == nil {
		d.Series = []Bucket{}
	}
	if d.Correlations == nil {
		d.Correlations = []Correlation{}
	}
	if d.BubbleUp == nil {
		d.BubbleUp = []Attribution{}
	}
	return d
}

// chooseMode decides what the slow requests are compared with, or that
// the window is healthy.
func (a *analysis) chooseMode() {
	anyRegressed := func(m mode) bool {
		r := false
		for _, g := range a.groups {
			g.judge(m, a.slo)
			if m == modeRegression && g.regressed {
				if why := a.withinNoise(g); why != "" {
					g.regressed, g.noise = false, why
				}
			}
			r = r || g.regressed
		}
		return r
	}
	switch {
	case a.hasBaseline && anyRegressed(modeRegression):
		a.mode = modeRegression
	case a.slo != nil && !a.slo.Met && anyRegressed(modeSLO):
		a.mode = modeSLO
	case !a.hasBaseline && a.slo == nil && anyRegressed(modeSelf):
		a.mode = modeSelf
	default:
		a.mode = modeHealthy
		// Leave the groups judged against the baseline (or the window) for
		// the healthy evidence.
		if a.hasBaseline {
			anyRegressed(modeRegression)
		} else {
			anyRegressed(modeSelf)
		}
	}
}

func (a *analysis) group(name string) *group {
	for _, g := range a.groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

// primaryGroup is the headline a healthy page talks about: TTFT, else E2E.
func (a *analysis) primaryGroup() *group {
	if g := a.group("ttft"); g != nil {
		return g
	}
	return a.group("e2e")
}

// correlationBaselineSeries is the baseline's tail bucketed like the
// window: the correlations read it before the window's buckets, so that a
// window saturated throughout still has low-pressure buckets to correlate
// against.
func (a *analysis) correlationBaselineSeries() []Bucket {
	b := correlationBaseline(a.in.Window, a.in.Baseline)
	return series(b, a.width, a.baseCols, sampleScale(a.in.BaselineTotal, len(a.in.BaselineRequests)), nil, a.in.Metrics, a.in.Events)
}

// correlationBaseline is the part of the baseline whose buckets the
// correlations read: before the window, at most maxBaselineBuckets long.
func correlationBaseline(window, baseline Range) Range {
	if baseline.IsZero() {
		baseline = DefaultBaseline(window)
	}
	b := baseline
	if b.To.After(window.From) {
		b.To = window.From
	}
	if maxD := time.Duration(maxBaselineBuckets) * Buckets(window); b.Duration() > maxD {
		b.From = b.To.Add(-maxD)
	}
	return b
}

// confidence combines explained share, corroboration and contradictions.
func (a *analysis) confidence() float64 {
	explained := a.winner.explained
	var others []candidate
	if len(a.ranked) > 0 {
		others = a.ranked[1:]
	}
	if q := a.blockedQueue; q != nil {
		// The queue behind long prefills is part of the prefill story.
		explained = math.Min(1, explained+q.explained)
		others = slices.DeleteFunc(slices.Clone(others), func(c candidate) bool { return c.comp == ComponentQueue })
	}
	c := confBase + confExplained*explained + math.Min(a.bonus, confMaxBonus) - a.penalty
	// Two parts of similar weight: the verdict is only half the story.
	if len(others) > 0 && others[0].score >= similarWeight*a.winner.score && a.winner.score > 0 {
		c -= 0.1
	}
	return round2(math.Max(confMin, math.Min(confMax, c)))
}

// lateFirstStart is the first request's start when it lies more than a
// tenth of the way into r; nil otherwise, without requests, and for a
// zero r (a window not given).
func lateFirstStart(reqs []telemetry.LLMRequest, r Range) *time.Time {
	if len(reqs) == 0 || r.IsZero() {
		return nil
	}
	first := reqs[0].Start
	for i := range reqs {
		if reqs[i].Start.Before(first) {
			first = reqs[i].Start
		}
	}
	if first.Sub(r.From) <= r.Duration()/10 {
		return nil
	}
	first = first.UTC()
	return &first
}
