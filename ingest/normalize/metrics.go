package normalize

import (
	"fmt"
	"math"
	"net"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Canonical metric names the analysis reads.
const (
	// MetricKVCacheUsage is the fraction (0..1) of the KV cache in use.
	MetricKVCacheUsage = "kv_cache_usage"
	// MetricRequestsWaiting is the number of requests queued, not yet
	// scheduled on the GPU.
	MetricRequestsWaiting = "requests_waiting"
	// MetricRequestsRunning is the number of requests in the running batch.
	MetricRequestsRunning = "requests_running"
)

// metricNames folds inference-server gauges into canonical names. Each
// name appears as the server exports it and, where it has a ':', as the
// OTel Collector's Prometheus receiver/exporters rewrite it ('_' for ':').
var metricNames = map[string]string{
	// vLLM: fraction 0..1; renamed from gpu_ to kv_ in v0.10.
	"vllm:gpu_cache_usage_perc": MetricKVCacheUsage,
	"vllm_gpu_cache_usage_perc": MetricKVCacheUsage,
	"vllm:kv_cache_usage_perc":  MetricKVCacheUsage,
	"vllm_kv_cache_usage_perc":  MetricKVCacheUsage,
	// SGLang: token_usage is the fraction of KV-cache token slots in use.
	"sglang:token_usage": MetricKVCacheUsage,
	"sglang_token_usage": MetricKVCacheUsage,

	"vllm:num_requests_waiting": MetricRequestsWaiting,
	"vllm_num_requests_waiting": MetricRequestsWaiting,
	"sglang:num_queue_reqs":     MetricRequestsWaiting,
	"sglang_num_queue_reqs":     MetricRequestsWaiting,
	"tgi_queue_size":            MetricRequestsWaiting, // TGI (Rust, no ':' ever)

	"vllm:num_requests_running": MetricRequestsRunning,
	"vllm_num_requests_running": MetricRequestsRunning,
	"sglang:num_running_reqs":   MetricRequestsRunning,
	"sglang_num_running_reqs":   MetricRequestsRunning,
	"tgi_batch_current_size":    MetricRequestsRunning,
}

// MetricName folds an inference-server metric name into its canonical one
// (kv_cache_usage, requests_waiting, requests_running); any other name is
// returned unchanged. The Prometheus scraper uses it too.
func MetricName(name string) string {
	if c, ok := metricNames[name]; ok {
		return c
	}
	if c, ok := serverMetricNames[name]; ok {
		return c
	}
	return name
}

// MetricResult is the outcome of normalizing one metrics export request.
type MetricResult struct {
	Points []telemetry.MetricPoint
	// Histograms are the histograms' buckets, cumulative or delta as
	// exported (ingest.HistogramDeltas turns them into intervals).
	Histograms []telemetry.HistogramPoint
	Rejected   int64
	// Errors holds the first few reject reasons, for
	// partial_success.error_message.
	Errors []string
}

// Metrics normalizes gauges and sums into one point per data point, and
// histograms and summaries into <name>_sum and <name>_count points;
// histograms' buckets are kept as HistogramPoints (exponential ones as
// explicit bounds), summaries' quantiles are not kept. Points with implausible times are rejected;
// NaN/Inf samples (Prometheus staleness markers among them) are dropped
// without counting as rejects.
func Metrics(projectID uint32, req *colmetricspb.ExportMetricsServiceRequest, now time.Time, lim Limits) MetricResult {
	lim = lim.withDefaults()
	var (
		res  MetricResult
		errs errorLog
	)
	for _, rm := range req.GetResourceMetrics() {
		b := pointBuilder{
			projectID: projectID,
			service:   serviceOf(rm.GetResource()),
			instance:  metricsInstanceOf(rm.GetResource()),
			now:       now,
			lim:       lim,
			out:       &res.Points,
			hists:     &res.Histograms,
			errs:      &errs,
		}
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				b.metric(m)
			}
		}
	}
	res.Rejected, res.Errors = errs.rejected, errs.reasons
	return res
}

// metricsInstanceOf names the replica a metrics resource describes: its
// service.instance.id (host:port, as the Collector's Prometheus receiver
// sets it), else server.address:server.port, else the pod or host.
func metricsInstanceOf(r *resourcepb.Resource) string {
	if s := stringAttr(r.GetAttributes(), "service.instance.id", maxNameBytes); s != "" {
		return s
	}
	if a := stringAttr(r.GetAttributes(), "server.address", maxNameBytes); a != "" {
		if p := stringAttr(r.GetAttributes(), "server.port", maxNameBytes); p != "" {
			return net.JoinHostPort(a, p)
		}
		return a
	}
	return instanceOf(r)
}

// pointBuilder carries one resource's identity while its metrics are read.
type pointBuilder struct {
	projectID         uint32
	service, instance string
	now               time.Time
	lim               Limits
	out               *[]telemetry.MetricPoint
	hists             *[]telemetry.HistogramPoint
	errs              *errorLog
}

func (b *pointBuilder) metric(m *metricspb.Metric) {
	if m == nil {
		return
	}
	name := cleanString(m.Name, maxNameBytes)
	switch d := m.Data.(type) {
	case *metricspb.Metric_Gauge:
		for _, dp := range d.Gauge.GetDataPoints() {
			b.number(name, dp)
		}
	case *metricspb.Metric_Sum:
		for _, dp := range d.Sum.GetDataPoints() {
			b.number(name, dp)
		}
	case *metricspb.Metric_Histogram:
		for _, dp := range d.Histogram.GetDataPoints() {
			if dp == nil {
				continue
			}
			if dp.Sum != nil {
				b.emit(name+"_sum", dp.TimeUnixNano, dp.Flags, dp.Attributes, *dp.Sum)
			}
			b.emit(name+"_count", dp.TimeUnixNano, dp.Flags, dp.Attributes, float64(dp.Count))
			b.histogram(name, d.Histogram.AggregationTemporality, dp)
		}
	case *metricspb.Metric_ExponentialHistogram:
		for _, dp := range d.ExponentialHistogram.GetDataPoints() {
			if dp == nil {
				continue
			}
			if dp.Sum != nil {
				b.emit(name+"_sum", dp.TimeUnixNano, dp.Flags, dp.Attributes, *dp.Sum)
			}
			b.emit(name+"_count", dp.TimeUnixNano, dp.Flags, dp.Attributes, float64(dp.Count))
			b.exponential(name, d.ExponentialHistogram.AggregationTemporality, dp)
		}
	case *metricspb.Metric_Summary:
		for _, dp := range d.Summary.GetDataPoints() {
			if dp == nil {
				continue
			}
			b.emit(name+"_sum", dp.TimeUnixNano, dp.Flags, dp.Attributes, dp.Sum)
			b.emit(name+"_count", dp.TimeUnixNano, dp.Flags, dp.Attributes, float64(dp.Count))
		}
	}
}

func (b *pointBuilder) number(name string, dp *metricspb.NumberDataPoint) {
	if dp == nil {
		return
	}
	switch v := dp.Value.(type) {
	case *metricspb.NumberDataPoint_AsDouble:
		b.emit(name, dp.TimeUnixNano, dp.Flags, dp.Attributes, v.AsDouble)
	case *metricspb.NumberDataPoint_AsInt:
		b.emit(name, dp.TimeUnixNano, dp.Flags, dp.Attributes, float64(v.AsInt))
	default:
		// A point with neither value carries no sample (a receiver
		// marking a gap); there is nothing to store or reject.
	}
}

// noRecordedValue is DataPointFlags.FLAG_NO_RECORDED_VALUE: the Collector's
// Prometheus receiver sets it on staleness markers.
const noRecordedValue = uint32(metricspb.DataPointFlags_DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK)

func (b *pointBuilder) emit(name string, ts uint64, flags uint32, attrs []*commonpb.KeyValue, value float64) {
	if flags&noRecordedValue != 0 || math.IsNaN(value) || math.IsInf(value, 0) {
		// Not a sample; and JSON, which the API speaks, has no NaN/Inf.
		return
	}
	t := unixNanos(ts)
	if ts == 0 {
		b.errs.reject(fmt.Sprintf("metric %s: time_unix_nano is zero", name))
		return
	}
	if r := checkTime("time", t, b.now); r != "" {
		b.errs.reject(fmt.Sprintf("metric %s: %s", name, r))
		return
	}
	labels := flattenAttributes(attrs, b.lim)
	instance := b.instance
	if instance == "" {
		// Metrics relayed without resource detection still name their
		// replica in a label.
		if instance = labels["instance"]; instance == "" {
			instance = labels["pod"]
		}
	}
	*b.out = append(*b.out, telemetry.MetricPoint{
		ProjectID: b.projectID,
		Time:      t,
		Service:   b.service,
		Instance:  cleanString(instance, maxNameBytes),
		Name:      MetricName(name),
		Labels:    labels,
		Value:     value,
	})
}
