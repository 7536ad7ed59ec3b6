package diagnose

import (
	"fmt"
	"math"
	"time"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

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

// stats returns the window/baseline percentiles of a part; the bundled part
// reads as TTFT.
func (a *analysis) stats(comp string) ComponentStats {
	if comp == componentBundled {
		return a.comps[ComponentTTFT]
	}
	return a.comps[comp]
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

// gaugeMax returns the largest sample of a metric.
func gaugeMax(points []telemetry.MetricPoint, name string) float64 {
	return stats.Max(gauge(points, name))
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

// movedWith says in plain words how a latency moved with a gauge, the
// coefficient kept for those who want it: "TTFT p99 rose and fell with it
// (r = 0.79 per 30 s bucket, 30 s behind it)". strongR is where "rose and
// fell" starts, as it is where the correlation counts as corroboration.
func (a *analysis) movedWith(c Correlation, latency, gauge string) string {
	r := *c.Pearson
	verb := "barely moved with"
	switch {
	case r >= strongR:
		verb = "rose and fell with"
	case r >= 0.3:
		verb = "tended to rise with"
	case r <= -0.3:
		verb = "moved against"
	}
	s := fmt.Sprintf("%s %s %s (r = %s per %s", latency, verb, gauge, fmtR(r), c.Per)
	if c.Lag != 0 && a.width > 0 {
		shift := fmtWidth(time.Duration(max(c.Lag, -c.Lag)) * a.width)
		if c.Lag > 0 {
			s += ", " + shift + " behind it"
		} else {
			s += ", " + shift + " ahead of it"
		}
	}
	return s + ")"
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
