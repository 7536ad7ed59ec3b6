package diagnose

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// VerdictColdStart: requests were held while a new instance started.
const VerdictColdStart Verdict = "cold_start"

// A cold start wins by its own part (the cold-start wait) or by taking
// over a verdict whose part the hold surfaced in; it is corroborated by
// scale events, new instances and the share of cold slow requests.
func init() {
	register(verdictRule{
		Verdict:     VerdictColdStart,
		Label:       "Cold start",
		CauseWords:  "Requests are held while new instances start",
		Component:   ComponentColdStartWait,
		Override:    (*analysis).coldStartOverride,
		Corroborate: (*analysis).corroborateColdStart,
		Claim:       (*analysis).claimColdStartFromServer,
		Summary:     (*analysis).serverSummary,
	})
}

// claimColdStartFromServer: without server spans, the app's TTFT (or the
// servers' prefill) grew while the servers scaled up or a new instance
// began, and their queue did not: the calls were held before a server
// took them.
func (a *analysis) claimColdStartFromServer() bool {
	f := a.serverPicked(VerdictColdStart)
	if f == nil {
		return false
	}
	firstUp := a.scaleEvidence()
	var ev []Evidence
	if len(f.sm.NewInstances) > 0 {
		ev = append(ev, Evidence{Text: "New server instances whose metrics begin in the window: " + strings.Join(firstN(f.sm.NewInstances, 3), ", ") + ".",
			Figures: figures("new_instances", float64(len(f.sm.NewInstances)))})
	}
	comp, delta := "", 0.0
	if gap, ok := f.clientGap(); ok {
		sd, _ := f.serverTTFTGrowth()
		delta = gap
		ev = append(ev, Evidence{Text: fmt.Sprintf("Client TTFT p95 %s → %s while the servers' own TTFT moved %s: the calls waited before a server took them.",
			fmtMs(*f.clientB), fmtMs(*f.clientP95), fmtDelta(sd)),
			Figures: map[string]float64{"client_ttft_p95": *f.clientP95, "client_ttft_baseline_p95": *f.clientB, "server_ttft_growth_ms": sd}})
	} else {
		delta, _ = f.prefillGrowth()
		if comp = ComponentPrefill; f.comps[ComponentPrefill].P95 == nil {
			comp = ComponentTTFT
		}
	}
	return a.claimFromServer(comp, delta, ev, coldStartCause(firstUp))
}

// coldStartOverride takes over a verdict whose part a hold can surface in
// (queue, prefill, network, provider: HoldSurfaces) when the slow requests
// are mostly cold starts: the hold then merely surfaced in that part.
func (a *analysis) coldStartOverride(g *group, v Verdict) bool {
	if !a.rules.of(v).HoldSurfaces {
		return false
	}
	slowCold, fastCold := coldShare(a.in.Requests, g.slow), coldShare(a.in.Requests, g.fast)
	if slowCold >= 1.0/3 && slowCold >= 3*fastCold {
		a.add(fmt.Sprintf("The hold surfaced as %s time: %s of slow requests were cold starts, %s of fast ones.",
			componentLabel[a.winner.comp], fmtPct(slowCold), fmtPct(fastCold)),
			figures("slow_cold_share", slowCold, "fast_cold_share", fastCold))
		return true
	}
	return false
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

func (a *analysis) corroborateColdStart(g *group) {
	firstUp := a.scaleEvidence()
	newInst := a.newInstances()
	var started []string
	for _, e := range a.in.Events {
		if e.Kind == telemetry.EventInstanceStarted && e.Instance != "" && a.nearWindow(e) {
			started = append(started, fmt.Sprintf("%s at %s", e.Instance, fmtClock(e.Time)))
		}
	}
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
	a.cause = coldStartCause(firstUp)
}

// coldStartCause names the first scale-up when there is one.
func coldStartCause(firstUp *telemetry.Event) string {
	if firstUp == nil {
		return "requests were held while new instances started"
	}
	return fmt.Sprintf("requests were held while a new instance started (scale %s → %s at %s)",
		replicas(firstUp.FromReplicas), replicas(firstUp.ToReplicas), fmtClock(firstUp.Time))
}

// nearWindow reports whether an event lies from shortly before the
// window (a tenth of it, at least one chart bucket) to its end.
func (a *analysis) nearWindow(e telemetry.Event) bool {
	from := a.in.Window.From.Add(-max(a.in.Window.Duration()/10, a.width))
	return !e.Time.Before(from) && e.Time.Before(a.in.Window.To)
}

// scaleEvidence quotes the scale events around the window, moves the
// bonus for a scale-up (from zero) and returns the first scale-up.
func (a *analysis) scaleEvidence() *telemetry.Event {
	var scale []telemetry.Event
	for _, e := range a.in.Events {
		if e.Kind == telemetry.EventScale && a.nearWindow(e) {
			scale = append(scale, e)
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
	return firstUp
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

func replicas(p *int32) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

func firstN(xs []string, n int) []string {
	if len(xs) > n {
		return append(xs[:n:n], fmt.Sprintf("and %d more", len(xs)-n))
	}
	return xs
}
