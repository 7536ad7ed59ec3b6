package ingest

import (
	"encoding/binary"
	"encoding/hex"
	"io"
	"log/slog"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// Helpers shared by the internal and external (ingest_test) tests; exported
// names in _test.go files are visible to both and to nothing else.

// QuietLog discards test logs.
var QuietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// SampleTraceID returns a distinct, valid trace id for seed.
func SampleTraceID(seed uint64) []byte {
	id := make([]byte, 16)
	id[0] = 0xab
	binary.BigEndian.PutUint64(id[8:], seed)
	return id
}

// SampleTraceHex is SampleTraceID as stored in ClickHouse.
func SampleTraceHex(seed uint64) string { return hex.EncodeToString(SampleTraceID(seed)) }

// SampleSpan is a valid span of trace seed; the first span (i = 0) is a vLLM
// server span with the queue/prefill split.
func SampleSpan(seed uint64, i int, t0 time.Time) *tracepb.Span {
	sid := make([]byte, 8)
	binary.BigEndian.PutUint64(sid, uint64(i)+1)
	sp := &tracepb.Span{TraceId: SampleTraceID(seed), SpanId: sid, Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: uint64(t0.Add(time.Duration(i) * time.Millisecond).UnixNano()),
		EndTimeUnixNano:   uint64(t0.Add(time.Duration(i)*time.Millisecond + 300*time.Millisecond).UnixNano())}
	if i == 0 {
		sp.Attributes = []*commonpb.KeyValue{
			{Key: "gen_ai.request.model", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "llama"}}},
			{Key: "gen_ai.latency.time_in_queue", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.2}}},
			{Key: "gen_ai.latency.time_in_model_prefill", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.05}}},
		}
	} else {
		sp.Name = "work"
		sp.Kind = tracepb.Span_SPAN_KIND_INTERNAL
	}
	return sp
}

// SampleTraces is an export of n spans of trace seed from service vllm,
// instance vllm-0.
func SampleTraces(seed uint64, n int, t0 time.Time) *coltracepb.ExportTraceServiceRequest {
	spans := make([]*tracepb.Span, n)
	for i := range spans {
		spans[i] = SampleSpan(seed, i, t0)
	}
	return ExportOf(spans...)
}

// ExportOf wraps spans in one resource (service vllm, instance vllm-0).
func ExportOf(spans ...*tracepb.Span) *coltracepb.ExportTraceServiceRequest {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "vllm"), str("service.instance.id", "vllm-0")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}
