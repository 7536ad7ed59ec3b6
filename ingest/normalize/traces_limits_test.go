package normalize

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TestTracesRejects: corrupt spans are counted and explained, and do not
// take the valid spans of the same request down with them.
func TestTracesRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*tracepb.Span)
		reason string
	}{
		{"zero trace id", func(s *tracepb.Span) { s.TraceId = make([]byte, 16) }, "trace_id"},
		{"short trace id", func(s *tracepb.Span) { s.TraceId = traceID[:8] }, "trace_id"},
		{"zero span id", func(s *tracepb.Span) { s.SpanId = make([]byte, 8) }, "span_id"},
		{"missing span id", func(s *tracepb.Span) { s.SpanId = nil }, "span_id"},
		{"bad parent id", func(s *tracepb.Span) { s.ParentSpanId = []byte{1, 2, 3} }, "parent_span_id"},
		{"1970 timestamp", func(s *tracepb.Span) {
			s.StartTimeUnixNano = 1_000_000
			s.EndTimeUnixNano = 2_000_000
		}, "before 2000-01-01"},
		{"unset timestamps", func(s *tracepb.Span) { s.StartTimeUnixNano, s.EndTimeUnixNano = 0, 0 }, "before 2000-01-01"},
		{"year 2300", func(s *tracepb.Span) {
			s.StartTimeUnixNano = year2300
			s.EndTimeUnixNano = year2300 + 1
		}, "in the future"},
		{"two days ahead", func(s *tracepb.Span) {
			s.StartTimeUnixNano = ns(now.Add(48 * time.Hour))
			s.EndTimeUnixNano = ns(now.Add(49 * time.Hour))
		}, "in the future"},
		{"end before start", func(s *tracepb.Span) { s.EndTimeUnixNano = s.StartTimeUnixNano - 1 }, "end time before start"},
		{"uint64 max", func(s *tracepb.Span) { s.StartTimeUnixNano, s.EndTimeUnixNano = math.MaxUint64, math.MaxUint64 }, "in the future"},
		{"end in the far future", func(s *tracepb.Span) { s.EndTimeUnixNano = ns(now.Add(30 * 24 * time.Hour)) }, "in the future"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := newSpan("bad")
			tc.mutate(bad)
			good := newSpan("good")
			good.SpanId = []byte{9, 9, 9, 9, 9, 9, 9, 9}
			res := Traces(1, traceRequest(nil, bad, good), now, Limits{})
			if res.Rejected != 1 || len(res.Spans) != 1 || res.Spans[0].Name != "good" {
				t.Fatalf("rejected=%d spans=%d, want 1 rejected and the good span kept", res.Rejected, len(res.Spans))
			}
			if len(res.Errors) != 1 || !strings.Contains(res.Errors[0], tc.reason) {
				t.Errorf("errors %q, want one mentioning %q", res.Errors, tc.reason)
			}
		})
	}
}

func TestTracesErrorsAreCapped(t *testing.T) {
	var spans []*tracepb.Span
	for range 50 {
		s := newSpan("bad")
		s.TraceId = nil
		spans = append(spans, s)
	}
	res := Traces(1, traceRequest(nil, spans...), now, Limits{})
	if res.Rejected != 50 || len(res.Errors) != maxErrors {
		t.Errorf("rejected=%d errors=%d, want 50 and %d", res.Rejected, len(res.Errors), maxErrors)
	}
}

// TestTracesClamps: hostile sizes are clamped, not rejected.
func TestTracesClamps(t *testing.T) {
	t.Run("10k attributes keep 256, but an LLM key far down is still read", func(t *testing.T) {
		var attrs []*commonpb.KeyValue
		for i := range 10_000 {
			attrs = append(attrs, i64(fmt.Sprintf("attr.%05d", i), int64(i)))
		}
		attrs[9000] = str("gen_ai.request.model", "gpt-4o")
		attrs[9001] = str("gen_ai.provider.name", "openai")
		res := Traces(1, traceRequest(nil, newSpan("chat", attrs...)), now, Limits{})
		if len(res.Spans) != 1 {
			t.Fatalf("span rejected: %v", res.Errors)
		}
		s := res.Spans[0]
		if len(s.Attributes) != 256 || s.Attributes["attr.00255"] != "255" || s.Attributes["attr.00256"] != "" {
			t.Errorf("kept %d attributes (attr.00255=%q), want the first 256", len(s.Attributes), s.Attributes["attr.00255"])
		}
		if s.LLM.Model != "gpt-4o" || s.LLM.Role != telemetry.LLMClient {
			t.Errorf("LLM = %s, want client gpt-4o", describe(s.LLM))
		}
	})
	t.Run("custom MaxAttributes", func(t *testing.T) {
		res := Traces(1, traceRequest(nil, newSpan("x", str("a", "1"), str("b", "2"), str("c", "3"))), now, Limits{MaxAttributes: 2})
		if got := res.Spans[0].Attributes; len(got) != 2 || got["c"] != "" {
			t.Errorf("attributes %v, want a and b only", got)
		}
	})
	t.Run("1 MB value cut to 16 KiB on a rune boundary", func(t *testing.T) {
		big := strings.Repeat("é", 512*1024) // 2-byte runes, 1 MiB
		res := Traces(1, traceRequest(nil, newSpan("x", str("input.value", big))), now, Limits{})
		v := res.Spans[0].Attributes["input.value"]
		if len(v) != 16*1024 || !utf8.ValidString(v) {
			t.Errorf("value is %d bytes (valid UTF-8: %v), want 16384 valid", len(v), utf8.ValidString(v))
		}
	})
	t.Run("huge array rendered as JSON, cut to the limit", func(t *testing.T) {
		var vs []*commonpb.AnyValue
		for i := range 100_000 {
			vs = append(vs, iv(int64(i)))
		}
		res := Traces(1, traceRequest(nil, newSpan("x", kv("embedding", arr(vs...)))), now, Limits{MaxValueBytes: 100})
		if v := res.Spans[0].Attributes["embedding"]; len(v) != 100 || !strings.HasPrefix(v, "[0,1,2,") {
			t.Errorf("value %q (%d bytes), want the first 100 bytes of the JSON", v, len(v))
		}
	})
	t.Run("long key cut to 256 bytes, long name to 1 KiB", func(t *testing.T) {
		s := newSpan(strings.Repeat("n", 5000), str(strings.Repeat("k", 1000), "v"))
		res := Traces(1, traceRequest(nil, s), now, Limits{})
		got := res.Spans[0]
		if len(got.Name) != 1024 {
			t.Errorf("name is %d bytes, want 1024", len(got.Name))
		}
		if got.Attributes[strings.Repeat("k", 256)] != "v" {
			t.Errorf("attributes %v, want the key cut to 256 bytes", keys(got.Attributes))
		}
	})
	t.Run("invalid UTF-8 replaced with U+FFFD", func(t *testing.T) {
		s := newSpan("chat \xff\xfe", str("gen_ai.request.model", "gpt\xc3"), str("k\x80", "v\xe2\x82"), str("gen_ai.system", "openai"))
		s.Events = []*tracepb.Span_Event{{Name: "ev\xff", TimeUnixNano: ns(start)}}
		res := Traces(1, traceRequest([]*commonpb.KeyValue{str("service.name", "svc\xff")}, s), now, Limits{})
		got := res.Spans[0]
		if got.Name != "chat \uFFFD" || got.LLM.Model != "gpt\uFFFD" || got.Attributes["k\uFFFD"] != "v\uFFFD" ||
			got.Service != "svc\uFFFD" || got.EventNames[0] != "ev\uFFFD" {
			t.Errorf("name=%q model=%q attrs=%q service=%q events=%q", got.Name, got.LLM.Model, got.Attributes, got.Service, got.EventNames)
		}
	})
	t.Run("deeply nested kvlist stops at the depth limit", func(t *testing.T) {
		v := sv("leaf")
		for range 100 {
			v = kvlist(kv("a", v))
		}
		res := Traces(1, traceRequest(nil, newSpan("x", kv("deep", v))), now, Limits{})
		if got := res.Spans[0].Attributes["deep"]; !strings.Contains(got, "null") || strings.Contains(got, "leaf") {
			t.Errorf("deep = %q, want nesting cut with null", got)
		}
	})
}

func TestValueString(t *testing.T) {
	tests := []struct {
		in   *commonpb.AnyValue
		want string
	}{
		{iv(-42), "-42"},
		{&commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 3}}, "3"},
		{&commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.1}}, "0.1"},
		{&commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 1e21}}, "1e+21"},
		{&commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: math.Inf(-1)}}, "-Inf"},
		{&commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: false}}, "false"},
		{arr(), "[]"},
		{kvlist(), "{}"},
		{arr(sv("tab\there"), sv("\x01"), &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: math.NaN()}}), `["tab\there","\u0001","NaN"]`},
		{arr(nil, &commonpb.AnyValue{}), "[null,null]"},
		{&commonpb.AnyValue{Value: &commonpb.AnyValue_StringValueStrindex{StringValueStrindex: 3}}, ""},
		{nil, ""},
	}
	for _, tc := range tests {
		if got := valueString(tc.in, 1024); got != tc.want {
			t.Errorf("valueString(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
