package diagnose

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Answers are the seven questions a diagnosis page answers. The first, what
// causes the slowdown, is the verdict itself; the others stand on their own
// and are nil when the data cannot answer them.
type Answers struct {
	Cause    Verdict        `json:"cause"`
	Workload *WorkloadShape `json:"workload"`
	Bound    *TTFTBound     `json:"bound"`
	SLO      *SLOResult     `json:"slo"`
	Decode   *DecodeBound   `json:"decode"`
	Compare  *Comparison    `json:"compare"`
	Cost     *TaskCost      `json:"cost"`
}

// WorkloadShape says whether the model spends its time reading prompts or
// writing answers.
type WorkloadShape struct {
	Kind string `json:"kind"` // prefill-heavy | decode-heavy
	// Basis is what Kind was judged by: "time" (prefill against decode
	// time) or "tokens" (no timings).
	Basis string `json:"basis"`
	// InputTokenShare is input / (input + output) tokens.
	InputTokenShare *float64 `json:"input_token_share"`
	// PrefillTimeShare is prefill / (prefill + decode) time.
	PrefillTimeShare *float64 `json:"prefill_time_share"`
	// PrefillFromTTFT: a managed API bundles prefill, so TTFT stands in.
	PrefillFromTTFT bool     `json:"prefill_from_ttft"`
	InputTokensP50  *float64 `json:"input_tokens_p50"`
	OutputTokensP50 *float64 `json:"output_tokens_p50"`
	Text            string   `json:"text"`
}

// TTFTBound says which part dominates the slow requests' TTFT.
type TTFTBound struct {
	// Kind is prefill, queue, network, cold_start, or bundled (managed API).
	Kind string `json:"kind"`
	// Shares of the slow requests' mean TTFT, by part.
	Shares map[string]float64 `json:"shares"`
	Text   string             `json:"text"`
}

// SLOCheck is one objective against its actual value at the SLO percentile.
type SLOCheck struct {
	Target float64  `json:"target"`
	Actual *float64 `json:"actual"` // nil: no data
	Met    bool     `json:"met"`
}

// SLOResult is the window against the SLO.
type SLOResult struct {
	Percentile float64   `json:"percentile"` // 0..1
	TTFT       *SLOCheck `json:"ttft"`       // ms, must stay under
	TPOT       *SLOCheck `json:"tpot"`       // tok/s, must reach
	// Met is true when no objective with data is missed.
	Met  bool   `json:"met"`
	Text string `json:"text"`
}

func (s *SLOResult) ttftMissed() bool {
	return s != nil && s.TTFT != nil && s.TTFT.Actual != nil && !s.TTFT.Met
}

func (s *SLOResult) tpotMissed() bool {
	return s != nil && s.TPOT != nil && s.TPOT.Actual != nil && !s.TPOT.Met
}

// DecodeBound says whether decode slows as the batch grows.
type DecodeBound struct {
	// Kind is memory-bound (ITL rises with requests running or KV usage),
	// compute-bound (ITL flat while the batch moves), unclear, or unknown
	// (no ITL or no batch metrics).
	Kind     string   `json:"kind"`
	ITLP50   *float64 `json:"itl_p50"`
	ITLP95   *float64 `json:"itl_p95"`
	RunningR *float64 `json:"itl_vs_running_r"`
	KVR      *float64 `json:"itl_vs_kv_r"`
	Text     string   `json:"text"`
	// Source is "dcgm" when the GPU's activity decided (DRAMActive against
	// ComputeActive, the tensor pipes' or else the SMs' ratio, named by
	// ComputeMetric); empty when ITL's relation with the batch did.
	Source        string   `json:"source,omitempty"`
	DRAMActive    *float64 `json:"gpu_dram_active,omitempty"`
	ComputeActive *float64 `json:"gpu_compute_active,omitempty"`
	ComputeMetric string   `json:"gpu_compute_metric,omitempty"`
}

// workloadShape answers prefill- or decode-heavy.
func workloadShape(reqs []telemetry.LLMRequest) *WorkloadShape {
	var in, out, pre, dec float64
	var nTok, nTime int
	fromTTFT := false
	for i := range reqs {
		r := &reqs[i]
		if r.InputTokens != nil && r.OutputTokens != nil {
			in += float64(*r.InputTokens)
			out += float64(*r.OutputTokens)
			nTok++
		}
		p, okP := ComponentValue(r, ComponentPrefill)
		if !okP && !hasSplit(r) {
			p, okP = ComponentValue(r, ComponentTTFT)
			fromTTFT = fromTTFT || okP
		}
		d, okD := ComponentValue(r, ComponentDecode)
		if okP && okD {
			pre += p
			dec += d
			nTime++
		}
	}
	if nTok == 0 && nTime == 0 {
		return nil
	}
	w := &WorkloadShape{
		PrefillFromTTFT: fromTTFT,
		InputTokensP50:  num(stats.Quantile(tokens(reqs, true), 0.5)),
		OutputTokensP50: num(stats.Quantile(tokens(reqs, false), 0.5)),
	}
	if nTok > 0 && in+out > 0 {
		w.InputTokenShare = num(in / (in + out))
	}
	if nTime > 0 && pre+dec > 0 {
		w.PrefillTimeShare = num(pre / (pre + dec))
	}
	// Time decides: a decode token costs far more than a prompt token, so a
	// 10:1 token ratio can still be decode-heavy. Without times, a prompt
	// ≥ 20× the answer counts as prefill-heavy.
	// The sentence names the share that matches the label (decode-heavy:
	// the decode share), and says so when the tokens point the other way.
	switch {
	case w.PrefillTimeShare != nil:
		w.Basis = "time"
		prefillWords := "prefill"
		if fromTTFT {
			prefillWords = "time to first token (prefill is bundled by the provider)"
		}
		if *w.PrefillTimeShare >= 0.5 {
			w.Kind = "prefill-heavy"
			w.Text = fmt.Sprintf("Prefill-heavy by time: %s of model time is %s", fmtPct(*w.PrefillTimeShare), prefillWords)
		} else {
			w.Kind = "decode-heavy"
			w.Text = fmt.Sprintf("Decode-heavy by time: %s of model time is writing the answer", fmtPct(1-*w.PrefillTimeShare))
		}
	default:
		w.Basis = "tokens"
		w.Kind = "decode-heavy"
		if in >= 20*out {
			w.Kind = "prefill-heavy"
		}
		w.Text = capitalize(w.Kind) + " by tokens (no timings)"
	}
	if w.InputTokenShare != nil {
		share := *w.InputTokenShare
		counts := fmt.Sprintf("(p50 %s in, %s out)", fmtTokens(val(w.InputTokensP50)), fmtTokens(val(w.OutputTokensP50)))
		if w.Basis == "time" && (w.Kind == "decode-heavy") == (share >= 0.5) {
			w.Text += fmt.Sprintf(", although input tokens are %s of all tokens %s: a token written costs far more time than a token read.",
				fmtPct(share), counts)
		} else {
			w.Text += fmt.Sprintf("; input tokens are %s of all tokens %s.", fmtPct(share), counts)
		}
	} else {
		w.Text += "."
	}
	return w
}

// ttftBound answers which part dominates the slow requests' TTFT.
func ttftBound(g *group) *TTFTBound {
	if g == nil || g.name != "ttft" || len(g.slow) == 0 {
		return nil
	}
	total := 0.0
	means := map[string]float64{}
	for _, c := range g.comps {
		m := stats.Mean(pick(g.partsWin[c], g.slow))
		if m > 0 {
			means[c] = m
			total += m
		}
	}
	if total == 0 {
		return nil
	}
	b := &TTFTBound{Shares: map[string]float64{}}
	keys := make([]string, 0, len(means))
	for c, m := range means {
		b.Shares[c] = m / total
		keys = append(keys, c)
	}
	sort.Slice(keys, func(i, j int) bool { return means[keys[i]] > means[keys[j]] })
	kindOf := map[string]string{
		ComponentQueue: "queue", ComponentPrefill: "prefill", ComponentNetwork: "network",
		ComponentColdStartWait: "cold_start", componentBundled: "bundled",
	}
	b.Kind = kindOf[keys[0]]
	bound := map[string]string{"cold_start": "cold-start"}[b.Kind]
	if bound == "" {
		bound = b.Kind
	}
	var parts []string
	for _, c := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", componentLabel[c], fmtPct(b.Shares[c])))
	}
	if b.Kind == "bundled" {
		b.Text = "The slow requests' TTFT is bundled by the managed API (queue, prefill and network cannot be told apart)."
	} else {
		b.Text = fmt.Sprintf("The slow requests' TTFT is %s-bound: %s.", bound, strings.Join(parts, ", "))
	}
	return b
}

// sloResult reads the window at the SLO percentile.
func sloResult(slo *SLO, reqs []telemetry.LLMRequest) *SLOResult {
	if slo == nil || (slo.TTFTMs <= 0 && slo.TPOT <= 0) {
		return nil
	}
	q := slo.quantile()
	res := &SLOResult{Percentile: q, Met: true}
	pct := "p" + pctName(q)
	var texts []string
	if slo.TTFTMs > 0 {
		actual := stats.Quantile(values(reqs, ComponentTTFT), q)
		c := &SLOCheck{Target: slo.TTFTMs, Actual: num(actual), Met: !(actual >= slo.TTFTMs)}
		res.TTFT = c
		if math.IsNaN(actual) {
			texts = append(texts, fmt.Sprintf("TTFT %s: no data (target < %s)", pct, fmtMs(slo.TTFTMs)))
		} else {
			side := "over"
			if c.Met {
				side = "under"
			}
			texts = append(texts, fmt.Sprintf("TTFT %s is %s, %s the %s objective", pct, fmtMs(actual), side, fmtMs(slo.TTFTMs)))
		}
	}
	if slo.TPOT > 0 {
		// The slow tail of decode speed is the high tail of ITL.
		itl := stats.Quantile(values(reqs, ComponentITL), q)
		actual := nan
		if itl > 0 {
			actual = 1000 / itl
		}
		c := &SLOCheck{Target: slo.TPOT, Actual: num(actual), Met: !(actual < slo.TPOT)}
		res.TPOT = c
		if math.IsNaN(actual) {
			texts = append(texts, fmt.Sprintf("TPOT %s: no data (target ≥ %s tok/s)", pct, fmtCount(slo.TPOT)))
		} else {
			side := "below"
			if c.Met {
				side = "at or above"
			}
			texts = append(texts, fmt.Sprintf("TPOT %s is %s tok/s (ITL %s), %s the %s tok/s objective", pct, fmtCount(actual), fmtMs(itl), side, fmtCount(slo.TPOT)))
		}
	}
	res.Met = !res.ttftMissed() && !res.tpotMissed()
	res.Text = "SLO " + metWord(res.Met) + ": " + strings.Join(texts, "; ") + "."
	return res
}

// pctName names a 0..1 percentile: 0.95 → "95", 0.999 → "99.9".
func pctName(q float64) string { return trimZero(fmt.Sprintf("%.1f", q*100)) }

func metWord(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// decodeBound answers memory- vs compute-bound decode from the per-bucket
// relation of ITL with the batch (requests running) and KV usage.
func decodeBound(reqs []telemetry.LLMRequest, corrs []Correlation) *DecodeBound {
	itl := stats.Summarize(values(reqs, ComponentITL))
	if itl.N == 0 {
		return nil
	}
	d := &DecodeBound{Kind: "unknown", ITLP50: num(itl.P50), ITLP95: num(itl.P95)}
	run, okRun := findCorrelation(corrs, MetricRequestsRunning, seriesITLP95)
	kv, okKV := findCorrelation(corrs, MetricKVCacheUsage, seriesITLP95)
	rRun, rKV := nan, nan
	if okRun {
		rRun = run.best()
		d.RunningR = num(rRun)
	}
	if okKV {
		rKV = kv.best()
		d.KVR = num(rKV)
	}
	switch {
	case math.IsNaN(rRun) && math.IsNaN(rKV):
		d.Text = fmt.Sprintf("ITL p50 %s, p95 %s; no requests-running or KV-cache metrics to tell memory- from compute-bound decode.", fmtMs(itl.P50), fmtMs(itl.P95))
	case rRun >= 0.5 || rKV >= 0.5:
		d.Kind = "memory-bound"
		d.Text = fmt.Sprintf("Decode is memory-bound: ITL rises with the batch (%s); ITL p50 %s, p95 %s.", corrPhrase(rRun, rKV), fmtMs(itl.P50), fmtMs(itl.P95))
	case (math.IsNaN(rRun) || rRun < 0.3) && (math.IsNaN(rKV) || rKV < 0.3):
		d.Kind = "compute-bound"
		d.Text = fmt.Sprintf("Decode looks compute-bound: ITL does not follow the batch (%s); ITL p50 %s, p95 %s.", corrPhrase(rRun, rKV), fmtMs(itl.P50), fmtMs(itl.P95))
	default:
		d.Kind = "unclear"
		d.Text = fmt.Sprintf("Decode bound unclear: ITL follows the batch only weakly (%s).", corrPhrase(rRun, rKV))
	}
	return d
}

func corrPhrase(rRun, rKV float64) string {
	var parts []string
	if !math.IsNaN(rRun) {
		parts = append(parts, "r = "+fmtR(rRun)+" with requests running")
	}
	if !math.IsNaN(rKV) {
		parts = append(parts, "r = "+fmtR(rKV)+" with KV usage")
	}
	return strings.Join(parts, ", ")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
