package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// sendTrace emits one vLLM-backed request through a real SDK exporter:
// root app span, LLM client span, and the server span in another service.
func sendTrace(t *testing.T, exp sdktrace.SpanExporter, t0 time.Time) trace.SpanContext {
	t.Helper()
	ctx := context.Background()
	app := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("rag-chat"))))
	root, span := app.Tracer("t").Start(ctx, "POST /chat", trace.WithTimestamp(t0), trace.WithSpanKind(trace.SpanKindServer))
	_, llm := app.Tracer("t").Start(root, "chat llama", trace.WithTimestamp(t0.Add(100*time.Millisecond)), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "vllm"),
			attribute.String("gen_ai.request.model", "llama"), attribute.Int("gen_ai.usage.input_tokens", 800),
			attribute.Int("gen_ai.usage.output_tokens", 101), attribute.Float64("gen_ai.response.time_to_first_chunk", 0.5)))
	server := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("vllm"), semconv.ServiceInstanceID("vllm-0"))))
	sctx := trace.ContextWithSpanContext(ctx, llm.SpanContext())
	_, srv := server.Tracer("vllm").Start(sctx, "llm_request", trace.WithTimestamp(t0.Add(110*time.Millisecond)), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.Float64("gen_ai.latency.time_in_queue", 0.2), attribute.Float64("gen_ai.latency.time_in_model_prefill", 0.25),
			attribute.Float64("gen_ai.latency.time_to_first_token", 0.45), attribute.Float64("gen_ai.latency.time_in_model_decode", 1.0),
			attribute.String("gen_ai.request.model", "llama")))
	srv.End(trace.WithTimestamp(t0.Add(1560 * time.Millisecond)))
	llm.End(trace.WithTimestamp(t0.Add(1600 * time.Millisecond)))
	span.End(trace.WithTimestamp(t0.Add(1700 * time.Millisecond)))
	if err := app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := server.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return span.SpanContext()
}

func TestOTLPExportersReachClickHouse(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	headers := map[string]string{"Authorization": "Bearer " + apptest.Key}
	exporters := map[string]func() (*otlptrace.Exporter, error){
		"http": func() (*otlptrace.Exporter, error) {
			return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(srv.OTLPHTTPAddr), otlptracehttp.WithInsecure(),
				otlptracehttp.WithHeaders(headers), otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		},
		"grpc": func() (*otlptrace.Exporter, error) {
			return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(srv.OTLPGRPCAddr), otlptracegrpc.WithInsecure(),
				otlptracegrpc.WithHeaders(headers), otlptracegrpc.WithCompressor("gzip"))
		},
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for name, mk := range exporters {
		t.Run(name, func(t *testing.T) {
			exp, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			sc := sendTrace(t, exp, t0)
			traceID := sc.TraceID().String()
			// Acknowledged means durable, not yet queryable: wait for the flush.
			var n int64
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				r, err := srv.CH.Query(ctx, "SELECT count() AS n FROM spans FINAL WHERE trace_id = ?", traceID)
				if err != nil {
					t.Fatal(err)
				}
				if n = r.Row(0).Int("n"); n == 3 {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if n != 3 {
				t.Fatalf("trace %s: %d spans in clickhouse, want 3", traceID, n)
			}
			r, err := srv.CH.Query(ctx, "SELECT service, instance, llm_role, model, queue_ns, client_ttft_ns, input_tokens FROM spans FINAL WHERE trace_id = ? AND llm_role != '' ORDER BY start", traceID)
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%s/%s/%s/%s/%d/%d/%d|%s/%s/%s/%s/%d",
				r.Row(0).String("service"), r.Row(0).String("instance"), r.Row(0).String("llm_role"), r.Row(0).String("model"),
				r.Row(0).Int("client_ttft_ns"), r.Row(0).Int("input_tokens"), r.Row(0).Int("queue_ns"),
				r.Row(1).String("service"), r.Row(1).String("instance"), r.Row(1).String("llm_role"), r.Row(1).String("model"), r.Row(1).Int("queue_ns"))
			want := "rag-chat//client/llama/500000000/800/0|vllm/vllm-0/server/llama/200000000"
			if got != want {
				t.Fatalf("normalized spans:\n got %s\nwant %s", got, want)
			}
		})
	}
	// Unauthenticated exports are refused by both transports.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(srv.OTLPHTTPAddr), otlptracehttp.WithInsecure(),
		otlptracehttp.WithHeaders(map[string]string{"Authorization": "Bearer wrong-key-0000000000"}), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	stub := tracetest.SpanStub{Name: "x", StartTime: t0, EndTime: t0.Add(time.Second), SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}})}
	err = exp.ExportSpans(ctx, []sdktrace.ReadOnlySpan{stub.Snapshot()})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("export with a wrong key: err = %v, want 401", err)
	}
}
