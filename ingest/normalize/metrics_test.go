package normalize

import (
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

func TestMetricName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"vllm:gpu_cache_usage_perc", "kv_cache_usage"},
		{"vllm:kv_cache_usage_perc", "kv_cache_usage"},
		{"vllm_gpu_cache_usage_perc", "kv_cache_usage"},
		{"vllm_kv_cache_usage_perc", "kv_cache_usage"},
		{"sglang:token_usage", "kv_cache_usage"},
		{"sglang_token_usage", "kv_cache_usage"},
		{"vllm:num_requests_waiting", "requests_waiting"},
		{"vllm_num_requests_waiting", "requests_waiting"},
		{"sglang:num_queue_reqs", "requests_waiting"},
		{"tgi_queue_size", "requests_waiting"},
		{"vllm:num_requests_running", "requests_running"},
		{"vllm_num_requests_running", "requests_running"},
		{"sglang:num_running_reqs", "requests_running"},
		{"tgi_batch_current_size", "requests_running"},
		// Everything else keeps its name.
		{"vllm:cpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"},
		{"vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_sum"},
		{"VLLM:NUM_REQUESTS_WAITING", "VLLM:NUM_REQUESTS_WAITING"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := MetricName(tc.in); got != tc.want {
			t.Errorf("MetricName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func gauge(name string, points ...*metricspb.NumberDataPoint) *metricspb.Metric {
	return &metricspb.Metric{Name: name, Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: points}}}
}

func dbl(t time.Time, v float64, attrs ...*commonpb.KeyValue) *metricspb.NumberDataPoint {
	return &metricspb.NumberDataPoint{TimeUnixNano: ns(t), Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v}, Attributes: attrs}
}

func metricsRequest(resource []*commonpb.KeyValue, ms ...*metricspb.Metric) *colmetricspb.ExportMetricsServiceRequest {
	return &colmetricspb.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource:     &resourcepb.Resource{Attributes: resource},
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: ms}},
	}}}
}

// collectorPromResource is the resource the OTel Collector's Prometheus
// receiver builds for a scrape target: job → service.name, the target
// address → service.instance.id.
var collectorPromResource = []*commonpb.KeyValue{
	str("service.name", "vllm"),
	str("service.instance.id", "10.0.3.7:8000"),
	str("net.host.name", "10.0.3.7"),
	str("net.host.port", "8000"),
	str("http.scheme", "http"),
	str("server.address", "10.0.3.7"),
	str("server.port", "8000"),
	str("url.scheme", "http"),
}

func TestMetricsFromCollectorPrometheusReceiver(t *testing.T) {
	ts := now.Add(-15 * time.Second)
	labels := []*commonpb.KeyValue{str("engine", "0"), str("model_name", "meta-llama/Llama-3.1-8B-Instruct")}
	req := metricsRequest(collectorPromResource,
		gauge("vllm:gpu_cache_usage_perc", dbl(ts, 0.97, labels...)),
		gauge("vllm:num_requests_waiting", dbl(ts, 32, labels...)),
		&metricspb.Metric{Name: "vllm:prompt_tokens_total", Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{
			IsMonotonic: true, AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
			DataPoints: []*metricspb.NumberDataPoint{{TimeUnixNano: ns(ts), Value: &metricspb.NumberDataPoint_AsInt{AsInt: 1234567}, Attributes: labels}},
		}}},
	)
	res := Metrics(3, req, now, Limits{})
	wantLabels := map[string]string{"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
	want := []telemetry.MetricPoint{
		{ProjectID: 3, Time: ts, Service: "vllm", Instance: "10.0.3.7:8000", Name: "kv_cache_usage", Labels: wantLabels, Value: 0.97},
		{ProjectID: 3, Time: ts, Service: "vllm", Instance: "10.0.3.7:8000", Name: "requests_waiting", Labels: wantLabels, Value: 32},
		{ProjectID: 3, Time: ts, Service: "vllm", Instance: "10.0.3.7:8000", Name: "vllm:prompt_tokens_total", Labels: wantLabels, Value: 1234567},
	}
	if res.Rejected != 0 || !reflect.DeepEqual(res.Points, want) {
		t.Errorf("rejected=%d (%v)\n got %+v\nwant %+v", res.Rejected, res.Errors, res.Points, want)
	}
}

func TestMetricsHistogramAndSummary(t *testing.T) {
	ts := now.Add(-time.Minute)
	sum := 412.87
	req := metricsRequest([]*commonpb.KeyValue{str("service.name", "vllm"), str("k8s.pod.name", "vllm-0")},
		&metricspb.Metric{Name: "vllm:time_to_first_token_seconds", Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
			DataPoints: []*metricspb.HistogramDataPoint{{
				TimeUnixNano: ns(ts), Count: 1523, Sum: &sum,
				ExplicitBounds: []float64{0.1, 0.5, 1}, BucketCounts: []uint64{100, 900, 500, 23},
				Attributes: []*commonpb.KeyValue{str("model_name", "m")},
			}},
		}}},
		&metricspb.Metric{Name: "gen_ai.client.operation.duration", Data: &metricspb.Metric_ExponentialHistogram{ExponentialHistogram: &metricspb.ExponentialHistogram{
			DataPoints: []*metricspb.ExponentialHistogramDataPoint{{TimeUnixNano: ns(ts), Count: 4}}, // no sum: only _count
		}}},
		&metricspb.Metric{Name: "go_gc_duration_seconds", Data: &metricspb.Metric_Summary{Summary: &metricspb.Summary{
			DataPoints: []*metricspb.SummaryDataPoint{{TimeUnixNano: ns(ts), Count: 10, Sum: 0.25,
				QuantileValues: []*metricspb.SummaryDataPoint_ValueAtQuantile{{Quantile: 0.5, Value: 0.02}}}},
		}}},
	)
	res := Metrics(1, req, now, Limits{})
	got := map[string]float64{}
	for _, p := range res.Points {
		got[p.Name] = p.Value
		if p.Instance != "vllm-0" || p.Service != "vllm" {
			t.Errorf("%s: service=%q instance=%q, want vllm vllm-0", p.Name, p.Service, p.Instance)
		}
	}
	want := map[string]float64{
		"vllm:time_to_first_token_seconds_sum":   412.87,
		"vllm:time_to_first_token_seconds_count": 1523,
		"gen_ai.client.operation.duration_count": 4,
		"go_gc_duration_seconds_sum":             0.25,
		"go_gc_duration_seconds_count":           10,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("points %v, want %v", got, want)
	}
}

func TestMetricsValidation(t *testing.T) {
	ok := now.Add(-time.Second)
	req := metricsRequest(nil,
		gauge("vllm:num_requests_running",
			dbl(ok, 4, str("instance", "10.0.0.9:8000")), // kept; instance from the label
			dbl(ok, math.NaN()),                          // dropped silently
			dbl(ok, math.Inf(1)),                         // dropped silently
			&metricspb.NumberDataPoint{TimeUnixNano: ns(ok), Flags: 1, Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 1}}, // staleness marker
			&metricspb.NumberDataPoint{TimeUnixNano: ns(ok)},                                                                    // no value
			dbl(time.Unix(0, 0), 1), // time 0: rejected
			dbl(time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC), 1),
			&metricspb.NumberDataPoint{TimeUnixNano: year2300, Value: &metricspb.NumberDataPoint_AsInt{AsInt: 1}},
			dbl(ok, 2, str("pod", "sglang-1")), // instance from the pod label
		),
		nil, // a nil metric is skipped
	)
	res := Metrics(1, req, now, Limits{})
	if res.Rejected != 3 {
		t.Errorf("rejected %d (%v), want 3", res.Rejected, res.Errors)
	}
	var instances []string
	for _, p := range res.Points {
		if p.Name != "requests_running" || p.Service != "unknown_service" {
			t.Errorf("point %+v: want requests_running of unknown_service", p)
		}
		instances = append(instances, p.Instance)
	}
	sort.Strings(instances)
	if !reflect.DeepEqual(instances, []string{"10.0.0.9:8000", "sglang-1"}) {
		t.Errorf("instances %v, want the two valid points", instances)
	}
	joined := strings.Join(res.Errors, "; ")
	for _, frag := range []string{"time_unix_nano is zero", "before 2000-01-01", "in the future"} {
		if !strings.Contains(joined, frag) {
			t.Errorf("errors %q lack %q", joined, frag)
		}
	}
}
