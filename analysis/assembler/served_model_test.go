package assembler

import (
	"context"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A vLLM server span without a model and without a client takes the model
// its server serves: the model_name label of the server's metrics on its
// instance, else the model of a request joined to that server earlier;
// with neither it stays without one.
func TestServedModelForServerOnlyRows(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	d := func(n int) *time.Duration { v := time.Duration(n) * time.Millisecond; return &v }
	server := func(trace, service, instance string, start int) telemetry.Span {
		return telemetry.Span{ProjectID: 1, TraceID: trace, SpanID: "s1", Service: service, Instance: instance, Name: "llm_request",
			Start: ms(start), End: ms(start + 900), LLM: telemetry.LLMCall{Role: telemetry.LLMServer, QueueTime: d(10), ServerTTFT: d(100)}}
	}
	// vllm-a: its metrics name the model per instance.
	points := []telemetry.MetricPoint{
		{ProjectID: 1, Time: ms(-30_000), Service: "vllm-a", Instance: "a-0", Name: "kv_cache_usage", Labels: map[string]string{"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "0"}, Value: 0.4},
		{ProjectID: 1, Time: ms(-30_000), Service: "vllm-a", Instance: "a-1", Name: "kv_cache_usage", Labels: map[string]string{"model_name": "meta-llama/Llama-3.1-8B", "engine": "0"}, Value: 0.2},
	}
	if err := a.CH.Insert(ctx, clickhouse.MetricsBatch(points)); err != nil {
		t.Fatal(err)
	}
	// vllm-b: no metrics, but a call joined to it by trace context named
	// its model.
	client := telemetry.Span{ProjectID: 1, TraceID: "dddddddddddddddddddddddddddddddd", SpanID: "c1", Service: "app", Name: "chat", Start: ms(0), End: ms(1000),
		LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Model: "mistral-7b", ClientTTFT: d(150)}}
	joined := server("dddddddddddddddddddddddddddddddd", "vllm-b", "b-0", 20)
	joined.ParentSpanID = "c1"
	spans := []telemetry.Span{client, joined}
	if err := a.CH.Insert(ctx, clickhouse.SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	alone := []telemetry.Span{
		server("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "vllm-a", "a-1", 2000),
		server("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "vllm-b", "b-0", 2000),
		server("cccccccccccccccccccccccccccccccc", "vllm-c", "c-0", 2000),
	}
	if err := a.CH.Insert(ctx, clickhouse.SpansBatch(alone)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := a.CH.Query(ctx, "SELECT trace_id, model FROM llm_requests FINAL WHERE is_deleted = 0 AND join_method = ''")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i := range r.Len() {
		got[r.Row(i).String("trace_id")] = r.Row(i).String("model")
	}
	want := map[string]string{
		alone[0].TraceID: "meta-llama/Llama-3.1-8B", // the instance's label, not its sibling's
		alone[1].TraceID: "mistral-7b",              // the joined request's
		alone[2].TraceID: "",                        // nothing known
	}
	if len(got) != len(want) {
		t.Fatalf("server-only rows %v, want %v", got, want)
	}
	for trace, w := range want {
		if m, ok := got[trace]; !ok || m != w {
			t.Errorf("server-only request of %s: model %q, want %q", trace, m, w)
		}
	}
}
