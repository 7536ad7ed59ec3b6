package diagnose

import (
	"math"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Component names: the parts of a request and the headline latencies, as
// keyed in Diagnosis.Components and used in evidence.
const (
	ComponentPreInference  = "pre_inference"
	ComponentQueue         = "queue"
	ComponentPrefill       = "prefill"
	ComponentNetwork       = "network"
	ComponentDecode        = "decode"
	ComponentTTFT          = "ttft"
	ComponentE2E           = "e2e"
	ComponentITL           = "itl"
	ComponentColdStartWait = "cold_start_wait"
)

// Components lists every component in display order.
var Components = []string{
	ComponentPreInference, ComponentQueue, ComponentPrefill, ComponentNetwork,
	ComponentDecode, ComponentTTFT, ComponentE2E, ComponentITL, ComponentColdStartWait,
}

// componentBundled is the managed API's TTFT, which hides queue, prefill and
// network inside the provider; it only exists inside the attribution.
const componentBundled = "bundled"

// componentLabel is how evidence names a component.
var componentLabel = map[string]string{
	ComponentPreInference:  "pre-inference",
	ComponentQueue:         "queue",
	ComponentPrefill:       "prefill",
	ComponentNetwork:       "network",
	ComponentDecode:        "decode",
	ComponentTTFT:          "TTFT",
	ComponentE2E:           "E2E",
	ComponentITL:           "ITL",
	ComponentColdStartWait: "cold-start wait",
	componentBundled:       "provider TTFT",
}

// ComponentValue returns a component of one request in milliseconds, and
// false when the request does not state it.
func ComponentValue(r *telemetry.LLMRequest, name string) (float64, bool) {
	var p *float64
	switch name {
	case ComponentPreInference:
		p = r.PreInference
	case ComponentQueue:
		p = r.Queue
	case ComponentPrefill:
		p = r.Prefill
	case ComponentNetwork:
		p = r.Network
	case ComponentDecode:
		p = r.Decode
	case ComponentTTFT:
		p = r.TTFT
	case ComponentE2E:
		p = r.E2E
	case ComponentITL:
		p = r.ITL
	case ComponentColdStartWait:
		p = r.ColdStartWait
	}
	if p == nil || math.IsNaN(*p) {
		return 0, false
	}
	return *p, true
}

// values returns one component per request, NaN where unknown, ready for
// the NaN-ignoring stats functions.
func values(reqs []telemetry.LLMRequest, name string) []float64 {
	out := make([]float64, len(reqs))
	for i := range reqs {
		v, ok := ComponentValue(&reqs[i], name)
		if !ok {
			v = math.NaN()
		}
		out[i] = v
	}
	return out
}

// tokens returns input (or output) tokens per request, NaN where unknown.
func tokens(reqs []telemetry.LLMRequest, input bool) []float64 {
	out := make([]float64, len(reqs))
	for i := range reqs {
		p := reqs[i].OutputTokens
		if input {
			p = reqs[i].InputTokens
		}
		out[i] = math.NaN()
		if p != nil {
			out[i] = float64(*p)
		}
	}
	return out
}

// pick returns xs at the given indexes.
func pick(xs []float64, idx []int) []float64 {
	out := make([]float64, len(idx))
	for i, j := range idx {
		out[i] = xs[j]
	}
	return out
}

// hasSplit reports whether the inference server stated any part of TTFT.
func hasSplit(r *telemetry.LLMRequest) bool {
	return r.Queue != nil || r.Prefill != nil || r.Network != nil
}

// componentStats reads every component of window and baseline.
func componentStats(win, base *columns) map[string]ComponentStats {
	out := make(map[string]ComponentStats, len(Components))
	for _, name := range Components {
		w := win.sortedOf(name).Summary()
		b := base.sortedOf(name).Summary()
		out[name] = ComponentStats{
			P50: num(w.P50), P95: num(w.P95), P99: num(w.P99),
			BaselineP50: num(b.P50), BaselineP95: num(b.P95), BaselineP99: num(b.P99),
			Count: w.N, BaselineCount: b.N,
		}
	}
	return out
}

// percentiles converts a summary for JSON (NaN → null).
func percentiles(s stats.Summary) Percentiles {
	return PercentilesOf(s.P50, s.P95, s.P99)
}

// PercentilesOf reads p50, p95 and p99 with NaN as unknown.
func PercentilesOf(p50, p95, p99 float64) Percentiles {
	return Percentiles{P50: num(p50), P95: num(p95), P99: num(p99)}
}

// num turns NaN or ±Inf into nil: JSON has no NaN and nil means unknown.
func num(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// val reads a nullable figure back, NaN for nil.
func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// nan marks an unknown figure inside the package.
var nan = math.NaN()
