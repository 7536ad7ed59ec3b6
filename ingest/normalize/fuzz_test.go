package normalize

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/telemetry"
)

// fuzzLimits are small so that every clamp path is exercised.
var fuzzLimits = Limits{MaxAttributes: 8, MaxValueBytes: 64, MaxKeyBytes: 16}

var lowerHex = regexp.MustCompile(`^[0-9a-f]*$`)

func mustMarshal(f *testing.F, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// checkMap asserts a stored attribute map respects the limits.
func checkMap(t *testing.T, what string, m map[string]string, lim Limits) {
	if len(m) > lim.MaxAttributes+1 { // +1: events add "message"
		t.Errorf("%s: %d entries, limit %d", what, len(m), lim.MaxAttributes)
	}
	for k, v := range m {
		if len(k) > lim.MaxKeyBytes && k != "message" || len(v) > lim.MaxValueBytes || !utf8.ValidString(k) || !utf8.ValidString(v) ||
			hasHidden(k) || hasHidden(v) {
			t.Errorf("%s: entry %q=%q breaks the limits or is not UTF-8", what, k, v)
		}
	}
}

func plausible(t *testing.T, what string, ts time.Time) {
	if ts.Before(oldest) || ts.After(now.Add(maxFuture)) {
		t.Errorf("%s: implausible time %v stored", what, ts)
	}
}

func FuzzTraces(f *testing.F) {
	vllm := newSpan("llm_request", str("gen_ai.response.model", "m"), f64("gen_ai.latency.time_in_queue", 0.5),
		i64("gen_ai.usage.prompt_tokens", 10), kv("x", arr(sv("a"), kvlist(i64("b", 1)))))
	client := newSpan("chat", str("openinference.span.kind", "LLM"),
		str("langfuse.observation.completion_start_time", `"2026-03-01T11:59:50.5Z"`))
	client.SpanId = []byte{1, 2, 3, 4, 5, 6, 7, 8}
	client.Events = []*tracepb.Span_Event{{Name: "first token", TimeUnixNano: ns(start.Add(time.Second))}}
	f.Add(mustMarshal(f, traceRequest([]*commonpb.KeyValue{str("service.name", "vllm")}, vllm, client)))
	f.Add(mustMarshal(f, traceRequest([]*commonpb.KeyValue{str("service.name", "\u202evllm")}, newSpan(hostileText, str(hostileText, hostileText)))))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req coltracepb.ExportTraceServiceRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		var total int64
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					if sp != nil {
						total++
					}
				}
			}
		}
		res := Traces(1, &req, now, fuzzLimits)
		if int64(len(res.Spans))+res.Rejected != total || len(res.Errors) > maxErrors {
			t.Fatalf("%d spans + %d rejected != %d sent (errors %d)", len(res.Spans), res.Rejected, total, len(res.Errors))
		}
		for _, s := range res.Spans {
			if len(s.TraceID) != 32 || len(s.SpanID) != 16 || !lowerHex.MatchString(s.TraceID+s.SpanID+s.ParentSpanID) {
				t.Errorf("ids %q %q %q", s.TraceID, s.SpanID, s.ParentSpanID)
			}
			plausible(t, "start", s.Start)
			plausible(t, "end", s.End)
			if s.End.Before(s.Start) {
				t.Errorf("end %v before start %v", s.End, s.Start)
			}
			checkMap(t, "attributes", s.Attributes, fuzzLimits)
			checkMap(t, "resource", s.Resource, fuzzLimits)
			for _, str := range []string{s.Name, s.Service, s.Instance, s.StatusMessage, s.LLM.Model, s.LLM.Provider, s.LLM.Operation} {
				if !utf8.ValidString(str) || len(str) > maxNameBytes && len(str) > fuzzLimits.MaxValueBytes || hasHidden(str) {
					t.Errorf("string %q is not clean", str)
				}
			}
			for _, str := range s.EventNames {
				if hasHidden(str) {
					t.Errorf("event name %q is not clean", str)
				}
			}
			checkLLM(t, s.LLM, s.Duration())
		}
	})
}

func checkLLM(t *testing.T, c telemetry.LLMCall, spanDur time.Duration) {
	for _, n := range []*int64{c.InputTokens, c.OutputTokens} {
		if n != nil && *n < 0 {
			t.Errorf("negative token count %d", *n)
		}
	}
	for _, d := range []*time.Duration{c.QueueTime, c.PrefillTime, c.ServerTTFT, c.DecodeTime, c.ServerE2E} {
		if d != nil && (*d < 0 || *d > maxSeconds*time.Second) {
			t.Errorf("server duration %v out of range", *d)
		}
	}
	if c.ClientTTFT != nil && (*c.ClientTTFT < 0 || *c.ClientTTFT > max(spanDur, maxSeconds*time.Second)) {
		t.Errorf("client TTFT %v out of range", *c.ClientTTFT)
	}
	if c.Role != telemetry.LLMClient && c.ClientTTFT != nil || c.Role != telemetry.LLMServer && c.QueueTime != nil {
		t.Errorf("fields of the wrong role: %s", describe(c))
	}
}

func FuzzMetrics(f *testing.F) {
	ts := now.Add(-time.Second)
	sum := 1.5
	f.Add(mustMarshal(f, metricsRequest(collectorPromResource,
		gauge("vllm:gpu_cache_usage_perc", dbl(ts, 0.9, str("model_name", "m"))),
		&metricspb.Metric{Name: "h", Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
			DataPoints: []*metricspb.HistogramDataPoint{{TimeUnixNano: ns(ts), Count: 3, Sum: &sum}},
		}}},
	)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req colmetricspb.ExportMetricsServiceRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		res := Metrics(1, &req, now, fuzzLimits)
		if len(res.Errors) > maxErrors || res.Rejected < int64(len(res.Errors)) {
			t.Fatalf("rejected %d with %d errors", res.Rejected, len(res.Errors))
		}
		for _, p := range res.Points {
			if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
				t.Errorf("%s: non-finite value stored", p.Name)
			}
			plausible(t, p.Name, p.Time)
			checkMap(t, "labels", p.Labels, fuzzLimits)
			if !utf8.ValidString(p.Name) || !utf8.ValidString(p.Service) || !utf8.ValidString(p.Instance) {
				t.Errorf("point identity not UTF-8: %q %q %q", p.Name, p.Service, p.Instance)
			}
		}
	})
}

func FuzzLogs(f *testing.F) {
	f.Add(mustMarshal(f, &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{
		k8sEventRecord("ScaledObject", "s", "keda.sh/v1alpha1", "KEDAScaleTargetActivated", "Scaled apps/v1.Deployment a/b from 0 to 1", now),
	}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req collogspb.ExportLogsServiceRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		res := Logs(1, &req, now, fuzzLimits)
		for _, e := range res.Events {
			plausible(t, "event", e.Time)
			checkMap(t, "event attributes", e.Attributes, fuzzLimits)
			if e.Kind != telemetry.EventScale && e.Kind != telemetry.EventK8s {
				t.Errorf("kind %q", e.Kind)
			}
			if !utf8.ValidString(e.Service + e.Instance + e.Reason) {
				t.Errorf("event identity not UTF-8")
			}
		}
	})
}

func FuzzPrometheus(f *testing.F) {
	f.Add(vllmMetrics, "")
	f.Add("# TYPE a counter\na_total{x=\"1\"} 2 # {t=\"1\"} 1 1.5\na_created 3\n# EOF\n", "application/openmetrics-text")
	f.Add("{\"a.b\",\"c\"=\"d\"} 1 1700000000000\n", "text/plain")
	f.Fuzz(func(t *testing.T, body, contentType string) {
		pts, err := Prometheus(1, strings.NewReader(body), contentType, now, "s", "i")
		if err != nil {
			return
		}
		for _, p := range pts {
			if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) || p.Name == "" {
				t.Errorf("bad point %+v", p)
			}
			plausible(t, p.Name, p.Time)
			if !utf8.ValidString(p.Name) {
				t.Errorf("name %q not UTF-8", p.Name)
			}
			for k, v := range p.Labels {
				if !utf8.ValidString(k) || !utf8.ValidString(v) {
					t.Errorf("label %q=%q not UTF-8", k, v)
				}
			}
		}
	})
}
