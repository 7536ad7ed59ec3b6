package assembler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// The engine's forms of a server's request id are the Go ones: the lookup
// finds by SQL what Pair then accepts.
func TestRequestIDFormsSQL(t *testing.T) {
	a := openAssembler(t)
	for _, id := range []string{"chatcmpl-abc", "chatcmpl-abc-1a2b3c4d", "0_cmpl-abc-0-1a2b3c4d", "chatcmpl-abc_2", "x"} {
		r, err := a.CH.Query(context.Background(), "SELECT arrayDistinct("+assemble.RequestIDFormsSQL("response_id")+") AS forms FROM (SELECT ? AS response_id)", id)
		if err != nil {
			t.Fatal(err)
		}
		got := r.Row(0).Strings("forms")
		want := assemble.RequestIDForms(id)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%q: engine forms %q, Go forms %q", id, got, want)
		}
	}
}

// A joined pair assembled again from scratch (the watermark reset, as after
// a restart that lost it) yields the same one request, and the rollups
// count it once.
func TestJoinReassembledCountsOnce(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	d := func(n int) *time.Duration { v := time.Duration(n) * time.Millisecond; return &v }
	server := telemetry.Span{ProjectID: 1, TraceID: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", SpanID: "s1", Service: "vllm", Instance: "vllm-0", Name: "llm_request",
		Start: ms(110), End: ms(1560), LLM: telemetry.LLMCall{Role: telemetry.LLMServer, ResponseID: "chatcmpl-x-1a2b3c4d",
			InputTokens: telemetry.Ptr(int64(800)), QueueTime: d(200), PrefillTime: d(250), ServerTTFT: d(450)}}
	client := telemetry.Span{ProjectID: 1, TraceID: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", SpanID: "c1", Service: "app", Name: "chat", Start: ms(100), End: ms(1600),
		LLM: telemetry.LLMCall{Role: telemetry.LLMClient, ResponseID: "chatcmpl-x", Model: "llama", InputTokens: telemetry.Ptr(int64(800)), ClientTTFT: d(500)}}
	for _, s := range []telemetry.Span{server, client} {
		if err := a.CH.Insert(ctx, clickhouse.SpansBatch([]telemetry.Span{s})); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // inserts at distinct inserted_at
		if _, err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		r, err := a.CH.Query(ctx, "SELECT trace_id, join_method, server_trace_id, network_ms FROM llm_requests FINAL WHERE is_deleted = 0")
		if err != nil {
			t.Fatal(err)
		}
		if r.Len() != 1 || r.Row(0).String("join_method") != telemetry.JoinID || r.Row(0).String("trace_id") != client.TraceID ||
			r.Row(0).String("server_trace_id") != server.TraceID {
			t.Fatalf("%s: %d live rows, want the one joined request", when, r.Len())
		}
		if n := r.Row(0).FloatPtr("network_ms"); n == nil || *n != 50 {
			t.Errorf("%s: network %v, want 50", when, n)
		}
		c, err := a.CH.Query(ctx, "SELECT sum(requests) AS n FROM llm_request_rollup_5m WHERE project_id = 1")
		if err != nil {
			t.Fatal(err)
		}
		if n := c.Row(0).Int("n"); n != 1 {
			t.Errorf("%s: rollups count %d requests, want 1", when, n)
		}
	}
	check("after both passes")
	if err := a.setWatermark(ctx, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step(ctx); err != nil {
		t.Fatal(err)
	}
	check("assembled again")
}
