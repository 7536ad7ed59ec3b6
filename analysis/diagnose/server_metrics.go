package diagnose

import (
	"math"
	"sort"
	"time"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Canonical names of the server histograms and counters (as ingest
// normalizes vLLM, SGLang and TGI metrics).
const (
	HistQueue   = "queue_seconds"
	HistPrefill = "prefill_seconds"
	HistDecode  = "decode_seconds"
	HistTTFT    = "ttft_seconds"
	HistITL     = "itl_seconds"
	HistE2E     = "e2e_seconds"
	// HistForward is TGI's batch forward pass (tgi_batch_forward_duration),
	// read per label method as HistForwardPrefill and HistForwardDecode.
	HistForward        = "forward_seconds"
	HistForwardPrefill = "forward_prefill_seconds"
	HistForwardDecode  = "forward_decode_seconds"

	MetricPreemptions        = "preemptions_total"
	MetricPrefixCacheHits    = "prefix_cache_hits_total"
	MetricPrefixCacheQueries = "prefix_cache_queries_total"
	MetricPrefixCacheHitRate = "prefix_cache_hit_rate"

	// GPU activity from the DCGM exporter, ratios 0..1.
	MetricGPUDRAMActive   = "gpu_dram_active"
	MetricGPUTensorActive = "gpu_tensor_active"
	MetricGPUSMActive     = "gpu_sm_active"
)

// ServerHistogramNames maps each server histogram to the component it
// measures.
var ServerHistogramNames = map[string]string{
	HistQueue: ComponentQueue, HistPrefill: ComponentPrefill, HistDecode: ComponentDecode,
	HistTTFT: ComponentTTFT, HistITL: ComponentITL, HistE2E: ComponentE2E,
}

// serverHistogramFallbacks stand in for a component no histogram above
// measures: TGI exports no per-request prefill or decode time, only its
// batches' forward passes, which grow with the prompts (prefill) and the
// batch (decode) as the requests' own times do.
var serverHistogramFallbacks = map[string]string{HistForwardPrefill: ComponentPrefill, HistForwardDecode: ComponentDecode}

// serverHistograms lists every histogram a component is read from, a
// fallback after the component's own.
func serverHistograms() [][2]string {
	var out [][2]string
	for _, m := range []map[string]string{ServerHistogramNames, serverHistogramFallbacks} {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, [2]string{n, m[n]})
		}
	}
	return out
}

// HistogramBucket is one server histogram summed over a chart bucket and
// over the servers' series (same bucket layout).
type HistogramBucket struct {
	Start   time.Time
	Name    string
	Buckets stats.Buckets
}

// ServerMetrics are the figures of the inference servers that served a
// diagnosis's calls without sending server spans: their histograms, the
// gauges and the counters that corroborate a verdict.
type ServerMetrics struct {
	// Servers are the services the metrics belong to; Endpoints the
	// host:port the calls were tied by (empty when the server itself is
	// diagnosed).
	Servers   []string
	Endpoints []string
	// Histograms cover the window and the baseline, per chart bucket.
	Histograms []HistogramBucket
	// Gauges are kv_cache_usage, requests_waiting, requests_running of
	// Servers over both ranges.
	Gauges []telemetry.MetricPoint
	// Counters: how much each counter grew in the window and the
	// baseline (resets counted), and the means of the ratio gauges.
	Window, Baseline CounterFigures
	// Events are the servers' scale and instance events over both
	// ranges; NewInstances the server instances whose series begin in
	// the window after the baseline had others.
	Events       []telemetry.Event
	NewInstances []string
}

// CounterFigures are a range's counter increases; nil = not exported.
type CounterFigures struct {
	Preemptions   *float64
	PrefixHits    *float64
	PrefixQueries *float64
	HitRateMean   *float64 // SGLang's gauge, when no counters
	// GPU activity ratios (0..1) from the DCGM exporter, means over the
	// range: memory interface, tensor pipes, SMs.
	DRAMActive, TensorActive, SMActive *float64
}

// PrefixHitRate is hits/queries, else the gauge's mean; nil when unknown.
func (c CounterFigures) PrefixHitRate() *float64 {
	if c.PrefixHits != nil && c.PrefixQueries != nil && *c.PrefixQueries > 0 {
		r := *c.PrefixHits / *c.PrefixQueries
		return &r
	}
	return c.HitRateMean
}

// ServerComponent is one component read from a server histogram.
type ServerComponent struct {
	Histogram string `json:"histogram"`
	// P50…P99 and the baseline's p95 in ms, interpolated within buckets.
	P50         *float64 `json:"p50"`
	P95         *float64 `json:"p95"`
	P99         *float64 `json:"p99"`
	BaselineP95 *float64 `json:"baseline_p95"`
	// ResolutionMs is the width of the bucket the window's p95 falls in:
	// the exact p95 lies within it.
	ResolutionMs *float64 `json:"resolution_ms"`
	Count        float64  `json:"count"`
	BaseCount    float64  `json:"baseline_count"`
}

// ServerMetricsFigures tell a page its split comes from server metrics.
type ServerMetricsFigures struct {
	Servers    []string                   `json:"servers"`
	Endpoints  []string                   `json:"endpoints,omitempty"`
	Components map[string]ServerComponent `json:"components"`
}

// sumHistograms sums the buckets of name over r; when layouts differ the
// most observed one is kept.
func sumHistograms(hs []HistogramBucket, name string, r Range) stats.Buckets {
	var layouts []stats.Buckets
	for _, h := range hs {
		if h.Name != name || !r.Contains(h.Start) {
			continue
		}
		added := false
		for i := range layouts {
			if layouts[i].Add(h.Buckets) {
				added = true
				break
			}
		}
		if !added {
			var b stats.Buckets
			b.Add(h.Buckets)
			layouts = append(layouts, b)
		}
	}
	if len(layouts) == 0 {
		return stats.Buckets{}
	}
	sort.SliceStable(layouts, func(i, j int) bool { return layouts[i].Total() > layouts[j].Total() })
	return layouts[0]
}

// quantileMs reads q of b in milliseconds; nil with no observations.
func quantileMs(b stats.Buckets, q float64) *float64 {
	if b.Total() <= 0 {
		return nil
	}
	v := b.Quantile(q)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	ms := v * 1000
	return &ms
}

// serverComponents reads every server histogram in the window and the
// baseline.
func serverComponents(sm ServerMetrics, window, baseline Range) map[string]ServerComponent {
	out := map[string]ServerComponent{}
	for _, h := range serverHistograms() {
		name, comp := h[0], h[1]
		if _, done := out[comp]; done {
			continue // the component's own histogram
		}
		w, b := sumHistograms(sm.Histograms, name, window), sumHistograms(sm.Histograms, name, baseline)
		if w.Total() <= 0 && b.Total() <= 0 {
			continue
		}
		c := ServerComponent{Histogram: name, P50: quantileMs(w, 0.5), P95: quantileMs(w, 0.95), P99: quantileMs(w, 0.99),
			BaselineP95: quantileMs(b, 0.95), Count: w.Total(), BaseCount: b.Total()}
		if res := w.Resolution(0.95); !math.IsNaN(res) && !math.IsInf(res, 0) {
			ms := res * 1000
			c.ResolutionMs = &ms
		}
		out[comp] = c
	}
	return out
}

// serverSeries adds each chart bucket's server p95s (P95 map, keyed by
// component) and, for buckets without requests, the gauges.
func serverSeries(series []Bucket, sm ServerMetrics, width time.Duration) {
	for i := range series {
		r := Range{From: series[i].Start, To: series[i].Start.Add(width)}
		for _, h := range serverHistograms() {
			name, comp := h[0], h[1]
			if _, ok := series[i].P95[comp]; ok {
				continue // the requests' own figure, or the component's own histogram
			}
			if p := quantileMs(sumHistograms(sm.Histograms, name, r), 0.95); p != nil {
				if series[i].P95 == nil {
					series[i].P95 = map[string]float64{}
				}
				series[i].P95[comp] = *p
			}
		}
		for _, g := range sm.Gauges {
			if !r.Contains(g.Time) {
				continue
			}
			var dst **float64
			switch g.Name {
			case MetricKVCacheUsage:
				dst = &series[i].KVCacheUsage
			case MetricRequestsWaiting:
				dst = &series[i].RequestsWaiting
			case MetricRequestsRunning:
				dst = &series[i].RequestsRunning
			default:
				continue
			}
			if *dst == nil || g.Value > **dst {
				v := g.Value
				*dst = &v
			}
		}
	}
}
