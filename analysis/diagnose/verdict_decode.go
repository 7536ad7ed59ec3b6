package diagnose

import (
	"fmt"
	"math"

	"github.com/tokenpath/tokenpath/analysis/stats"
)

// VerdictDecode: writing the answers slowed.
const VerdictDecode Verdict = "decode"

// Decode is corroborated by ITL growth with the batch or KV pressure
// (memory-bound) or by longer answers; a decode regression where neither
// moved is noise (decodeWithinNoise).
func init() {
	register(verdictRule{
		Verdict:     VerdictDecode,
		Label:       "Decode",
		CauseWords:  "Writing the answers (decode) slowed",
		Component:   ComponentDecode,
		WithinNoise: (*analysis).decodeWithinNoise,
		Corroborate: (*analysis).corroborateDecode,
		Claim:       (*analysis).claimDecodeFromServer,
		Summary:     (*analysis).serverSummary,
	})
}

// claimDecodeFromServer: without server spans, the servers' inter-token
// latency (else decode time) grew while their TTFT did not explain the
// window; preemptions, KV pressure and the GPU's memory- or compute-bound
// activity (DCGM) corroborate it.
func (a *analysis) claimDecodeFromServer() bool {
	f := a.serverPicked(VerdictDecode)
	if f == nil {
		return false
	}
	d, _ := f.decodeGrowth()
	comp := ComponentITL
	if _, ok := f.growthBy(ComponentITL, decodeGrowthRatio, itlGrowthMinMs); !ok {
		comp = ComponentDecode
	}
	ev := append(f.preemptionEvidence(), f.pressureEvidence()...)
	cause := "token generation slowed"
	if g := gpuDecodeBound(f.sm.Window); g != nil {
		ev = append(ev, Evidence{Text: g.Text, Figures: figures("gpu_dram_active", val(g.DRAMActive), "gpu_compute_active", val(g.ComputeActive))})
		cause += " (" + g.Kind + ")"
	}
	return a.claimFromServer(comp, d, ev, cause)
}

// gpuDecodeBound tells memory- from compute-bound decode by the GPU's own
// activity (DCGM exporter, window means): the memory interface busier
// than the tensor pipes (else the SMs, when the tensor pipes are not
// exported) is memory-bound. nil without DRAM activity or either compute
// figure.
func gpuDecodeBound(c CounterFigures) *DecodeBound {
	compute, metric, label := c.TensorActive, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor pipes"
	if compute == nil {
		compute, metric, label = c.SMActive, "DCGM_FI_PROF_SM_ACTIVE", "SMs"
	}
	if c.DRAMActive == nil || compute == nil {
		return nil
	}
	d := &DecodeBound{Kind: "compute-bound", Source: "dcgm", DRAMActive: c.DRAMActive, ComputeActive: compute, ComputeMetric: metric}
	if *c.DRAMActive >= *compute {
		d.Kind = "memory-bound"
	}
	d.Text = fmt.Sprintf("Decode is %s by the GPU's own counters: memory interface active %s of cycles vs %s %s (DCGM_FI_PROF_DRAM_ACTIVE vs %s, means over the window).",
		d.Kind, fmtPct(*c.DRAMActive), label, fmtPct(*compute), metric)
	return d
}

// decodeWithinNoise explains away a regression that decode carries when
// neither of decode's factors moved beyond noise: tokens came as fast as
// before (ITL p95 < 20 % up) and the slow requests' answers were not
// clearly longer (output tokens p50 < 1.5×). Decode time is their
// product, so a few long answers in a short window (whose requests share
// one batch, so are not independent samples) can push the E2E p95 past
// its sampling error without anything getting slower. It runs when decode
// tops the regressed headline g, and returns why, or "" when the
// regression stands.
func (a *analysis) decodeWithinNoise(g *group) string {
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
			c.Lag = 0 // the batch and ITL are read in the same buckets; a shift says nothing here
			text += "; " + a.movedWith(c, "ITL p95", "the batch size")
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
