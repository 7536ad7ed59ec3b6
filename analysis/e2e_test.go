package analysis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// The client and server halves of one request arrive in two exports, from
// two services, the server half first; the assembled row must carry the
// DESIGN.md decomposition to the millisecond.
func TestSplitTraceDecomposedThroughAPI(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	t0 := time.Now().Add(-2 * time.Minute).Truncate(time.Millisecond)
	app := sdktrace.NewTracerProvider(sdktrace.WithBatcher(srv.TraceExporter(t)), sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("rag-chat"))))
	vllm := sdktrace.NewTracerProvider(sdktrace.WithSyncer(srv.TraceExporter(t)),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("vllm"), semconv.ServiceInstanceID("vllm-0"))))

	rootCtx, root := app.Tracer("app").Start(ctx, "POST /chat", trace.WithTimestamp(t0), trace.WithAttributes(attribute.String("http.route", "/chat")))
	_, llm := app.Tracer("app").Start(rootCtx, "chat llama", trace.WithTimestamp(t0.Add(100*time.Millisecond)), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "vllm"),
			attribute.String("gen_ai.request.model", "llama"), attribute.Int("gen_ai.usage.input_tokens", 800),
			attribute.Int("gen_ai.usage.output_tokens", 101), attribute.Float64("gen_ai.response.time_to_first_chunk", 0.5)))
	_, s := vllm.Tracer("vllm").Start(trace.ContextWithSpanContext(ctx, llm.SpanContext()), "llm_request",
		trace.WithTimestamp(t0.Add(110*time.Millisecond)), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.Float64("gen_ai.latency.time_in_queue", 0.2), attribute.Float64("gen_ai.latency.time_in_model_prefill", 0.25),
			attribute.Float64("gen_ai.latency.time_to_first_token", 0.45), attribute.Float64("gen_ai.latency.time_in_model_decode", 1.0),
			attribute.String("gen_ai.request.model", "llama")))
	s.End(trace.WithTimestamp(t0.Add(1560 * time.Millisecond))) // exported now, alone
	// Let the server half be assembled on its own first.
	waitRequests(t, srv, t0, func(rs []map[string]any) bool { return len(rs) == 1 })
	llm.End(trace.WithTimestamp(t0.Add(1600 * time.Millisecond)))
	root.End(trace.WithTimestamp(t0.Add(1700 * time.Millisecond)))
	if err := app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	waitRequests(t, srv, t0, func(rs []map[string]any) bool {
		if len(rs) == 1 && rs[0]["service"] == "rag-chat" {
			got = rs[0]
			return true
		}
		return false
	})
	want := map[string]float64{"ttft_ms": 500, "pre_inference_ms": 100, "queue_ms": 200, "prefill_ms": 250, "network_ms": 50,
		"decode_ms": 1000, "e2e_ms": 1500, "itl_ms": 10, "input_tokens": 800, "output_tokens": 101}
	for k, v := range want {
		f, ok := got[k].(float64)
		if !ok || f < v-0.001 || f > v+0.001 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if got["instance"] != "vllm-0" || got["model"] != "llama" || got["cold_start"] != false {
		t.Errorf("row: %v", got)
	}
}

// waitRequests polls GET /api/v1/requests until ok accepts the rows.
func waitRequests(t *testing.T, srv *apptest.Server, t0 time.Time, ok func([]map[string]any) bool) {
	t.Helper()
	path := fmt.Sprintf("/api/v1/requests?from=%s&to=%s", t0.Add(-time.Minute).Format(time.RFC3339), t0.Add(time.Minute).Format(time.RFC3339))
	var last []map[string]any
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		var body struct {
			Requests []map[string]any `json:"requests"`
		}
		srv.GetJSON(t, path, &body)
		last = body.Requests
		if ok(last) {
			return
		}
	}
	t.Fatalf("requests never matched; last: %v", last)
}
