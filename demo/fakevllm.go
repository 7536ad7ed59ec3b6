package demo

import (
	"bytes"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// vLLM's histogram layouts (vllm-project/vllm vllm/v1/metrics/loggers.py,
// PrometheusStatLogger): request phases share request_latency_buckets.
var (
	vllmRequestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	vllmTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	vllmITLBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
)

// vllmHistogram is one cumulative histogram as prometheus_client keeps it.
type vllmHistogram struct {
	name    string
	bounds  []float64
	buckets []uint64 // cumulative per bound
	count   uint64
	sum     float64
}

func (h *vllmHistogram) observe(v float64) {
	for i, b := range h.bounds {
		if v <= b {
			h.buckets[i]++
		}
	}
	h.count++
	h.sum += v
}

// VLLMMetrics is the Prometheus side of a fake vLLM with tracing off: the
// request-phase histograms, scheduler gauges and counters vLLM exports,
// under vLLM's names, labels (model_name, engine) and bucket layouts. It
// renders the text exposition vLLM serves on /metrics.
type VLLMMetrics struct {
	Model string

	mu                      sync.Mutex
	hists                   []*vllmHistogram
	waiting, running, kv    float64
	preemptions             float64
	prefixHits, prefixQuery float64
}

// NewVLLMMetrics starts a server's metrics at zero.
func NewVLLMMetrics(model string) *VLLMMetrics {
	v := &VLLMMetrics{Model: model}
	for _, h := range []struct {
		name   string
		bounds []float64
	}{
		{"vllm:request_queue_time_seconds", vllmRequestLatencyBuckets},
		{"vllm:request_prefill_time_seconds", vllmRequestLatencyBuckets},
		{"vllm:request_decode_time_seconds", vllmRequestLatencyBuckets},
		{"vllm:e2e_request_latency_seconds", vllmRequestLatencyBuckets},
		{"vllm:time_to_first_token_seconds", vllmTTFTBuckets},
		{"vllm:inter_token_latency_seconds", vllmITLBuckets},
	} {
		v.hists = append(v.hists, &vllmHistogram{name: h.name, bounds: h.bounds, buckets: make([]uint64, len(h.bounds))})
	}
	return v
}

// RequestPhases are one finished request's phases as vLLM records them.
type RequestPhases struct {
	Queue, Prefill, Decode time.Duration
	OutputTokens           int
}

// ObserveRequest records a finished request in every histogram.
func (v *VLLMMetrics) ObserveRequest(r RequestPhases) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ttft := r.Queue + r.Prefill
	itl := 0.0
	if r.OutputTokens > 1 {
		itl = r.Decode.Seconds() / float64(r.OutputTokens-1)
	}
	for _, h := range v.hists {
		switch h.name {
		case "vllm:request_queue_time_seconds":
			h.observe(r.Queue.Seconds())
		case "vllm:request_prefill_time_seconds":
			h.observe(r.Prefill.Seconds())
		case "vllm:request_decode_time_seconds":
			h.observe(r.Decode.Seconds())
		case "vllm:e2e_request_latency_seconds":
			h.observe((ttft + r.Decode).Seconds())
		case "vllm:time_to_first_token_seconds":
			h.observe(ttft.Seconds())
		case "vllm:inter_token_latency_seconds":
			if itl > 0 {
				h.observe(itl)
			}
		}
	}
}

// SetScheduler sets the scheduler gauges: waiting and running requests
// and the KV-cache usage (0..1).
func (v *VLLMMetrics) SetScheduler(waiting, running int, kv float64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.waiting, v.running, v.kv = float64(waiting), float64(running), kv
}

// AddPreemptions and AddPrefixCache grow the counters.
func (v *VLLMMetrics) AddPreemptions(n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.preemptions += float64(n)
}

// AddPrefixCache counts prefix-cache lookups, in tokens.
func (v *VLLMMetrics) AddPrefixCache(hits, queries int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.prefixHits += float64(hits)
	v.prefixQuery += float64(queries)
}

// Exposition renders the metrics in the text format vLLM serves. A
// non-zero at stamps every sample with it (a replay of past scrapes); zero
// leaves the time to the scraper, as vLLM does.
func (v *VLLMMetrics) Exposition(at time.Time) ([]byte, error) {
	v.mu.Lock()
	var ms []prometheus.Metric
	labels := []string{"engine", "model_name"}
	lv := []string{"0", v.Model}
	stamp := func(m prometheus.Metric) {
		if !at.IsZero() {
			m = prometheus.NewMetricWithTimestamp(at, m)
		}
		ms = append(ms, m)
	}
	for _, h := range v.hists {
		b := make(map[float64]uint64, len(h.bounds))
		for i, ub := range h.bounds {
			b[ub] = h.buckets[i]
		}
		stamp(prometheus.MustNewConstHistogram(prometheus.NewDesc(h.name, "vLLM histogram", labels, nil), h.count, h.sum, b, lv...))
	}
	for _, g := range []struct {
		name string
		v    float64
		typ  prometheus.ValueType
	}{
		{"vllm:num_requests_waiting", v.waiting, prometheus.GaugeValue},
		{"vllm:num_requests_running", v.running, prometheus.GaugeValue},
		{"vllm:kv_cache_usage_perc", v.kv, prometheus.GaugeValue},
		{"vllm:num_preemptions_total", v.preemptions, prometheus.CounterValue},
		{"vllm:prefix_cache_hits_total", v.prefixHits, prometheus.CounterValue},
		{"vllm:prefix_cache_queries_total", v.prefixQuery, prometheus.CounterValue},
	} {
		stamp(prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "vLLM metric", labels, nil), g.typ, g.v, lv...))
	}
	v.mu.Unlock()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(constCollector(ms)); err != nil {
		return nil, err
	}
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	sort.Slice(fams, func(i, j int) bool { return fams[i].GetName() < fams[j].GetName() })
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// constCollector collects a fixed set of metrics.
type constCollector []prometheus.Metric

func (c constCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c {
		ch <- m.Desc()
	}
}

func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c {
		ch <- m
	}
}

// Metricdata is the same state as the OTel Collector's Prometheus receiver
// relays it over OTLP: cumulative histograms and sums from start, gauges,
// under vLLM's own names, each point stamped at.
func (v *VLLMMetrics) Metricdata(start, at time.Time) []metricdata.Metrics {
	v.mu.Lock()
	defer v.mu.Unlock()
	attrs := attribute.NewSet(attribute.String("engine", "0"), attribute.String("model_name", v.Model))
	var out []metricdata.Metrics
	for _, h := range v.hists {
		counts := make([]uint64, len(h.bounds)+1)
		var below uint64
		for i, c := range h.buckets {
			counts[i], below = c-below, c
		}
		counts[len(h.bounds)] = h.count - below
		out = append(out, metricdata.Metrics{Name: h.name, Data: metricdata.Histogram[float64]{
			Temporality: metricdata.CumulativeTemporality,
			DataPoints: []metricdata.HistogramDataPoint[float64]{{Attributes: attrs, StartTime: start, Time: at,
				Count: h.count, Sum: h.sum, Bounds: append([]float64(nil), h.bounds...), BucketCounts: counts}},
		}})
	}
	for _, g := range []struct {
		name string
		v    float64
	}{{"vllm:num_requests_waiting", v.waiting}, {"vllm:num_requests_running", v.running}, {"vllm:kv_cache_usage_perc", v.kv}} {
		out = append(out, metricdata.Metrics{Name: g.name, Data: metricdata.Gauge[float64]{
			DataPoints: []metricdata.DataPoint[float64]{{Attributes: attrs, Time: at, Value: g.v}}}})
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"vllm:num_preemptions_total", v.preemptions}, {"vllm:prefix_cache_hits_total", v.prefixHits}, {"vllm:prefix_cache_queries_total", v.prefixQuery}} {
		out = append(out, metricdata.Metrics{Name: c.name, Data: metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[float64]{{Attributes: attrs, StartTime: start, Time: at, Value: c.v}}}})
	}
	return out
}
