// Package otlptest builds OTLP trace exports for tests: distinct trace ids
// per seed, a vLLM server span followed by plain work spans. It imports no
// Tokenpath package, so ingest's own (internal) tests can use it too.
package otlptest

import (
	"encoding/binary"
	"encoding/hex"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TraceID returns a distinct, valid trace id for seed.
func TraceID(seed uint64) []byte {
	id := make([]byte, 16)
	id[0] = 0xab
	binary.BigEndian.PutUint64(id[8:], seed)
	return id
}

// TraceHex is TraceID as stored in ClickHouse.
func TraceHex(seed uint64) string { return hex.EncodeToString(TraceID(seed)) }

// Span is a valid span of trace seed; the first span (i = 0) is a vLLM
// server span with the queue/prefill split, the others are work spans.
func Span(seed uint64, i int, t0 time.Time) *tracepb.Span {
	sid := make([]byte, 8)
	binary.BigEndian.PutUint64(sid, uint64(i)+1)
	sp := &tracepb.Span{TraceId: TraceID(seed), SpanId: sid, Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
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

// Traces is an export of n spans of trace seed from service vllm,
// instance vllm-0.
func Traces(seed uint64, n int, t0 time.Time) *coltracepb.ExportTraceServiceRequest {
	spans := make([]*tracepb.Span, n)
	for i := range spans {
		spans[i] = Span(seed, i, t0)
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
