package diagnose

import (
	"fmt"
	"math"
	"strings"
)

// VerdictHealthy: nothing moved beyond noise and the SLO, if any, holds.
const VerdictHealthy Verdict = "healthy"

// Healthy is reached when no headline regressed (chooseMode), not by a
// part of the request, so its rule only names it.
func init() {
	register(verdictRule{Verdict: VerdictHealthy, Label: "Healthy",
		Claim: (*analysis).claimHealthyFromServer, Summary: (*analysis).healthyServerSummary})
}

// claimHealthyFromServer: without server spans, the servers' histograms
// moved within their buckets and the calls did not regress either (or
// there are no calls: a server known only by its metrics).
func (a *analysis) claimHealthyFromServer() bool {
	f := a.serverPicked(VerdictHealthy)
	if f == nil || len(a.in.Requests) > 0 && a.mode != modeHealthy {
		return false
	}
	if len(a.in.Requests) > 0 {
		a.healthy()
	}
	a.addEvidence(f.splitEvidence())
	a.bonus += 0.3
	return true
}

func (a *analysis) healthyServerSummary() string {
	return fmt.Sprintf("Healthy: the histograms of %s show no queue, prefill or decode growth beyond their bucket resolution.", strings.Join(a.server.sm.Servers, ", "))
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
