package normalize

import (
	"fmt"
	"strings"
	"testing"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
)

// An exponential histogram becomes explicit buckets: the zero bucket,
// an empty bucket up to the first populated one's lower bound, then
// (2^(i/2^scale), 2^((i+1)/2^scale)].
func TestExponentialHistogramBuckets(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sum := 9.0
	req := &colmetricspb.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "vllm"}}},
			{Key: "service.instance.id", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "10.0.0.1:8000"}}}}},
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{
			Name: "vllm:time_to_first_token_seconds",
			Data: &metricspb.Metric_ExponentialHistogram{ExponentialHistogram: &metricspb.ExponentialHistogram{
				AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
				DataPoints: []*metricspb.ExponentialHistogramDataPoint{{
					StartTimeUnixNano: uint64(now.Add(-time.Minute).UnixNano()), TimeUnixNano: uint64(now.UnixNano()),
					Count: 6, Sum: &sum, Scale: 1, ZeroCount: 1,
					Positive: &metricspb.ExponentialHistogramDataPoint_Buckets{Offset: 2, BucketCounts: []uint64{2, 0, 3}},
				}},
			}},
		}}}},
	}}}
	res := Metrics(1, req, now, Limits{})
	if res.Rejected != 0 || len(res.Histograms) != 1 {
		t.Fatalf("rejected %d %v, histograms %d", res.Rejected, res.Errors, len(res.Histograms))
	}
	h := res.Histograms[0]
	// scale 1: base √2; offset 2 → first bucket (2, 2√2].
	want := "[0 2 2.828 4 5.657] [1 0 2 0 3 0]"
	if got := fmt.Sprintf("%.4g %v", h.Bounds, h.Counts); got != want {
		t.Errorf("buckets %s, want %s", got, want)
	}
	if h.Name != HistTTFT || h.Instance != "10.0.0.1:8000" || !h.Cumulative || h.Count != 6 || !h.Start.Equal(now.Add(-time.Minute)) {
		t.Errorf("point %+v", h)
	}
}

// A classic histogram of a Python prometheus_client page keeps its
// buckets and takes its start from the matching _created sample.
func TestPrometheusHistogramCreated(t *testing.T) {
	page := `# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 4.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.5",model_name="m"} 6.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 7.0
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 7.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 3.5
# TYPE vllm:request_queue_time_seconds_created gauge
vllm:request_queue_time_seconds_created{engine="0",model_name="m"} 1.7724e+09
`
	now := time.Unix(1772400100, 0).UTC()
	e, err := PrometheusExposition(1, strings.NewReader(page), "text/plain; version=0.0.4", now, "vllm", "10.0.0.1:8000")
	if err != nil || len(e.Histograms) != 1 {
		t.Fatalf("%v, %d histograms", err, len(e.Histograms))
	}
	h := e.Histograms[0]
	if fmt.Sprint(h.Bounds, h.Counts) != "[0.3 0.5] [4 2 1]" || h.Name != HistQueue || h.Count != 7 || h.Sum != 3.5 ||
		!h.Start.Equal(time.Unix(1772400000, 0)) || h.Labels["model_name"] != "m" || !h.Cumulative {
		t.Errorf("histogram %+v", h)
	}
}
