package assembler

import (
	"context"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A client call first joined by a unique match, whose own server span (it
// names the client's id) arrives in a later pass: the call stays one
// request, now joined by id to that span, and the span it was matched to
// becomes a server-only request of its own. Neither span is counted twice,
// in the rows or in the rollups.
func TestJoinLateIDServerCountsOnce(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	d := func(n int) *time.Duration { v := time.Duration(n) * time.Millisecond; return &v }
	client := telemetry.Span{ProjectID: 1, TraceID: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", SpanID: "c1", Service: "app", Name: "chat", Start: ms(100), End: ms(1600),
		LLM: telemetry.LLMCall{Role: telemetry.LLMClient, ResponseID: "chatcmpl-late", Model: "llama", InputTokens: telemetry.Ptr(int64(800)), ClientTTFT: d(500)}}
	// A server span without an id (another caller's request of the same
	// size): the only candidate when the call arrives, so they match.
	other := telemetry.Span{ProjectID: 1, TraceID: "cccccccccccccccccccccccccccccccc", SpanID: "s9", Service: "vllm", Instance: "vllm-1", Name: "llm_request",
		Start: ms(120), End: ms(1500), LLM: telemetry.LLMCall{Role: telemetry.LLMServer,
			InputTokens: telemetry.Ptr(int64(800)), QueueTime: d(100), PrefillTime: d(200), ServerTTFT: d(300)}}
	own := telemetry.Span{ProjectID: 1, TraceID: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", SpanID: "s1", Service: "vllm", Instance: "vllm-0", Name: "llm_request",
		Start: ms(110), End: ms(1560), LLM: telemetry.LLMCall{Role: telemetry.LLMServer, ResponseID: "chatcmpl-late-1a2b3c4d",
			InputTokens: telemetry.Ptr(int64(800)), QueueTime: d(200), PrefillTime: d(250), ServerTTFT: d(450)}}
	pass := func(s telemetry.Span) {
		t.Helper()
		if err := a.CH.Insert(ctx, clickhouse.SpansBatch([]telemetry.Span{s})); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // inserts at distinct inserted_at
		if _, err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	type live struct{ trace, join, serverTrace string }
	rows := func() map[string]live {
		t.Helper()
		r, err := a.CH.Query(ctx, "SELECT trace_id, join_method, server_trace_id FROM llm_requests FINAL WHERE is_deleted = 0")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]live{}
		for i := range r.Len() {
			w := r.Row(i)
			out[w.String("trace_id")] = live{w.String("trace_id"), w.String("join_method"), w.String("server_trace_id")}
		}
		return out
	}
	rollup := func() int64 {
		t.Helper()
		c, err := a.CH.Query(ctx, "SELECT sum(requests) AS n FROM llm_request_rollup_5m WHERE project_id = 1")
		if err != nil {
			t.Fatal(err)
		}
		return c.Row(0).Int("n")
	}

	pass(other)
	pass(client)
	got := rows()
	if len(got) != 1 || got[client.TraceID] != (live{client.TraceID, telemetry.JoinMatch, other.TraceID}) {
		t.Fatalf("before the late span: %+v, want the call matched to %s", got, other.TraceID)
	}
	if n := rollup(); n != 1 {
		t.Errorf("before the late span: rollups count %d requests, want 1", n)
	}

	pass(own)
	got = rows()
	want := map[string]live{
		client.TraceID: {client.TraceID, telemetry.JoinID, own.TraceID},
		other.TraceID:  {other.TraceID, "", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("after the late span: %d live rows %+v, want the call joined by id and the other span alone", len(got), got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("after the late span: row of %s = %+v, want %+v", k, got[k], w)
		}
	}
	if n := rollup(); n != 2 {
		t.Errorf("after the late span: rollups count %d requests, want 2", n)
	}
}
