package diagnose

import (
	"math"
	"sort"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// mode is what the slow requests are compared with.
type mode int

const (
	// modeHealthy: nothing to attribute.
	modeHealthy mode = iota - 1
	// modeRegression compares with the baseline window.
	modeRegression
	// modeSelf has no baseline: the slow requests are compared with the
	// rest of the window (slow vs typical).
	modeSelf
	// modeSLO: nothing regressed (or no baseline) but the SLO is missed, so
	// the question is what the slow requests spend their time on.
	modeSLO
)

// Thresholds of the attribution.
const (
	// minBaselineRequests: below this a baseline p95 is a guess, and the
	// window is judged on its own.
	minBaselineRequests = 10
	// selfTailRatio and selfTailMs: without a baseline, slow requests are a
	// problem when they average ≥ 4× the window's p50 and ≥ 250 ms more.
	selfTailRatio = 4.0
	selfTailMs    = 250.0
	// ciZ is the z of the p95 confidence intervals a regression must clear
	// (~90 % each side): small windows have rough tails.
	ciZ = 1.645
	// minScoreDenominatorMs keeps a 20 ms TTFT from turning a 60 ms bump
	// into a huge relative score.
	minScoreDenominatorMs = 100.0
)

// group is one headline latency and the additive parts it is made of:
// TTFT = queue + prefill + network + cold-start wait (or the provider's
// bundled TTFT), E2E = TTFT + decode, first token as the user sees it =
// pre-inference + TTFT.
type group struct {
	name  string // ttft, e2e, first_token
	label string // how a sentence starts with the headline
	short string // how a sentence names it midway
	comps []string
	total func(*telemetry.LLMRequest) float64

	win, base       []float64 // headline per request, NaN unknown
	winSorted       stats.Sorted
	baseSorted      stats.Sorted
	winSum, baseSum stats.Summary
	p90             float64
	slow, fast      []int // window indexes with a known headline
	baseSlow        []int
	ref             float64 // what slow requests are compared with
	slowMean        float64
	growth          float64 // slowMean − ref
	regressed       bool
	grewBySize      bool // p95 grew ≥ 20 % and ≥ 50 ms, sampling error aside
	ttftKnown       bool
	partsWin        map[string][]float64 // part per window request
	partsBase       map[string][]float64
	// noise says why a regression beyond the sampling error was still
	// judged noise (decodeWithinNoise); empty otherwise.
	noise string
}

// candidate is one part of one headline and how much it grew among the
// slow requests.
type candidate struct {
	comp      string
	g         *group
	slowMean  float64
	ref       float64
	growth    float64
	score     float64 // growth relative to the headline: comparable across headlines
	explained float64 // share of the headline's growth, 0..1
}

// part returns a request's contribution to a headline, 0 when unstated so
// the parts stay additive (a request without a cold start waited 0 ms).
func part(r *telemetry.LLMRequest, comp string, ttftKnown bool) float64 {
	if comp == componentBundled {
		if hasSplit(r) {
			return 0
		}
		if v, ok := ComponentValue(r, ComponentTTFT); ok && ttftKnown {
			return v
		}
		// Non-streaming managed call: everything but decode is bundled.
		e2e, ok := ComponentValue(r, ComponentE2E)
		if !ok {
			return 0
		}
		d, _ := ComponentValue(r, ComponentDecode)
		return math.Max(0, e2e-d)
	}
	v, _ := ComponentValue(r, comp)
	return v
}

// buildGroups sets up the headlines the requests can support.
func buildGroups(wc, bc *columns) []*group {
	n := len(wc.reqs)
	ttftKnown := len(wc.sortedOf(ComponentTTFT))*2 >= n && n > 0
	preKnown := len(wc.sortedOf(ComponentPreInference))*2 >= n && n > 0
	ttftParts := []string{ComponentQueue, ComponentPrefill, ComponentNetwork, ComponentColdStartWait, componentBundled}
	sum := func(names ...string) func(*telemetry.LLMRequest) float64 {
		return func(r *telemetry.LLMRequest) float64 {
			t := 0.0
			for _, n := range names {
				v, ok := ComponentValue(r, n)
				if !ok {
					return nan
				}
				t += v
			}
			return t
		}
	}
	var gs []*group
	if ttftKnown {
		gs = append(gs,
			&group{name: "ttft", label: "TTFT", short: "TTFT", comps: ttftParts, total: sum(ComponentTTFT)},
			&group{name: "e2e", label: "E2E", short: "E2E", comps: append([]string{ComponentDecode}, ttftParts...), total: sum(ComponentE2E)},
		)
		if preKnown {
			gs = append(gs, &group{name: "first_token", label: "Time to first token including pre-inference", short: "first-token time",
				comps: append([]string{ComponentPreInference}, ttftParts...), total: sum(ComponentPreInference, ComponentTTFT)})
		}
	} else {
		gs = append(gs, &group{name: "e2e", label: "E2E", short: "E2E", comps: append([]string{ComponentDecode}, ttftParts...), total: sum(ComponentE2E)})
		if preKnown {
			gs = append(gs, &group{name: "first_token", label: "E2E including pre-inference", short: "E2E with pre-inference",
				comps: append([]string{ComponentPreInference, ComponentDecode}, ttftParts...), total: sum(ComponentPreInference, ComponentE2E)})
		}
	}
	for _, g := range gs {
		g.ttftKnown = ttftKnown
		switch g.name {
		case "ttft", "e2e":
			// The headline is a plain column: reuse its sort.
			g.win, g.base = wc.column(g.name), bc.column(g.name)
			g.winSorted, g.baseSorted = wc.sortedOf(g.name), bc.sortedOf(g.name)
		default:
			g.win, g.base = headline(wc.reqs, g.total), headline(bc.reqs, g.total)
			g.winSorted, g.baseSorted = stats.Sort(g.win), stats.Sort(g.base)
		}
		g.winSum, g.baseSum = g.winSorted.Summary(), g.baseSorted.Summary()
		g.p90 = g.winSorted.Quantile(0.90)
		g.slow, g.fast = splitSlow(g.win, g.p90)
		g.baseSlow, _ = splitSlow(g.base, g.baseSorted.Quantile(0.90))
		g.partsWin, g.partsBase = map[string][]float64{}, map[string][]float64{}
		for _, c := range g.comps {
			g.partsWin[c] = wc.part(c, ttftKnown)
			g.partsBase[c] = bc.part(c, ttftKnown)
		}
	}
	return gs
}

func headline(reqs []telemetry.LLMRequest, total func(*telemetry.LLMRequest) float64) []float64 {
	out := make([]float64, len(reqs))
	for i := range reqs {
		out[i] = total(&reqs[i])
	}
	return out
}

func parts(reqs []telemetry.LLMRequest, comp string, ttftKnown bool) []float64 {
	out := make([]float64, len(reqs))
	for i := range reqs {
		out[i] = part(&reqs[i], comp, ttftKnown)
	}
	return out
}

// splitSlow returns the requests above p90, the p90 of xs ("slow"), and the
// other requests with a value. When nothing is strictly above (a single
// request, or ties at the top) the top values are the slow ones.
func splitSlow(xs []float64, p90 float64) (slow, fast []int) {
	for i, x := range xs {
		switch {
		case math.IsNaN(x):
		case x > p90:
			slow = append(slow, i)
		default:
			fast = append(fast, i)
		}
	}
	if len(slow) == 0 && len(fast) > 0 {
		fast = fast[:0]
		for i, x := range xs {
			switch {
			case math.IsNaN(x):
			case x >= p90:
				slow = append(slow, i)
			default:
				fast = append(fast, i)
			}
		}
	}
	return slow, fast
}

// judge sets the reference and the "regressed" flag of a group for a mode.
func (g *group) judge(m mode, slo *SLOResult) {
	g.noise = ""
	g.slowMean = stats.Mean(pick(g.win, g.slow))
	switch m {
	case modeRegression:
		g.ref = stats.Mean(pick(g.base, g.baseSlow))
		// Beyond noise in size (≥ 20 % and ≥ 50 ms) and beyond sampling
		// error: the window's p95 lower bound clears the baseline's upper.
		winLo, _ := g.winSorted.QuantileCI(0.95, ciZ)
		_, baseHi := g.baseSorted.QuantileCI(0.95, ciZ)
		g.grewBySize = g.winSum.P95 > g.baseSum.P95 && moved(g.baseSum.P95, g.winSum.P95, noiseMs)
		g.regressed = g.grewBySize && winLo > baseHi
	case modeSelf:
		g.ref = stats.Mean(pick(g.win, g.fast))
		g.regressed = g.slowMean >= selfTailRatio*g.winSum.P50 && g.slowMean-g.winSum.P50 >= selfTailMs
	case modeSLO:
		g.ref = 0
		g.regressed = slo != nil && ((g.name == "ttft" && slo.ttftMissed()) || (g.name == "e2e" && slo.tpotMissed()))
	}
	g.growth = g.slowMean - g.ref
}

// candidates scores every part of a regressed group.
func (g *group) candidates(m mode) []candidate {
	if !g.regressed || len(g.slow) == 0 {
		return nil
	}
	denom := math.Max(g.ref, minScoreDenominatorMs)
	if m == modeSLO {
		denom = math.Max(g.slowMean, minScoreDenominatorMs)
	}
	var out []candidate
	for _, c := range g.comps {
		// A missed TPOT is about decode alone: TTFT parts have their own SLO.
		if m == modeSLO && g.name == "e2e" && c != ComponentDecode {
			continue
		}
		slowMean := stats.Mean(pick(g.partsWin[c], g.slow))
		var ref float64
		switch m {
		case modeRegression:
			ref = stats.Mean(pick(g.partsBase[c], g.baseSlow))
		case modeSelf:
			ref = stats.Mean(pick(g.partsWin[c], g.fast))
		}
		if math.IsNaN(ref) {
			ref = 0
		}
		cd := candidate{comp: c, g: g, slowMean: slowMean, ref: ref, growth: slowMean - ref}
		cd.score = cd.growth / denom
		if g.growth > 0 {
			cd.explained = math.Max(0, math.Min(1, cd.growth/g.growth))
		}
		out = append(out, cd)
	}
	return out
}

// rankCandidates keeps each part's best-scoring headline and sorts by score.
func rankCandidates(gs []*group, m mode) []candidate {
	best := map[string]candidate{}
	for _, g := range gs {
		for _, c := range g.candidates(m) {
			if b, ok := best[c.comp]; !ok || c.score > b.score {
				best[c.comp] = c
			}
		}
	}
	out := make([]candidate, 0, len(best))
	for _, c := range best {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].score != out[j].score {
			return out[i].score > out[j].score
		}
		return out[i].comp < out[j].comp
	})
	return out
}
