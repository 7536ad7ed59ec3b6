package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/analysis/stats"
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
	// blockedQueue is the queue candidate a prefill verdict took over
	// (queue time spent behind other requests' long prefills), if any.
	blockedQueue *candidate
}

// Diagnose explains the window's slow requests; see the package comment and
// DESIGN.md "Diagnosis" for the rules.
func Diagnose(in Input) Diagnosis {
	if in.Baseline.IsZero() {
		in.Baseline = DefaultBaseline(in.Window)
	}
	a := &analysis{in: in, width: Buckets(in.Window),
		winCols: newColumns(in.Requests), baseCols: newColumns(in.BaselineRequests)}
	a.hasBaseline = len(in.BaselineRequests) >= minBaselineRequests
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
	if len(in.Requests) == 0 {
		d.Summary = "No LLM requests in the window, so there is nothing to diagnose."
		d.Answers.Cause = VerdictHealthy
		return d.withEmptyLists()
	}

	a.groups = buildGroups(a.winCols, a.baseCols)
	d.Answers.Bound = ttftBound(a.group("ttft"))
	a.chooseMode()
	if a.mode == modeHealthy {
		d.Confidence, d.Summary = a.healthy()
		d.Answers.Cause = VerdictHealthy
		d.BubbleUp = a.bubbleUpFor(a.primaryGroup())
		d.Evidence = a.numbered()
		return d.withEmptyLists()
	}
	verdict := a.attribute()
	d.Verdict = verdict
	d.Answers.Cause = verdict
	d.BubbleUp = a.bubble
	d.Confidence = a.confidence()
	d.Summary = a.summary(verdict)
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
				if why := a.decodeWithinNoise(g); why != "" {
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

// attribute picks the winning part, corroborates it and writes the
// evidence; it returns the verdict.
func (a *analysis) attribute() Verdict {
	a.ranked = rankCandidates(a.groups, a.mode)
	g := a.primaryGroup()
	if len(a.ranked) == 0 {
		// Only when no part of any regressed headline can be read: say so
		// weakly rather than invent a split.
		for _, gg := range a.groups {
			if gg.regressed {
				g = gg
				break
			}
		}
		a.headlineEvidence(g)
		a.add("No part of the request explains the change: the spans do not carry the split.", nil)
		a.penalty += 0.2
		a.cause = "no recorded part of the request explains it"
		a.bubble = a.bubbleUpFor(g)
		if g.name == "first_token" {
			return VerdictPreInference
		}
		return VerdictProvider
	}
	a.winner = a.ranked[0]
	a.queueBehindPrefill()
	g = a.winner.g
	a.bubble = a.bubbleUpFor(g)
	verdict := verdictOf[a.winner.comp]

	a.headlineEvidence(g)
	a.componentEvidence(a.winner)
	a.blockedQueueEvidence()

	if verdict == VerdictProvider && a.promptsGrew(g) {
		// A managed API whose prompts got longer is prefill, bundled or not.
		verdict = VerdictPrefill
	}
	verdict = a.coldStartOverride(g, verdict)
	switch verdict {
	case VerdictQueueing:
		a.corroborateQueueing(g)
	case VerdictPrefill:
		a.corroboratePrefill(g)
	case VerdictColdStart:
		a.corroborateColdStart(g)
	case VerdictDecode:
		a.corroborateDecode(g)
	case VerdictNetwork:
		a.corroborateNetwork()
	case VerdictPreInference:
		a.corroboratePreInference()
	case VerdictProvider:
		a.corroborateProvider(g)
	}
	a.bubbleEvidence()
	a.secondaryEvidence()
	if a.slo != nil {
		a.add(a.slo.Text, nil)
	}
	switch a.mode {
	case modeSelf:
		a.penalty += 0.1
	case modeSLO:
		a.penalty += 0.05
	}
	return verdict
}

// confidence combines explained share, corroboration and contradictions.
func (a *analysis) confidence() float64 {
	explained := a.winner.explained
	others := a.ranked[1:]
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

// healthy returns the confidence and summary of a healthy window, and adds
// the evidence that nothing moved.
func (a *analysis) healthy() (float64, string) {
	var parts []string
	maxRel := 0.0
	for _, g := range a.groups {
		w, b := g.winSum.P95, g.baseSum.P95
		inSummary := g.name != "first_token" || len(a.groups) == 1
		switch {
		case a.hasBaseline && !math.IsNaN(w) && !math.IsNaN(b):
			if inSummary {
				parts = append(parts, fmt.Sprintf("%s p95 %s → %s", g.label, fmtMs(b), fmtMs(w)))
			}
			why := "within noise (< 20 % or < 50 ms)"
			switch {
			case g.noise != "":
				why = g.noise
			case g.grewBySize:
				why = fmt.Sprintf("within the sampling error of a p95 over %s", Plural(g.winSum.N, "request"))
			}
			a.add(fmt.Sprintf("%s p95 %s → %s, p99 %s → %s: %s.",
				g.label, fmtMs(b), fmtMs(w), fmtMs(g.baseSum.P99), fmtMs(g.winSum.P99), why),
				figures("p95_ms", w, "baseline_p95_ms", b, "p99_ms", g.winSum.P99, "baseline_p99_ms", g.baseSum.P99))
			if b > 0 {
				maxRel = math.Max(maxRel, w/b-1)
			}
		case !math.IsNaN(w):
			if inSummary {
				parts = append(parts, fmt.Sprintf("%s p95 %s (p50 %s)", g.label, fmtMs(w), fmtMs(g.winSum.P50)))
			}
			a.add(fmt.Sprintf("%s p50 %s, p95 %s, p99 %s; slow requests average %s.",
				g.label, fmtMs(g.winSum.P50), fmtMs(w), fmtMs(g.winSum.P99), fmtMs(g.slowMean)),
				figures("p50_ms", g.winSum.P50, "p95_ms", w, "p99_ms", g.winSum.P99, "slow_mean_ms", g.slowMean))
		}
	}
	if a.slo != nil {
		a.add(a.slo.Text, nil)
	}
	slo := ""
	switch {
	case a.slo != nil && a.slo.Met:
		slo = " and the SLO holds"
	case a.slo != nil:
		// Reached only when the missed objective has no headline to
		// attribute it to; say so rather than call it fine.
		slo = ", though the SLO is missed"
	}
	switch {
	case a.hasBaseline:
		conf := math.Max(0.5, math.Min(0.9, 0.9-2*maxRel))
		if len(a.in.BaselineRequests) < 3*minBaselineRequests {
			conf -= 0.1
		}
		if a.slo != nil && !a.slo.Met {
			conf = 0.4
		}
		return round2(conf), fmt.Sprintf("Healthy: nothing moved beyond noise against the baseline (%s)%s.", strings.Join(parts, ", "), slo)
	case a.slo != nil:
		var checks []string
		if c := a.slo.TTFT; c != nil && c.Actual != nil {
			checks = append(checks, fmt.Sprintf("TTFT p%s %s vs < %s", pctName(a.slo.Percentile), fmtMs(*c.Actual), fmtMs(c.Target)))
		}
		if c := a.slo.TPOT; c != nil && c.Actual != nil {
			checks = append(checks, fmt.Sprintf("TPOT p%s %s tok/s vs ≥ %s tok/s", pctName(a.slo.Percentile), fmtCount(*c.Actual), fmtCount(c.Target)))
		}
		if !a.slo.Met {
			return 0.4, fmt.Sprintf("The SLO is missed (%s) but no part of the request explains it, with %s to compare with.", strings.Join(checks, ", "), a.baselineLack())
		}
		return 0.7, fmt.Sprintf("Healthy against the SLO (%s to compare with): %s.", a.baselineLack(), strings.Join(checks, ", "))
	default:
		return 0.5, fmt.Sprintf("%s, so judged against the window's own p50: %s, within the normal spread.", capitalize(a.baselineLack()), strings.Join(parts, ", "))
	}
}

// headlineEvidence states how the headline moved.
func (a *analysis) headlineEvidence(g *group) {
	n := len(g.slow)
	switch a.mode {
	case modeRegression:
		a.add(fmt.Sprintf("%s p95 %s → %s, p99 %s → %s; the %s (%s p90 %s) average %s vs %s for the baseline's slow requests.",
			g.label, fmtMs(g.baseSum.P95), fmtMs(g.winSum.P95), fmtMs(g.baseSum.P99), fmtMs(g.winSum.P99),
			Plural(n, "slow request"), g.above(), fmtMs(g.p90), fmtMs(g.slowMean), fmtMs(g.ref)),
			figures("baseline_p95_ms", g.baseSum.P95, "p95_ms", g.winSum.P95, "baseline_p99_ms", g.baseSum.P99,
				"p99_ms", g.winSum.P99, "p90_ms", g.p90, "slow_requests", float64(n),
				"slow_mean_ms", g.slowMean, "baseline_slow_mean_ms", g.ref))
	case modeSelf:
		a.add(fmt.Sprintf("%s: judged against the window itself. %s p50 %s, p95 %s, p99 %s; the %s (%s p90 %s) average %s vs %s for the rest.",
			capitalize(a.baselineLack()), g.label, fmtMs(g.winSum.P50), fmtMs(g.winSum.P95), fmtMs(g.winSum.P99), Plural(n, "slow request"), g.above(), fmtMs(g.p90), fmtMs(g.slowMean), fmtMs(g.ref)),
			figures("p50_ms", g.winSum.P50, "p95_ms", g.winSum.P95, "p99_ms", g.winSum.P99, "p90_ms", g.p90,
				"slow_requests", float64(n), "slow_mean_ms", g.slowMean, "rest_mean_ms", g.ref))
	case modeSLO:
		base := a.baselineLack() + " to compare with"
		if a.hasBaseline {
			base = fmt.Sprintf("p95 was %s in the baseline, so this is not new", fmtMs(g.baseSum.P95))
		}
		a.add(fmt.Sprintf("%s p95 %s, p99 %s while the SLO is missed; %s.", g.label, fmtMs(g.winSum.P95), fmtMs(g.winSum.P99), base),
			figures("p95_ms", g.winSum.P95, "p99_ms", g.winSum.P99, "baseline_p95_ms", g.baseSum.P95))
	}
}

// componentEvidence states how the winning part moved and how much of the
// headline it explains.
func (a *analysis) componentEvidence(c candidate) {
	label := componentLabel[c.comp]
	st := a.stats(c.comp)
	p95 := ""
	if st.P95 != nil {
		if a.hasBaseline && st.BaselineP95 != nil {
			p95 = fmt.Sprintf("%s p95 %s → %s", label, fmtMs(*st.BaselineP95), fmtMs(*st.P95))
		} else {
			p95 = fmt.Sprintf("%s p95 %s", label, fmtMs(*st.P95))
		}
	}
	figs := figures("p95_ms", val(st.P95), "baseline_p95_ms", val(st.BaselineP95),
		"slow_mean_ms", c.slowMean, "reference_mean_ms", c.ref, "explained", c.explained)
	switch a.mode {
	case modeSLO:
		a.add(fmt.Sprintf("%s; %s averages %s, %s of the slow requests' %s.", p95, label, fmtMs(c.slowMean), fmtPct(stats.Ratio(c.slowMean, c.g.slowMean)), c.g.short), figs)
	default:
		a.add(fmt.Sprintf("%s; among slow requests %s grew %s (%s → %s), %s of their %s growth.",
			p95, label, fmtDelta(c.growth), fmtMs(c.ref), fmtMs(c.slowMean), fmtPct(c.explained), c.g.short), figs)
	}
	if c.comp == componentBundled {
		a.add("Queue, prefill and network are bundled in the managed API's TTFT: there is no server split to look into.", nil)
	}
}

// queueBehindPrefill hands the verdict from queue to prefill when the two
// grew by a similar amount, prompts got longer and the KV cache never
// filled. Without KV pressure a queue does not build on its own: an engine
// that prefills one long prompt stalls every request that arrives
// meanwhile (head-of-line blocking), so the queue is a consequence of the
// prompts and "queueing" would send the reader to the wrong fix (more
// replicas or KV cache rather than shorter prompts or chunked prefill).
func (a *analysis) queueBehindPrefill() {
	if a.winner.comp != ComponentQueue || gaugeMax(a.metricsWin, MetricKVCacheUsage) >= kvFull {
		return
	}
	for i, c := range a.ranked[1:] {
		if c.comp != ComponentPrefill {
			continue
		}
		if c.score < prefillShareOfQueue*a.winner.score || !a.promptsGrew(c.g) {
			return
		}
		queue := a.winner
		a.blockedQueue = &queue
		a.ranked = append([]candidate{c}, slices.Delete(a.ranked, i+1, i+2)...)
		a.winner = c
		return
	}
}

// blockedQueueEvidence explains a queue that queueBehindPrefill attributed
// to prefill.
func (a *analysis) blockedQueueEvidence() {
	q := a.blockedQueue
	if q == nil {
		return
	}
	st := a.comps[ComponentQueue]
	text := fmt.Sprintf("Queue grew alongside (p95 %s → %s; %s among slow requests) without KV pressure",
		fmtMs(val(st.BaselineP95)), fmtMs(val(st.P95)), fmtDelta(q.growth))
	figs := figures("queue_p95_ms", val(st.P95), "baseline_queue_p95_ms", val(st.BaselineP95), "queue_growth_ms", q.growth)
	if kv := gaugeMax(a.metricsWin, MetricKVCacheUsage); !math.IsNaN(kv) {
		text += fmt.Sprintf(" (KV cache max %s", fmtPct(kv))
		figs["kv_max"] = kv
		if w := gaugeMax(a.metricsWin, MetricRequestsWaiting); !math.IsNaN(w) {
			text += fmt.Sprintf(", up to %s waiting", fmtCount(w))
			figs["waiting_max"] = w
		}
		text += ")"
	}
	a.add(text+": requests waited behind other requests' long prefills (head-of-line blocking), so the queue follows the prompts too.", figs)
}

// stats returns the window/baseline percentiles of a part; the bundled part
// reads as TTFT.
func (a *analysis) stats(comp string) ComponentStats {
	if comp == componentBundled {
		return a.comps[ComponentTTFT]
	}
	return a.comps[comp]
}

// promptsGrew reports whether the slow requests' prompts are clearly
// longer than the reference and TTFT follows prompt length.
func (a *analysis) promptsGrew(g *group) bool {
	now, ref := a.slowTokens(g, true)
	r := a.tokenCorrelation()
	return stats.Ratio(now, ref) >= 1.5 && r >= 0.4
}

// slowTokens returns the input (or output) tokens p50 of the slow requests
// and of what they are compared with.
func (a *analysis) slowTokens(g *group, input bool) (now, ref float64) {
	name := columnOutputTokens
	if input {
		name = columnInputTokens
	}
	win := a.winCols.column(name)
	now = stats.Quantile(pick(win, g.slow), 0.5)
	switch a.mode {
	case modeRegression:
		ref = stats.Quantile(pick(a.baseCols.column(name), g.baseSlow), 0.5)
	case modeSelf:
		ref = stats.Quantile(pick(win, g.fast), 0.5)
	default:
		ref = a.baseCols.sortedOf(name).Quantile(0.5)
	}
	return now, ref
}

// tokenCorrelation is the per-request relation of TTFT with input tokens.
func (a *analysis) tokenCorrelation() float64 {
	c, ok := findCorrelation(a.corrs, seriesInputTokens, ComponentTTFT)
	if !ok {
		return nan
	}
	return c.best()
}

// decodeWithinNoise explains away a regression that decode carries when
// neither of decode's factors moved beyond noise: tokens came as fast as
// before (ITL p95 < 20 % up) and the slow requests' answers were not
// clearly longer (output tokens p50 < 1.5×). Decode time is their
// product, so a few long answers in a short window (whose requests share
// one batch, so are not independent samples) can push the E2E p95 past
// its sampling error without anything getting slower. It returns why, or
// "" when the regression stands.
func (a *analysis) decodeWithinNoise(g *group) string {
	var top *candidate
	cands := g.candidates(modeRegression)
	for i := range cands {
		if top == nil || cands[i].score > top.score {
			top = &cands[i]
		}
	}
	if top == nil || top.comp != ComponentDecode {
		return ""
	}
	itl := a.comps[ComponentITL]
	if itl.P95 == nil || itl.BaselineP95 == nil || *itl.P95 >= noiseRatio**itl.BaselineP95 {
		return ""
	}
	now := stats.Quantile(pick(a.winCols.column(columnOutputTokens), g.slow), 0.5)
	ref := stats.Quantile(pick(a.baseCols.column(columnOutputTokens), g.baseSlow), 0.5)
	if ratio := stats.Ratio(now, ref); math.IsNaN(ratio) || ratio >= longerAnswers {
		return ""
	}
	return fmt.Sprintf("decode time grew, but neither decoding speed (ITL p95 %s → %s) nor answer length (slow requests' output tokens p50 %s vs %s) moved beyond noise",
		fmtMs(*itl.BaselineP95), fmtMs(*itl.P95), fmtTokens(ref), fmtTokens(now))
}

// coldStartOverride turns a queue/prefill/network/provider verdict into
// cold_start when the slow requests are mostly cold starts: the hold then
// merely surfaced in that part.
func (a *analysis) coldStartOverride(g *group, v Verdict) Verdict {
	if v == VerdictColdStart || v == VerdictDecode || v == VerdictPreInference {
		return v
	}
	slowCold, fastCold := coldShare(a.in.Requests, g.slow), coldShare(a.in.Requests, g.fast)
	if slowCold >= 1.0/3 && slowCold >= 3*fastCold {
		a.add(fmt.Sprintf("The hold surfaced as %s time: %s of slow requests were cold starts, %s of fast ones.",
			componentLabel[a.winner.comp], fmtPct(slowCold), fmtPct(fastCold)),
			figures("slow_cold_share", slowCold, "fast_cold_share", fastCold))
		return VerdictColdStart
	}
	return v
}

func coldShare(reqs []telemetry.LLMRequest, idx []int) float64 {
	n := 0
	for _, i := range idx {
		if reqs[i].ColdStart {
			n++
		}
	}
	return stats.Share(n, len(idx))
}

// gaugeMax returns the largest sample of a metric.
func gaugeMax(points []telemetry.MetricPoint, name string) float64 {
	return stats.Max(gauge(points, name))
}

// slowBuckets returns the window buckets holding at least one slow request.
func (a *analysis) slowBuckets(g *group) []Bucket {
	if len(a.series) == 0 {
		return nil
	}
	first := a.series[0].Start
	seen := make([]bool, len(a.series))
	var out []Bucket
	for _, i := range g.slow {
		b := int(a.in.Requests[i].Start.Sub(first) / a.width)
		if b >= 0 && b < len(a.series) && !seen[b] {
			seen[b] = true
			out = append(out, a.series[b])
		}
	}
	return out
}

func (a *analysis) corroborateQueueing(g *group) {
	kvMax := gaugeMax(a.metricsWin, MetricKVCacheUsage)
	waitMax := gaugeMax(a.metricsWin, MetricRequestsWaiting)
	corrBonus := 0.0
	if !math.IsNaN(kvMax) {
		kv := column(a.slowBuckets(g), func(b *Bucket) *float64 { return b.KVCacheUsage })
		lo, hi := stats.Min(kv), stats.Max(kv)
		if math.IsNaN(hi) {
			lo, hi = stats.Min(gauge(a.metricsWin, MetricKVCacheUsage)), kvMax
		}
		text := "KV cache " + fmtPctRange(lo, hi) + " while the slow requests ran"
		figs := figures("kv_min", lo, "kv_max", hi)
		if c, ok := findCorrelation(a.corrs, MetricKVCacheUsage, seriesTTFTP99); ok && c.Pearson != nil {
			text += fmt.Sprintf(" (r = %s with TTFT p99 per %s%s)", fmtR(*c.Pearson), c.Per, lagPhrase(c.Lag))
			figs["r_kv_ttft_p99"] = *c.Pearson
			if c.best() >= strongR {
				corrBonus = 0.1
			}
		}
		if bm := gaugeMax(a.metricsBase, MetricKVCacheUsage); !math.IsNaN(bm) {
			text += "; baseline max " + fmtPct(bm)
			figs["baseline_kv_max"] = bm
		}
		a.add(text+".", figs)
		if hi >= kvFull {
			a.bonus += 0.1
		}
	}
	if !math.IsNaN(waitMax) {
		text := fmt.Sprintf("%s waiting at peak", gaugeNoun(waitMax, "request"))
		figs := figures("waiting_max", waitMax)
		if bm := gaugeMax(a.metricsBase, MetricRequestsWaiting); !math.IsNaN(bm) {
			text += fmt.Sprintf(" (baseline max %s)", fmtCount(bm))
			figs["baseline_waiting_max"] = bm
		}
		if c, ok := findCorrelation(a.corrs, MetricRequestsWaiting, seriesTTFTP99); ok && c.Pearson != nil {
			text += fmt.Sprintf("; r = %s with TTFT p99 per %s%s", fmtR(*c.Pearson), c.Per, lagPhrase(c.Lag))
			figs["r_waiting_ttft_p99"] = *c.Pearson
			if c.best() >= strongR {
				corrBonus = math.Max(corrBonus, 0.1)
			}
		}
		a.add(text+".", figs)
		if waitMax > 0 {
			a.bonus += 0.1
		}
	}
	a.bonus += corrBonus
	switch {
	case math.IsNaN(kvMax) && math.IsNaN(waitMax):
		a.add("No KV-cache or waiting-request metrics in the window to corroborate the queueing (scrape the server's /metrics).", nil)
	case !(kvMax >= 0.5) && !(waitMax > 0):
		a.add("Yet the server shows no pressure: KV cache and waiting requests stayed low.", nil)
		a.penalty += 0.15
	}
	server := mostCommon(a.in.Requests, g.slow, func(r *telemetry.LLMRequest) string { return r.ServerService })
	if server == "" {
		server = "the inference server"
	}
	switch {
	case kvMax >= kvFull:
		a.cause = "requests queued on " + server + " while the KV cache was full"
	case waitMax > 0:
		a.cause = fmt.Sprintf("requests queued on %s with up to %s waiting", server, fmtCount(waitMax))
	default:
		a.cause = "requests waited in the queue of " + server
	}
}

func (a *analysis) corroboratePrefill(g *group) {
	now, ref := a.slowTokens(g, true)
	shift := stats.Ratio(now, ref)
	refWhat := "the baseline's slow requests"
	if a.mode == modeSelf {
		refWhat = "the rest"
	}
	if !math.IsNaN(shift) {
		a.add(fmt.Sprintf("Slow requests' input tokens p50 %s vs %s for %s (%s).", fmtTokens(now), fmtTokens(ref), refWhat, fmtRatio(shift)),
			figures("input_tokens_p50", now, "reference_input_tokens_p50", ref, "ratio", shift))
		if shift >= 1.5 {
			a.bonus += 0.15
		}
	}
	r := a.tokenCorrelation()
	if c, ok := findCorrelation(a.corrs, seriesInputTokens, ComponentTTFT); ok && !math.IsNaN(r) {
		verb := "follows"
		if r < strongR {
			verb = "barely follows"
		}
		a.add(fmt.Sprintf("TTFT %s prompt length (Spearman ρ = %s over %d requests).", verb, fmtR(val(c.Spearman)), c.Pairs),
			figures("rho_ttft_input_tokens", val(c.Spearman), "r_ttft_input_tokens", val(c.Pearson)))
		if r >= strongR {
			a.bonus += 0.2
		}
	}
	if shift >= 1.5 {
		a.cause = fmt.Sprintf("prompts got longer (input tokens p50 %s → %s) and prefill grew with them", fmtTokens(ref), fmtTokens(now))
	} else {
		a.cause = "prefill slowed without longer prompts"
		a.add("Prompts did not get longer: prefill itself slowed (GPU contention, chunked prefill interleaving, or a slower GPU).", nil)
	}
}

func (a *analysis) corroborateColdStart(g *group) {
	from := a.in.Window.From.Add(-max(a.in.Window.Duration()/10, a.width))
	var scale []telemetry.Event
	var started []string
	for _, e := range a.in.Events {
		if e.Time.Before(from) || !e.Time.Before(a.in.Window.To) {
			continue
		}
		switch e.Kind {
		case telemetry.EventScale:
			scale = append(scale, e)
		case telemetry.EventInstanceStarted:
			if e.Instance != "" {
				started = append(started, fmt.Sprintf("%s at %s", e.Instance, fmtClock(e.Time)))
			}
		}
	}
	slices.SortStableFunc(scale, func(x, y telemetry.Event) int { return x.Time.Compare(y.Time) })
	fromZero := false
	var firstUp *telemetry.Event
	if len(scale) > 0 {
		var steps []string
		up := false
		for i, e := range scale {
			f, t := replicas(e.FromReplicas), replicas(e.ToReplicas)
			if i < 3 {
				steps = append(steps, fmt.Sprintf("%s → %s replicas at %s", f, t, fmtClock(e.Time)))
			}
			if e.ToReplicas != nil && (e.FromReplicas == nil || *e.ToReplicas > *e.FromReplicas) {
				up = true
				if firstUp == nil {
					firstUp = &scale[i]
				}
				if e.FromReplicas != nil && *e.FromReplicas == 0 {
					fromZero = true
				}
			}
		}
		noun := "scale events"
		if len(scale) == 1 {
			noun = "scale event"
		}
		a.add(fmt.Sprintf("%d %s: %s.", len(scale), noun, strings.Join(steps, ", ")),
			figures("scale_events", float64(len(scale))))
		if up {
			a.bonus += 0.15
		}
		if fromZero {
			a.bonus += 0.05
		}
	} else {
		a.add("No scale events recorded around the window (send them to POST /api/v1/events to confirm).", nil)
	}
	newInst := a.newInstances()
	if len(started) > 0 || len(newInst) > 0 {
		var text string
		if len(started) > 0 {
			text = "Instances started: " + strings.Join(firstN(started, 3), ", ")
		} else {
			text = "New instances not seen in the baseline: " + strings.Join(firstN(newInst, 3), ", ")
		}
		a.add(text+".", figures("new_instances", float64(max(len(started), len(newInst)))))
		a.bonus += 0.1
	}
	slowCold, fastCold := coldShare(a.in.Requests, g.slow), coldShare(a.in.Requests, g.fast)
	wait := stats.Summarize(values(a.in.Requests, ComponentColdStartWait))
	if slowCold > 0 || wait.N > 0 {
		text := fmt.Sprintf("%s of slow requests were cold starts, %s of fast ones", fmtPct(slowCold), fmtPct(fastCold))
		if wait.N > 0 {
			verb := "were"
			if wait.N == 1 {
				verb = "was"
			}
			text += fmt.Sprintf("; %s %s held, cold-start wait p95 %s", Plural(wait.N, "request"), verb, fmtMs(wait.P95))
		}
		a.add(text+".", figures("slow_cold_share", slowCold, "fast_cold_share", fastCold,
			"held_requests", float64(wait.N), "cold_start_wait_p95_ms", wait.P95))
		if slowCold >= 1.0/3 {
			a.bonus += 0.05
		}
	}
	switch {
	case firstUp != nil:
		a.cause = fmt.Sprintf("requests were held while a new instance started (scale %s → %s at %s)",
			replicas(firstUp.FromReplicas), replicas(firstUp.ToReplicas), fmtClock(firstUp.Time))
	default:
		a.cause = "requests were held while new instances started"
	}
}

func (a *analysis) corroborateDecode(g *group) {
	itl := a.comps[ComponentITL]
	itlGrew := false
	if itl.P95 != nil && itl.BaselineP95 != nil {
		b, w := *itl.BaselineP95, *itl.P95
		a.add(fmt.Sprintf("ITL p95 %s → %s (TPOT %s → %s tok/s).", fmtMs(b), fmtMs(w), fmtCount(1000/b), fmtCount(1000/w)),
			figures("itl_p95_ms", w, "baseline_itl_p95_ms", b))
		itlGrew = w >= noiseRatio*b
		if itlGrew {
			a.bonus += 0.15
		}
	}
	runMax, runBase := gaugeMax(a.metricsWin, MetricRequestsRunning), gaugeMax(a.metricsBase, MetricRequestsRunning)
	memoryBound := false
	if !math.IsNaN(runMax) {
		text := fmt.Sprintf("Up to %s running", gaugeNoun(runMax, "request"))
		if !math.IsNaN(runBase) {
			text += fmt.Sprintf(" (baseline max %s)", fmtCount(runBase))
		}
		figs := figures("running_max", runMax, "baseline_running_max", runBase)
		if c, ok := findCorrelation(a.corrs, MetricRequestsRunning, seriesITLP95); ok && c.Pearson != nil {
			text += fmt.Sprintf("; ITL p95 follows the batch (r = %s per %s)", fmtR(*c.Pearson), c.Per)
			figs["r_running_itl_p95"] = *c.Pearson
			if c.best() >= strongR {
				memoryBound = true
				a.bonus += 0.15
			}
		}
		a.add(text+".", figs)
	}
	if kv := gaugeMax(a.metricsWin, MetricKVCacheUsage); kv >= kvFull {
		a.add(fmt.Sprintf("KV cache up to %s: decode competes for memory bandwidth.", fmtPct(kv)), figures("kv_max", kv))
		a.bonus += 0.05
		memoryBound = true
	}
	now, ref := a.slowTokens(g, false)
	longer := stats.Ratio(now, ref) >= longerAnswers
	if longer {
		a.add(fmt.Sprintf("Answers got longer: slow requests' output tokens p50 %s vs %s.", fmtTokens(now), fmtTokens(ref)),
			figures("output_tokens_p50", now, "reference_output_tokens_p50", ref))
		if !itlGrew {
			a.bonus += 0.1
		}
	}
	switch {
	case itlGrew && memoryBound:
		a.cause = fmt.Sprintf("decoding slowed as the batch grew (ITL p95 %s → %s, memory-bound)", fmtMs(val(itl.BaselineP95)), fmtMs(val(itl.P95)))
	case itlGrew:
		a.cause = fmt.Sprintf("decoding slowed (ITL p95 %s → %s)", fmtMs(val(itl.BaselineP95)), fmtMs(val(itl.P95)))
	case longer:
		a.cause = fmt.Sprintf("answers got longer (output tokens p50 %s → %s)", fmtTokens(ref), fmtTokens(now))
	default:
		a.cause = "decode time grew"
	}
}

func (a *analysis) corroborateNetwork() {
	q, p := a.comps[ComponentQueue], a.comps[ComponentPrefill]
	flat := q.P95 != nil && p.P95 != nil && q.BaselineP95 != nil && p.BaselineP95 != nil &&
		!moved(*q.BaselineP95, *q.P95, noiseMs) && !moved(*p.BaselineP95, *p.P95, noiseMs)
	if flat {
		a.add(fmt.Sprintf("The server is not slower: queue p95 %s → %s, prefill p95 %s → %s; the time is spent between server and client (network, gateway, proxy).",
			fmtMs(*q.BaselineP95), fmtMs(*q.P95), fmtMs(*p.BaselineP95), fmtMs(*p.P95)), nil)
		a.bonus += 0.2
	}
	n := a.comps[ComponentNetwork]
	a.cause = fmt.Sprintf("the time between the server's first token and the client's grew (network or gateway, p95 %s → %s)",
		fmtMs(val(n.BaselineP95)), fmtMs(val(n.P95)))
}

func (a *analysis) corroboratePreInference() {
	t := a.comps[ComponentTTFT]
	if t.P95 != nil && t.BaselineP95 != nil && !moved(*t.BaselineP95, *t.P95, noiseMs) {
		a.add(fmt.Sprintf("The model call is unchanged: TTFT p95 %s → %s.", fmtMs(*t.BaselineP95), fmtMs(*t.P95)),
			figures("ttft_p95_ms", *t.P95, "baseline_ttft_p95_ms", *t.BaselineP95))
		a.bonus += 0.2
	}
	p := a.comps[ComponentPreInference]
	a.cause = fmt.Sprintf("app work before the model call (retrieval, tools) slowed: pre-inference p95 %s → %s",
		fmtMs(val(p.BaselineP95)), fmtMs(val(p.P95)))
}

func (a *analysis) corroborateProvider(g *group) {
	now, ref := a.slowTokens(g, true)
	if shift := stats.Ratio(now, ref); !math.IsNaN(shift) {
		a.add(fmt.Sprintf("Prompts did not get longer: slow requests' input tokens p50 %s vs %s.", fmtTokens(now), fmtTokens(ref)),
			figures("input_tokens_p50", now, "reference_input_tokens_p50", ref))
		if shift < 1.3 {
			a.bonus += 0.15
		}
	}
	if c, ok := findCorrelation(a.corrs, seriesInputTokens, ComponentTTFT); ok {
		r := c.best()
		a.add(fmt.Sprintf("TTFT does not follow prompt length (Spearman ρ = %s over %d requests).", fmtR(val(c.Spearman)), c.Pairs),
			figures("rho_ttft_input_tokens", val(c.Spearman)))
		if r < 0.3 {
			a.bonus += 0.15
		}
	}
	who := strings.TrimSpace(mostCommon(a.in.Requests, g.slow, func(r *telemetry.LLMRequest) string { return r.Provider }) + " " +
		mostCommon(a.in.Requests, g.slow, func(r *telemetry.LLMRequest) string { return r.Model }))
	if who == "" {
		who = "the managed API"
	}
	a.cause = "the provider (" + who + ") got slower to its first token while prompt sizes did not change"
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

// bubbleUpFor runs bubble-up over a headline's slow requests.
func (a *analysis) bubbleUpFor(g *group) []Attribution {
	if g == nil {
		return nil
	}
	if a.attrs == nil {
		a.attrs = newAttrIndex(a.in.Requests, a.in.BaselineRequests, a.in.Attributes)
	}
	return a.attrs.bubbleUp(g.slow)
}

// bubbleEvidence quotes the strongest bubble-up finding when it is clearly
// concentrated.
func (a *analysis) bubbleEvidence() {
	for _, b := range a.bubble {
		if b.Key == KeyColdStart {
			continue // the cold-start evidence already says it
		}
		if b.Difference >= 0.3 && b.SlowShare >= 0.5 {
			a.add(capitalize(b.sentence())+".", figures("slow_share", b.SlowShare, "fast_share", b.FastShare))
		}
		return
	}
}

// secondaryEvidence names other parts whose p95 also grew beyond noise: the
// smaller cause of a mixed incident.
func (a *analysis) secondaryEvidence() {
	if a.mode != modeRegression {
		return
	}
	for _, c := range a.ranked[1:] {
		if c.comp == componentBundled || c.comp == a.winner.comp || (a.blockedQueue != nil && c.comp == ComponentQueue) {
			continue
		}
		st := a.comps[c.comp]
		if st.P95 == nil || st.BaselineP95 == nil || !(*st.P95 > *st.BaselineP95) || !moved(*st.BaselineP95, *st.P95, noiseMs) {
			continue
		}
		a.add(fmt.Sprintf("Also: %s p95 %s → %s (smaller; %s of the slow requests' %s growth).",
			componentLabel[c.comp], fmtMs(*st.BaselineP95), fmtMs(*st.P95), fmtPct(c.explained), c.g.short),
			figures("p95_ms", *st.P95, "baseline_p95_ms", *st.BaselineP95, "explained", c.explained))
	}
}

// summary writes the one sentence.
func (a *analysis) summary(v Verdict) string {
	g := a.winner.g
	if g == nil {
		g = a.primaryGroup()
	}
	switch a.mode {
	case modeSelf:
		return fmt.Sprintf("With %s to compare with, the window's %s p95 of %s against a p50 of %s is slow because %s.",
			a.baselineLack(), g.label, fmtMs(g.winSum.P95), fmtMs(g.winSum.P50), a.cause)
	case modeSLO:
		return fmt.Sprintf("%s p95 %s misses the SLO because %s.", g.label, fmtMs(g.winSum.P95), a.cause)
	}
	return fmt.Sprintf("%s p95 rose from %s to %s because %s.", g.label, fmtMs(g.baseSum.P95), fmtMs(g.winSum.P95), a.cause)
}

// add appends evidence; numbering happens at the end.
func (a *analysis) add(text string, figs map[string]float64) {
	a.evidence = append(a.evidence, Evidence{Text: text, Figures: figs})
}

func (a *analysis) numbered() []Evidence {
	out := make([]Evidence, len(a.evidence))
	for i, e := range a.evidence {
		e.N = i + 1
		out[i] = e
	}
	return out
}

// newInstances lists instances serving the window that the baseline never
// saw.
func (a *analysis) newInstances() []string {
	if !a.hasBaseline {
		return nil
	}
	seen := map[string]bool{}
	for i := range a.in.BaselineRequests {
		seen[a.in.BaselineRequests[i].Instance] = true
	}
	var out []string
	for i := range a.in.Requests {
		inst := a.in.Requests[i].Instance
		if inst != "" && !seen[inst] {
			seen[inst] = true
			out = append(out, inst)
		}
	}
	return out
}

// figures builds a figures map from name/value pairs, leaving out NaN.
func figures(kv ...any) map[string]float64 {
	out := map[string]float64{}
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1].(float64)
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[kv[i].(string)] = v
		}
	}
	return out
}

func mostCommon(reqs []telemetry.LLMRequest, idx []int, f func(*telemetry.LLMRequest) string) string {
	counts := map[string]int{}
	best, bestN := "", 0
	for _, i := range idx {
		v := f(&reqs[i])
		if v == "" {
			continue
		}
		counts[v]++
		if counts[v] > bestN || (counts[v] == bestN && v < best) {
			best, bestN = v, counts[v]
		}
	}
	return best
}

func replicas(p *int32) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

func lagPhrase(lag int) string {
	switch {
	case lag == 0:
		return ""
	case lag > 0:
		return fmt.Sprintf(", leading by %d", lag)
	default:
		return fmt.Sprintf(", lagging by %d", -lag)
	}
}

func firstN(xs []string, n int) []string {
	if len(xs) > n {
		return append(xs[:n:n], fmt.Sprintf("and %d more", len(xs)-n))
	}
	return xs
}

// baselineLack says why the baseline was not used: "no baseline requests"
// or "only 4 baseline requests".
func (a *analysis) baselineLack() string {
	if n := len(a.in.BaselineRequests); n > 0 {
		return fmt.Sprintf("only %s", Plural(n, "baseline request"))
	}
	return "no baseline requests"
}

// Plural writes "1 slow request", "7 slow requests".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// gaugeNoun writes a gauge's count with its noun: "1 request", "39
// requests", "2.5 requests" (a gauge averaged over scrapes).
func gaugeNoun(x float64, noun string) string {
	if x == 1 {
		return "1 " + noun
	}
	return fmtCount(x) + " " + noun + "s"
}

// above says how the slow set relates to the p90: "above", or "at or
// above" when ties at the top had to be taken.
func (g *group) above() string {
	for _, i := range g.slow {
		if !(g.win[i] > g.p90) {
			return "at or above"
		}
	}
	return "above"
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }
