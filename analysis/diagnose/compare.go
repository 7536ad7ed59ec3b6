package diagnose

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Noise thresholds: a change counts only when it is both relatively and
// absolutely large, so 10 → 40 ms and 10.0 → 10.5 s are both "same".
const (
	noiseRatio = 1.2  // ≥ 20 % growth
	noiseMs    = 50.0 // ≥ 50 ms for request latencies
)

// CompareOptions adds what requests alone cannot say to a comparison.
type CompareOptions struct {
	BeforeMetrics, AfterMetrics []telemetry.MetricPoint
	// Prices enables cost per task; nil leaves it out.
	Prices map[string]Price
	// BeforeTotal and AfterTotal are the true request counts of sampled
	// sides (0: the rows are complete).
	BeforeTotal, AfterTotal int
	// TotalsEstimated: a total was scaled up from its sample.
	TotalsEstimated bool
	// Before and After are the windows, when known: a side whose requests
	// start well inside its window says so (Comparison.BeforeDataFrom).
	Before, After Range
}

// Change is one figure before and after. Delta is after − before, Ratio is
// after / before, each at p50, p95 and p99.
type Change struct {
	Name           string      `json:"name"`
	Unit           string      `json:"unit"` // ms, tok/s, tokens, usd, calls, ratio, requests
	HigherIsBetter bool        `json:"higher_is_better"`
	Before         Percentiles `json:"before"`
	After          Percentiles `json:"after"`
	Delta          Percentiles `json:"delta"`
	Ratio          Percentiles `json:"ratio"`
	// Direction is judged at p95 against the noise thresholds: better,
	// worse, same, or unknown when a side has no data; changed for a
	// workload figure (tokens per request, requests running), which moved
	// but is neither better nor worse in itself.
	Direction string `json:"direction"`
}

// Comparison is what changed between two windows of the same service: the
// page that shows what an optimization cost elsewhere.
type Comparison struct {
	BeforeRequests int `json:"before_requests"`
	AfterRequests  int `json:"after_requests"`
	// RequestsEstimated: the counts are estimates from samples.
	RequestsEstimated bool     `json:"requests_estimated,omitempty"`
	BeforeErrorRate   float64  `json:"before_error_rate"`
	AfterErrorRate    float64  `json:"after_error_rate"`
	Changes           []Change `json:"changes"`
	// BeforeDataFrom and AfterDataFrom are a side's first request when it
	// starts more than a tenth of the way into its window (as
	// Diagnosis.BaselineDataFrom).
	BeforeDataFrom *time.Time `json:"before_data_from,omitempty"`
	AfterDataFrom  *time.Time `json:"after_data_from,omitempty"`
	Better         []string   `json:"better"` // names that improved beyond noise
	Worse          []string   `json:"worse"`  // names that got worse beyond noise
	// Changed names workload figures that moved beyond noise.
	Changed []string `json:"changed"`
	Summary string   `json:"summary"`
}

// metric is one comparable figure: its samples on each side and how to
// judge a change.
type metric struct {
	name           string
	unit           string
	higherIsBetter bool
	minAbs         float64 // smallest absolute change that is not noise
	before, after  stats.Sorted
	// tailLow reads pXX at the low end (1−q), for figures where small is
	// the bad tail: TPOT p95 is the speed 95 % of requests reach.
	tailLow bool
	// workload: the figure describes the load, not how well it was served
	// (longer prompts are not "worse"), so a move is "changed".
	workload bool
}

// Compare reports every component and metric of the two windows at p50,
// p95 and p99 with delta and ratio, and which got better or worse.
func Compare(before, after []telemetry.LLMRequest, opt CompareOptions) Comparison {
	return compare(newColumns(before), newColumns(after), opt)
}

// compare is Compare over columns a diagnosis has already sorted.
func compare(bc, ac *columns, opt CompareOptions) Comparison {
	before, after := bc.reqs, ac.reqs
	side := func(name string) (stats.Sorted, stats.Sorted) { return bc.sortedOf(name), ac.sortedOf(name) }
	var ms []metric
	for _, name := range Components {
		m := metric{name: name, unit: "ms", minAbs: componentNoise(name)}
		m.before, m.after = side(name)
		switch name {
		case ComponentColdStartWait:
			// No wait recorded means no wait: read over every request, so
			// held requests appearing in one window show as a change.
			m.before, m.after = side(columnColdWaitAll)
			// Beside it, how many were held: a few cold starts leave the
			// wait's p95 at 0 but still hold someone (TestCompareColdStarts).
			ms = append(ms, m, metric{name: MetricColdStarts, unit: "ratio", minAbs: 0.01,
				before: heldShare(before), after: heldShare(after)})
			continue
		}
		ms = append(ms, m)
	}
	tp := metric{name: "tpot", unit: "tok/s", higherIsBetter: true, minAbs: 2, tailLow: true}
	tp.before, tp.after = side(columnTPOT)
	in := metric{name: "input_tokens", unit: "tokens", minAbs: 50, workload: true}
	in.before, in.after = side(columnInputTokens)
	out := metric{name: "output_tokens", unit: "tokens", minAbs: 50, workload: true}
	out.before, out.after = side(columnOutputTokens)
	ms = append(ms, tp, in, out)
	costB, callsB := taskValues(before, opt.Prices)
	costA, callsA := taskValues(after, opt.Prices)
	ms = append(ms, metric{name: "calls_per_task", unit: "calls", minAbs: 0.5, before: stats.Sort(callsB), after: stats.Sort(callsA)})
	if opt.Prices != nil {
		ms = append(ms, metric{name: "cost_per_task", unit: "usd", before: stats.Sort(costB), after: stats.Sort(costA)})
	}
	for _, g := range []struct {
		name     string
		minAbs   float64
		unit     string
		workload bool
	}{
		{MetricKVCacheUsage, 0.05, "ratio", false},
		{MetricRequestsWaiting, 1, "requests", false},
		{MetricRequestsRunning, 1, "requests", true},
	} {
		ms = append(ms, metric{name: g.name, unit: g.unit, minAbs: g.minAbs, workload: g.workload,
			before: stats.Sort(gauge(opt.BeforeMetrics, g.name)), after: stats.Sort(gauge(opt.AfterMetrics, g.name))})
	}

	c := Comparison{
		BeforeRequests: orLen(opt.BeforeTotal, len(before)), AfterRequests: orLen(opt.AfterTotal, len(after)), RequestsEstimated: opt.TotalsEstimated,
		BeforeErrorRate: errorRate(before), AfterErrorRate: errorRate(after),
		Better: []string{}, Worse: []string{}, Changed: []string{}, // [] in JSON when nothing moved
	}
	c.BeforeDataFrom, c.AfterDataFrom = lateFirstStart(before, opt.Before), lateFirstStart(after, opt.After)
	var better, worse, changed []string
	for _, m := range ms {
		ch := m.change()
		if len(m.before)+len(m.after) == 0 {
			continue // neither side has the figure at all
		}
		c.Changes = append(c.Changes, ch)
		p95 := fmt.Sprintf("%s p95 %s → %s", MetricLabel(m.name), fmtValue(val(ch.Before.P95), m.unit), fmtValue(val(ch.After.P95), m.unit))
		switch ch.Direction {
		case "changed":
			c.Changed = append(c.Changed, m.name)
			changed = append(changed, p95)
		case "better":
			c.Better = append(c.Better, m.name)
			better = append(better, p95)
		case "worse":
			c.Worse = append(c.Worse, m.name)
			worse = append(worse, p95)
		}
	}
	c.Summary = compareSummary(better, worse, changed)
	return c
}

func compareSummary(better, worse, changed []string) string {
	var s string
	switch {
	case len(better) == 0 && len(worse) == 0:
		s = "Nothing got better or worse beyond noise."
		if len(changed) == 0 {
			return "Nothing changed beyond noise."
		}
	case len(worse) == 0:
		s = "Better: " + strings.Join(better, "; ") + "; nothing got worse."
	case len(better) == 0:
		s = "Worse: " + strings.Join(worse, "; ") + "."
	default:
		s = "Better: " + strings.Join(better, "; ") + "; but worse elsewhere: " + strings.Join(worse, "; ") + "."
	}
	if len(changed) > 0 {
		s += " The workload changed: " + strings.Join(changed, "; ") + "."
	}
	return s
}

// metricWords names comparison metrics in the words pages use.
var metricWords = strings.NewReplacer(
	"pre_inference", "pre-inference", "cold_start_wait", "cold-start wait", "cold_starts", "cold starts",
	"ttft", "TTFT", "e2e", "E2E", "itl", "ITL", "tpot", "TPOT",
	"input_tokens", "input tokens", "output_tokens", "output tokens",
	"calls_per_task", "LLM calls per task", "cost_per_task", "cost per task",
	"kv_cache_usage", "KV-cache usage", "requests_waiting", "requests waiting", "requests_running", "requests running",
)

// MetricLabel names a comparison metric for a reader ("KV-cache usage"),
// in the API's summary and on every page alike.
func MetricLabel(name string) string { return metricWords.Replace(name) }

// change computes the percentiles, deltas and direction of one metric.
func (m metric) change() Change {
	qs := []float64{0.50, 0.95, 0.99}
	if m.tailLow {
		qs = []float64{0.50, 0.05, 0.01}
	}
	b := []float64{m.before.Quantile(qs[0]), m.before.Quantile(qs[1]), m.before.Quantile(qs[2])}
	a := []float64{m.after.Quantile(qs[0]), m.after.Quantile(qs[1]), m.after.Quantile(qs[2])}
	ch := Change{
		Name: m.name, Unit: m.unit, HigherIsBetter: m.higherIsBetter,
		Before: Percentiles{num(b[0]), num(b[1]), num(b[2])},
		After:  Percentiles{num(a[0]), num(a[1]), num(a[2])},
		Delta:  Percentiles{num(a[0] - b[0]), num(a[1] - b[1]), num(a[2] - b[2])},
		Ratio:  Percentiles{num(stats.Ratio(a[0], b[0])), num(stats.Ratio(a[1], b[1])), num(stats.Ratio(a[2], b[2]))},
	}
	ch.Direction = direction(b[1], a[1], m.minAbs, m.higherIsBetter)
	if m.workload && (ch.Direction == "better" || ch.Direction == "worse") {
		ch.Direction = "changed"
	}
	return ch
}

// componentNoise is the smallest change of a component's p95 (ms) that
// is not noise.
func componentNoise(name string) float64 {
	if name == ComponentITL {
		return 5 // ITL lives in tens of ms
	}
	return noiseMs
}

// ComponentDirection judges a component's p95 going from before to after
// (ms) as Compare does: better, worse or same. Pages judge with it a
// figure they show over other requests than Compare reads: the diagnosis
// page's cold-start wait is over the held requests, Compare's over every
// request.
func ComponentDirection(name string, before, after float64) string {
	return direction(before, after, componentNoise(name), false)
}

// direction judges a p95 change against the noise thresholds.
func direction(before, after, minAbs float64, higherIsBetter bool) string {
	if math.IsNaN(before) || math.IsNaN(after) {
		return "unknown"
	}
	if !moved(before, after, minAbs) {
		return "same"
	}
	if (after > before) == higherIsBetter {
		return "better"
	}
	return "worse"
}

// moved reports whether a figure changed beyond noise in either direction:
// at least minAbs and at least 20 % of the smaller side.
func moved(before, after, minAbs float64) bool {
	lo, hi := math.Min(before, after), math.Max(before, after)
	if hi-lo < minAbs {
		return false
	}
	return lo <= 0 || hi/lo >= noiseRatio
}

// tpot is the decode speed per request, tokens per second.
func tpot(reqs []telemetry.LLMRequest) []float64 {
	itl := values(reqs, ComponentITL)
	for i, v := range itl {
		if v > 0 {
			itl[i] = 1000 / v
		} else {
			itl[i] = nan
		}
	}
	return itl
}

// gauge returns every sample of one metric.
func gauge(points []telemetry.MetricPoint, name string) []float64 {
	var out []float64
	for _, p := range points {
		if p.Name == name {
			out = append(out, p.Value)
		}
	}
	return out
}

// MetricColdStarts is the comparison's share of requests held by a cold
// start.
const MetricColdStarts = "cold_starts"

// heldShare is the share of reqs that were cold starts, as a one-value
// sample (its percentiles are the share); none without requests.
func heldShare(reqs []telemetry.LLMRequest) stats.Sorted {
	if len(reqs) == 0 {
		return nil
	}
	n := 0
	for i := range reqs {
		if reqs[i].ColdStart {
			n++
		}
	}
	return stats.Sort([]float64{stats.Share(n, len(reqs))})
}

func errorRate(reqs []telemetry.LLMRequest) float64 {
	n := 0
	for i := range reqs {
		if reqs[i].Error {
			n++
		}
	}
	return stats.Share(n, len(reqs))
}

// fmtValue formats a figure in its unit.
func fmtValue(x float64, unit string) string {
	switch unit {
	case "ms":
		return fmtMs(x)
	case "tokens":
		return fmtTokens(x)
	case "tok/s":
		return fmtCount(x) + " tok/s"
	case "usd":
		return fmt.Sprintf("$%.4f", x)
	case "ratio":
		return fmtPct(x)
	}
	return fmtCount(x)
}
