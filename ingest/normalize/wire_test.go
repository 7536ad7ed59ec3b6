package normalize

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// generatedTraces is the reference: the generated decoder, then Traces.
func generatedTraces(body []byte, now time.Time, lim Limits) (TraceResult, error) {
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return TraceResult{}, err
	}
	return Traces(7, &req, now, lim), nil
}

// sameAsGenerated fails t when TracesWire accepts body but yields anything
// other than the reference; it reports whether TracesWire accepted it.
func sameAsGenerated(t *testing.T, body []byte, now time.Time, lim Limits) bool {
	t.Helper()
	got, ok := TracesWire(7, body, now, lim)
	want, err := generatedTraces(body, now, lim)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("TracesWire accepted a body the generated decoder refuses (%v): %x", err, body)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TracesWire differs from the generated decoder for %x:\n got  %+v\n want %+v", body, got, want)
	}
	return true
}

// sdkExports runs the OpenTelemetry Go SDK's OTLP/HTTP exporter against a
// server that keeps the request bodies: real SDK exports, byte for byte.
func sdkExports(t *testing.T) [][]byte {
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var src io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			src = zr
		}
		b, err := io.ReadAll(src)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "chat-api"), attribute.String("k8s.pod.name", "chat-api-7d9f"),
		attribute.Int("process.pid", 1), attribute.StringSlice("process.command_args", []string{"python", "-m", "app"}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	tr := tp.Tracer("openai_v2", trace.WithInstrumentationVersion("2.1b0"), trace.WithInstrumentationAttributes(attribute.String("scope.k", "v")))
	t0 := time.Now().Add(-time.Minute)
	for i := 0; i < 20; i++ {
		ctx, root := tr.Start(ctx, "POST /answer", trace.WithTimestamp(t0), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.route", "/answer"), attribute.Int("http.response.status_code", 200)))
		_, llm := tr.Start(ctx, "chat gpt-4o", trace.WithTimestamp(t0.Add(time.Millisecond)), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "OpenAI"),
				attribute.String("gen_ai.request.model", "gpt-4o"), attribute.Int("gen_ai.usage.input_tokens", 100+i),
				attribute.Int64("gen_ai.usage.output_tokens", 20), attribute.Float64("gen_ai.response.time_to_first_chunk", 0.25),
				attribute.Bool("gen_ai.request.stream", true), attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop"}),
				attribute.Int64Slice("x.ints", []int64{1, 2}), attribute.Float64Slice("x.floats", []float64{0.5}),
				attribute.BoolSlice("x.bools", []bool{true}), attribute.String("x.unicode", "héllo ✓")),
			trace.WithLinks(trace.Link{SpanContext: root.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("l", "v")}}))
		llm.AddEvent("First Token Stream Event", trace.WithTimestamp(t0.Add(300*time.Millisecond)), trace.WithAttributes(attribute.Int("n", 1)))
		if i%3 == 0 {
			llm.SetStatus(codes.Error, "upstream returned 500")
		}
		llm.End(trace.WithTimestamp(t0.Add(2 * time.Second)))
		root.End(trace.WithTimestamp(t0.Add(3 * time.Second)))
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(bodies) == 0 {
		t.Fatal("the SDK exported nothing")
	}
	return bodies
}

func TestTracesWireMatchesGenerated(t *testing.T) {
	lims := []Limits{{}, fuzzLimits}
	for i, body := range sdkExports(t) {
		for _, lim := range lims {
			if !sameAsGenerated(t, body, time.Now(), lim) {
				t.Errorf("SDK export %d: TracesWire left a plain SDK export to the generated decoder", i)
			}
		}
	}

	vllm := newSpan("llm_request", str("gen_ai.response.model", "m"), f64("gen_ai.latency.time_in_queue", 0.5),
		i64("gen_ai.usage.prompt_tokens", 10), kv("x", arr(sv("a"), kvlist(i64("b", 1)))), boolean("b", true),
		kv("bytes", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 0xff}}}),
		kv("strindex", &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValueStrindex{StringValueStrindex: 3}}),
		kv("empty", &commonpb.AnyValue{}), kv("nil", nil), str("gen_ai.response.model", "later wins"),
		str("a.very.long.key.that.is.cut.by.the.fuzz.limits", "v"), str("long", string(bytes.Repeat([]byte("é"), 100))))
	vllm.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "boom"}
	client := newSpan("chat", str("openinference.span.kind", "LLM"), str("gen_ai.operation.name", "invoke_agent"),
		str("langfuse.observation.completion_start_time", `"2026-03-01T11:59:50.5Z"`),
		str("langfuse.observation.usage_details", `{"input": 10, "output": 5}`))
	client.SpanId = []byte{1, 2, 3, 4, 5, 6, 7, 8}
	client.ParentSpanId = make([]byte, 8) // all zero: no parent
	client.Events = []*tracepb.Span_Event{{Name: "first token", TimeUnixNano: ns(start.Add(time.Second))}}
	bad := newSpan("bad")
	bad.SpanId = []byte{1}
	future := newSpan("future")
	future.EndTimeUnixNano = year2300
	noResource := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{vllm}}}}}}
	// More span shapes than keyValue remembers per attribute position, so
	// its key cache rotates: keys in six orders, the same ones at the same
	// positions in different spans.
	var shapes []*tracepb.Span
	keys := []string{"http.route", "tenant.id", "gen_ai.request.model", "user.id", "db.system", "peer.service"}
	for i := range 6 {
		var attrs []*commonpb.KeyValue
		for j := range keys {
			attrs = append(attrs, str(keys[(i+j)%len(keys)], fmt.Sprint(i, j)))
		}
		for range 2 {
			shapes = append(shapes, newSpan(fmt.Sprint("shape ", i), attrs...))
		}
	}
	// Hidden characters in keys and values, short and past the limits,
	// and keys that are the same once cleaned.
	hostile := newSpan("chat\u202e "+hostileText, str("gen_ai.request.model", "m\u2066x"), str("k\x00", "1"), str("k", "2"),
		str("key\u202e"+hostileText, hostileText+hostileText+hostileText), str("plain", "value"), str("nul", "\x00"),
		str("long clean", strings.Repeat("é", 40)+"\u200b"))
	cases := map[string]proto.Message{
		"hidden characters": traceRequest([]*commonpb.KeyValue{str("service.name", "\u202esvc")}, hostile, hostile),
		"shapes":            traceRequest(nil, shapes...),
		"conventions":       traceRequest([]*commonpb.KeyValue{str("service.name", "vllm"), str("host.name", "h")}, vllm, client),
		"rejects":           traceRequest(nil, bad, vllm, future, bad, bad, bad, bad, bad),
		"only rejects":      traceRequest(nil, bad, future),
		"no resource":       noResource,
		"empty":             &coltracepb.ExportTraceServiceRequest{},
		"empty service":     traceRequest([]*commonpb.KeyValue{str("service.name", "")}, client),
	}
	for name, m := range cases {
		body, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, lim := range lims {
			if !sameAsGenerated(t, body, now, lim) {
				t.Errorf("%s: TracesWire left a canonical encoding to the generated decoder", name)
			}
		}
	}

	// Encodings the wire reader leaves to the generated decoder, or must
	// refuse as it does.
	span, _ := proto.Marshal(vllm)
	rs := func(fields ...[]byte) []byte {
		b := protowire.AppendTag(nil, 2, protowire.BytesType) // scope_spans
		b = protowire.AppendBytes(b, protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), bytes.Join(append([][]byte{span}, fields...), nil)))
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), b)
	}
	field := func(num protowire.Number, typ protowire.Type, v []byte) []byte {
		return append(protowire.AppendTag(nil, num, typ), v...)
	}
	odd := map[string][]byte{
		"invalid UTF-8 name":   rs(field(5, protowire.BytesType, protowire.AppendBytes(nil, []byte{0xff}))),
		"name as varint":       rs(field(5, protowire.VarintType, protowire.AppendVarint(nil, 1))),
		"status twice":         rs(field(15, protowire.BytesType, protowire.AppendBytes(nil, nil))),
		"unknown span field":   rs(field(99, protowire.VarintType, protowire.AppendVarint(nil, 1))),
		"truncated":            rs(field(9, protowire.BytesType, []byte{5, 1})),
		"two values in oneof":  rs(field(9, protowire.BytesType, protowire.AppendBytes(nil, field(2, protowire.BytesType, protowire.AppendBytes(nil, append(field(3, protowire.VarintType, []byte{1}), field(1, protowire.BytesType, []byte{1, 'a'})...)))))),
		"end group":            field(1, protowire.EndGroupType, nil),
		"field zero":           {0, 0},
		"unknown group":        append(field(5, protowire.StartGroupType, nil), field(5, protowire.EndGroupType, nil)...),
		"later trace id wins":  rs(field(1, protowire.BytesType, protowire.AppendBytes(nil, bytes.Repeat([]byte{9}, 16)))),
		"negative kind varint": rs(field(6, protowire.VarintType, protowire.AppendVarint(nil, ^uint64(0)))),
		// The key after the value: read field by field, not by the fast layout.
		"value before key": rs(field(9, protowire.BytesType, protowire.AppendBytes(nil, append(
			field(2, protowire.BytesType, protowire.AppendBytes(nil, field(1, protowire.BytesType, protowire.AppendBytes(nil, []byte("v"))))),
			field(1, protowire.BytesType, protowire.AppendBytes(nil, []byte("gen_ai.response.model")))...)))),
	}
	for name, body := range odd {
		_, ok := TracesWire(7, body, now, Limits{})
		sameAsGenerated(t, body, now, Limits{})
		_, err := generatedTraces(body, now, Limits{})
		t.Logf("%s: wire reader ok=%v, generated decoder err=%v", name, ok, err)
	}
	if _, ok := TracesWire(7, odd["truncated"], now, Limits{}); ok {
		t.Error("a truncated body was accepted")
	}
	if _, err := generatedTraces(odd["invalid UTF-8 name"], now, Limits{}); err == nil {
		t.Error("the generated decoder took invalid UTF-8: the fallback would not refuse it")
	} else if _, ok := TracesWire(7, odd["invalid UTF-8 name"], now, Limits{}); ok {
		t.Error("invalid UTF-8 was accepted by the wire reader")
	}
}

// FuzzTracesWire: whatever the body, the wire reader either leaves it to
// the generated decoder or yields exactly what that decoder and Traces
// yield; the canonical re-encoding of any body the generated decoder takes
// is read the same way.
func FuzzTracesWire(f *testing.F) {
	vllm := newSpan("llm_request", str("gen_ai.response.model", "m"), f64("gen_ai.latency.time_in_queue", 0.5),
		i64("gen_ai.usage.prompt_tokens", 10), kv("x", arr(sv("a"), kvlist(i64("b", 1)))), kv("nil", nil), boolean("b", false))
	client := newSpan("chat", str("openinference.span.kind", "LLM"),
		str("langfuse.observation.completion_start_time", `"2026-03-01T11:59:50.5Z"`))
	client.SpanId = []byte{1, 2, 3, 4, 5, 6, 7, 8}
	client.Events = []*tracepb.Span_Event{{Name: "first token", TimeUnixNano: ns(start.Add(time.Second))}}
	client.Links = []*tracepb.Span_Link{{TraceId: traceID, SpanId: spanID}}
	client.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	f.Add(mustMarshal(f, traceRequest([]*commonpb.KeyValue{str("service.name", "vllm")}, vllm, client)))
	f.Add(mustMarshal(f, traceRequest([]*commonpb.KeyValue{str("service.name", "\u202evllm")},
		newSpan("n\x1b\u2066", str("k\u200b", hostileText), str("gen_ai.request.model", "\u0085m")))))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, lim := range []Limits{{}, fuzzLimits} {
			sameAsGenerated(t, data, now, lim)
		}
		var req coltracepb.ExportTraceServiceRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		canon, err := proto.Marshal(&req)
		if err != nil {
			if errors.Is(err, proto.Error) {
				return
			}
			t.Fatal(err)
		}
		sameAsGenerated(t, canon, now, fuzzLimits)
	})
}

// benchExport is a realistic 1000-span export: 250 LLM requests of an app
// pod (HTTP root, retrieval, GenAI client span) and their vLLM server
// spans, ~22 attributes per span and ~20 per resource, as in cmd/bench.
func benchExport(b *testing.B) []byte {
	res := func(service, pod string) *resourcepb.Resource {
		kvs := []*commonpb.KeyValue{str("service.name", service), str("service.instance.id", pod), str("k8s.pod.name", pod)}
		for i := 0; i < 17; i++ {
			kvs = append(kvs, str(fmt.Sprintf("resource.key.%d", i), fmt.Sprintf("resource-value-%d", i)))
		}
		return &resourcepb.Resource{Attributes: kvs}
	}
	filler := func(prefix string, n, i int) []*commonpb.KeyValue {
		var kvs []*commonpb.KeyValue
		for a := 0; a < n; a++ {
			switch a % 4 {
			case 0:
				kvs = append(kvs, i64(fmt.Sprintf("%s.count.%d", prefix, a), int64(i*a)))
			case 1:
				kvs = append(kvs, f64(fmt.Sprintf("%s.score.%d", prefix, a), float64(i)/7))
			default:
				kvs = append(kvs, str(fmt.Sprintf("%s.key.%d", prefix, a), fmt.Sprintf("value-%d-%d", a, i%97)))
			}
		}
		return kvs
	}
	app := &tracepb.ScopeSpans{}
	server := &tracepb.ScopeSpans{}
	t0 := time.Now().Add(-time.Minute)
	for i := 0; i < 250; i++ {
		tid := make([]byte, 16)
		binary.BigEndian.PutUint64(tid[8:], uint64(i)+1)
		sid := func(k int) []byte {
			s := make([]byte, 8)
			binary.BigEndian.PutUint64(s, uint64(i*4+k)+1)
			return s
		}
		span := func(k int, name string, kind tracepb.Span_SpanKind, attrs []*commonpb.KeyValue) *tracepb.Span {
			sp := &tracepb.Span{TraceId: tid, SpanId: sid(k), Name: name, Kind: kind, Attributes: attrs,
				StartTimeUnixNano: ns(t0.Add(time.Duration(k) * time.Millisecond)), EndTimeUnixNano: ns(t0.Add(time.Second))}
			if k > 0 {
				sp.ParentSpanId = sid(0)
			}
			return sp
		}
		client := append([]*commonpb.KeyValue{str("gen_ai.operation.name", "chat"), str("gen_ai.provider.name", "openai"),
			str("gen_ai.request.model", "llama-3.1-8b"), str("gen_ai.response.model", "llama-3.1-8b"), i64("gen_ai.usage.input_tokens", 900),
			i64("gen_ai.usage.output_tokens", 120), f64("gen_ai.response.time_to_first_chunk", 0.31),
			kv("gen_ai.response.finish_reasons", arr(sv("stop")))}, filler("client", 14, i)...)
		srv := append([]*commonpb.KeyValue{str("gen_ai.response.model", "llama-3.1-8b"), i64("gen_ai.usage.prompt_tokens", 900),
			i64("gen_ai.usage.completion_tokens", 120), f64("gen_ai.latency.time_in_queue", 0.02), f64("gen_ai.latency.time_to_first_token", 0.2),
			f64("gen_ai.latency.time_in_model_prefill", 0.18), f64("gen_ai.latency.time_in_model_decode", 0.6), f64("gen_ai.latency.e2e", 0.8)},
			filler("server", 13, i)...)
		app.Spans = append(app.Spans, span(0, "POST /answer", tracepb.Span_SPAN_KIND_SERVER, filler("http", 22, i)),
			span(1, "qdrant.search", tracepb.Span_SPAN_KIND_CLIENT, filler("db", 22, i)),
			span(2, "chat llama-3.1-8b", tracepb.Span_SPAN_KIND_CLIENT, client))
		server.Spans = append(server.Spans, span(3, "llm_request", tracepb.Span_SPAN_KIND_SERVER, srv))
	}
	body, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{Resource: res("chat-api", "chat-api-7d9f"), ScopeSpans: []*tracepb.ScopeSpans{app}},
		{Resource: res("vllm", "vllm-0"), ScopeSpans: []*tracepb.ScopeSpans{server}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkTracesWire: decoding and normalizing a 1000-span export, the
// generated decoder + Traces against the wire reader.
func BenchmarkTracesWire(b *testing.B) {
	body := benchExport(b)
	now := time.Now()
	b.Run("generated+Traces", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := generatedTraces(body, now, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
	})
	b.Run("TracesWire", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if res, ok := TracesWire(7, body, now, Limits{}); !ok || len(res.Spans) != 1000 {
				b.Fatalf("ok=%v, %d spans", ok, len(res.Spans))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
	})
	b.Run("TracesWireAttrs", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			res, ok := TracesWireAttrs(7, body, now, Limits{})
			if !ok || len(res.Spans) != 1000 {
				b.Fatalf("ok=%v, %d spans", ok, len(res.Spans))
			}
			res.Attrs.Release() // as the pipeline does once the spans are encoded
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
	})
}

// TestTracesWireAttrs: the attribute list TracesWireAttrs returns instead
// of maps holds, span by span, exactly the map the generated decoder and
// Traces build (repeated keys, keys past MaxAttributes, long keys that
// collide once cut, rejected spans in between), each key once per span,
// each name once; released lists are reused without leaking into the
// next export.
func TestTracesWireAttrs(t *testing.T) {
	long := "a.key.longer.than.sixteen.bytes"
	dup := newSpan("dup", str("k", "first"), i64("n", 1), str("k", "second"), boolean("b", true), str("k", "third"))
	many := newSpan("many")
	for i := 0; i < 12; i++ {
		many.Attributes = append(many.Attributes, str(fmt.Sprintf("key.%02d", i), fmt.Sprint(i)))
	}
	many.Attributes = append(many.Attributes, str("key.03", "late value of a kept key"), str("key.11", "dropped key"))
	cut := newSpan("cut", str(long+".one", "1"), str(long+".two", "2"), str(long[:16], "3"), f64("x", 0.25))
	bad := newSpan("bad", str("k", "never stored"))
	bad.SpanId = []byte{1}
	none := newSpan("none")
	lists := kv("list", arr(sv("a"), kvlist(i64("b", 1))))
	req := traceRequest([]*commonpb.KeyValue{str("service.name", "s")}, dup, bad, many, none, cut, newSpan("list", lists))
	other := traceRequest(nil, newSpan("other", str("z", "zz")))
	for _, lim := range []Limits{{}, fuzzLimits} {
		for round := 0; round < 2; round++ { // the second round runs on released lists
			for _, m := range []proto.Message{req, other} {
				body, err := proto.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				got, ok := TracesWireAttrs(7, body, now, lim)
				if !ok {
					t.Fatal("TracesWireAttrs left a canonical body to the generated decoder")
				}
				want, err := generatedTraces(body, now, lim)
				if err != nil {
					t.Fatal(err)
				}
				a := got.Attrs
				if a == nil || a.Len() != len(got.Spans) || len(got.Spans) != len(want.Spans) {
					t.Fatalf("%d spans, %v attribute lists, want %d", len(got.Spans), a, len(want.Spans))
				}
				names := map[string]bool{}
				for _, n := range a.Names {
					if names[n] {
						t.Errorf("name %q listed twice", n)
					}
					names[n] = true
				}
				from := 0
				for i := range got.Spans {
					if got.Spans[i].Attributes != nil {
						t.Errorf("span %d has a map as well", i)
					}
					seen := map[uint32]bool{}
					for _, k := range a.Keys[from:a.Ends[i]] {
						if seen[k] {
							t.Errorf("span %d lists %q twice", i, a.Names[k])
						}
						seen[k] = true
					}
					from = a.Ends[i]
					if m := a.Map(i); !reflect.DeepEqual(m, want.Spans[i].Attributes) {
						t.Errorf("limits %+v, span %d (%s): attributes\n got %v\nwant %v", lim, i, want.Spans[i].Name, m, want.Spans[i].Attributes)
					}
					got.Spans[i].Attributes = want.Spans[i].Attributes
				}
				attrs := got.Attrs
				got.Attrs = nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("limits %+v: spans besides attributes\n got %+v\nwant %+v", lim, got, want)
				}
				attrs.Release()
			}
		}
	}

	// A key is compared with the one at the same position of the span
	// before; a different one is still checked as UTF-8.
	// Two spans with the key "k", the second one's made invalid UTF-8.
	span, _ := proto.Marshal(newSpan("valid", str("k", "v")))
	spoilt := bytes.Replace(span, []byte("\x01k"), []byte("\x01\xff"), 1)
	if bytes.Equal(spoilt, span) {
		t.Fatal("key not found in the encoded span")
	}
	ss := func(spans ...[]byte) []byte {
		var b []byte
		for _, sp := range spans {
			b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), sp)
		}
		rs := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), b)
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), rs)
	}
	if _, ok := TracesWireAttrs(7, ss(span, span), now, Limits{}); !ok {
		t.Error("two valid spans refused")
	}
	if _, ok := TracesWireAttrs(7, ss(span, spoilt), now, Limits{}); ok {
		t.Error("an invalid UTF-8 key after a valid one at the same position was taken")
	}
}

// TestTracesWireSizesSpansOnce: the spans slice is allocated once, at the
// export's span count over all its resources and scopes, and a body of
// spans that are all rejected does not make it allocate for them.
func TestTracesWireSizesSpansOnce(t *testing.T) {
	var spans []*tracepb.Span
	for i := range 300 {
		spans = append(spans, newSpan(fmt.Sprint("span ", i), str("k", "v")))
	}
	req := traceRequest(nil, spans[:100]...)
	req.ResourceSpans = append(req.ResourceSpans, &tracepb.ResourceSpans{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans[100:200]}, {Spans: spans[200:]}},
	})
	body, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := TracesWireAttrs(7, body, now, Limits{})
	if !ok || len(res.Spans) != 300 || cap(res.Spans) != 300 {
		t.Fatalf("ok=%v, %d spans in a slice of %d, want 300 in 300", ok, len(res.Spans), cap(res.Spans))
	}
	res.Attrs.Release()

	// 2 bytes a span on the wire, ~400 in memory: sized by their count,
	// 512k empty spans would take 200 MiB before being rejected.
	empty := make([]*tracepb.Span, 1<<19)
	for i := range empty {
		empty[i] = &tracepb.Span{}
	}
	body, err = proto.Marshal(traceRequest(nil, empty...))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, ok = TracesWireAttrs(7, body, now, Limits{})
	runtime.ReadMemStats(&after)
	if !ok || len(res.Spans) != 0 || res.Rejected != int64(len(empty)) {
		t.Fatalf("ok=%v, %d spans kept, %d rejected of %d", ok, len(res.Spans), res.Rejected, len(empty))
	}
	res.Attrs.Release()
	if got := after.TotalAlloc - before.TotalAlloc; got > 52<<20 {
		t.Errorf("reading %d KiB of empty spans allocated %d MiB", len(body)>>10, got>>20)
	}
}
