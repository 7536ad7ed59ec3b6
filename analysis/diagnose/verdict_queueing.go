package diagnose

import (
	"fmt"
	"math"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// VerdictQueueing: requests waited in the inference server's queue.
const VerdictQueueing Verdict = "queueing"

// Queueing is corroborated by the server's pressure: a KV cache near full
// (vLLM holds requests from kvFull) and requests waiting, and how closely
// they follow TTFT p99 bucket by bucket.
func init() {
	register(verdictRule{
		Verdict:      VerdictQueueing,
		Label:        "Queueing",
		CauseWords:   "Requests wait in the inference server's queue",
		Component:    ComponentQueue,
		HoldSurfaces: true,
		Corroborate:  (*analysis).corroborateQueueing,
		Claim:        (*analysis).claimQueueingFromServer,
		Summary:      (*analysis).serverSummary,
	})
}

// claimQueueingFromServer: without server spans, the servers' queue
// histogram grew at least as much as prefill; waiting requests, a full
// KV cache and a preemption burst corroborate it.
func (a *analysis) claimQueueingFromServer() bool {
	f := a.serverPicked(VerdictQueueing)
	if f == nil {
		return false
	}
	d, _ := f.queueGrowth()
	return a.claimFromServer(ComponentQueue, d, append(f.pressureEvidence(), f.preemptionEvidence()...), "requests waited for a batch slot")
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
		if bm := gaugeMax(a.metricsBase, MetricKVCacheUsage); !math.IsNaN(bm) {
			text += " (baseline max " + fmtPct(bm) + ")"
			figs["baseline_kv_max"] = bm
		}
		if c, ok := findCorrelation(a.corrs, MetricKVCacheUsage, seriesTTFTP99); ok && c.Pearson != nil {
			text += "; " + a.movedWith(c, "TTFT p99", "it")
			figs["r_kv_ttft_p99"] = *c.Pearson
			if c.best() >= strongR {
				corrBonus = 0.1
			}
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
			text += "; " + a.movedWith(c, "TTFT p99", "them")
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
