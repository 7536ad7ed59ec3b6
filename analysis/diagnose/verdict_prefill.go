package diagnose

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokenpath/tokenpath/analysis/stats"
)

// VerdictPrefill: reading the prompts took longer.
const VerdictPrefill Verdict = "prefill"

// Prefill is corroborated by an input-token shift and TTFT following
// prompt length; it also takes over a queue that only waited behind long
// prefills (queueBehindPrefill).
func init() {
	register(verdictRule{
		Verdict:      VerdictPrefill,
		Label:        "Prefill",
		CauseWords:   "Reading the prompts (prefill) takes longer",
		Component:    ComponentPrefill,
		HoldSurfaces: true,
		Rerank:       (*analysis).queueBehindPrefill,
		Explain:      (*analysis).blockedQueueEvidence,
		Corroborate:  (*analysis).corroboratePrefill,
		Claim:        (*analysis).claimPrefillFromServer,
		Summary:      (*analysis).serverSummary,
	})
}

// claimPrefillFromServer: without server spans, the servers' prefill
// histogram (else their TTFT beyond the queue) grew more than the queue;
// longer prompts in the calls and a prefix-cache hit-rate drop
// corroborate it.
func (a *analysis) claimPrefillFromServer() bool {
	f := a.serverPicked(VerdictPrefill)
	if f == nil {
		return false
	}
	d, _ := f.prefillGrowth()
	comp := ComponentPrefill
	if _, ok := f.comps[ComponentPrefill]; !ok {
		comp = ComponentTTFT
	}
	ev := f.prefixCacheEvidence()
	now := stats.Quantile(a.winCols.column(columnInputTokens), 0.5)
	ref := stats.Quantile(a.baseCols.column(columnInputTokens), 0.5)
	if stats.Ratio(now, ref) >= 1.3 {
		ev = append(ev, Evidence{Text: fmt.Sprintf("Prompts got longer: the calls' input tokens p50 %s vs %s in the baseline.", fmtTokens(now), fmtTokens(ref)),
			Figures: figures("input_tokens_p50", now, "baseline_input_tokens_p50", ref)})
	}
	return a.claimFromServer(comp, d, ev, "prompt processing took longer")
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

// promptsGrew reports whether the slow requests' prompts are clearly
// longer than the reference and TTFT follows prompt length.
func (a *analysis) promptsGrew(g *group) bool {
	now, ref := a.slowTokens(g, true)
	r := a.tokenCorrelation()
	return stats.Ratio(now, ref) >= 1.5 && r >= 0.4
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
