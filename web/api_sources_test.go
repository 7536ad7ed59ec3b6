package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// The list, the trace API and the request page say how a request was
// joined and where its TTFT and token counts came from: the list reads
// those columns from llm_requests beside the page it listed.
func TestRequestSourcesShown(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	now := time.Now().UTC()
	joined := llmRequest(project, "chat", "vllm", "m", "vllm-0", now.Add(-10*time.Minute), 10, 20, 30, 40)
	joined.Join, joined.ServerTraceID, joined.ServerSpanID = telemetry.JoinID, strings.Repeat("e", 32), "00000000000000e1"
	joined.TTFTSource, joined.TokenSource, joined.Preemptions = "event:gen_ai.content.completion.chunk", telemetry.TokensFromServer, telemetry.Ptr(int64(2))
	serverOnly := llmRequest(project, "vllm", "vllm", "m", "vllm-0", now.Add(-5*time.Minute), 10, 20, 0, 40)
	serverOnly.Network = nil
	serverOnly.TTFTSource, serverOnly.TokenSource = telemetry.TTFTFromServer, telemetry.TokensMixed
	insertRequests(t, srv, []telemetry.LLMRequest{joined, serverOnly})
	call := telemetry.Span{ProjectID: project, TraceID: joined.TraceID, SpanID: joined.SpanID, Service: "chat", Name: "chat m", Kind: "client",
		Start: joined.Start, End: joined.Start.Add(100 * time.Millisecond), StatusCode: "ok", LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Model: "m"}}
	if err := srv.CH.Insert(context.Background(), clickhouse.SpansBatch([]telemetry.Span{call})); err != nil {
		t.Fatal(err)
	}

	type row struct {
		TraceID     string `json:"trace_id"`
		Join        string `json:"join"`
		TTFTSource  string `json:"ttft_source"`
		TTFTKey     string `json:"ttft_key"`
		TokenSource string `json:"token_source"`
		Preemptions *int64 `json:"preemptions"`
	}
	var list struct {
		Requests []row `json:"requests"`
	}
	b.getJSON("/api/v1/requests?last=1h", apptest.Key, &list)
	if len(list.Requests) != 2 {
		t.Fatalf("%d requests, want 2", len(list.Requests))
	}
	want := map[string]row{
		joined.TraceID: {TraceID: joined.TraceID, Join: "id", TTFTSource: "chunk_event", TTFTKey: "gen_ai.content.completion.chunk",
			TokenSource: "server", Preemptions: telemetry.Ptr(int64(2))},
		serverOnly.TraceID: {TraceID: serverOnly.TraceID, TTFTSource: "server_span", TokenSource: "mixed"},
	}
	check := func(where string, got row) {
		t.Helper()
		w := want[got.TraceID]
		if got.Join != w.Join || got.TTFTSource != w.TTFTSource || got.TTFTKey != w.TTFTKey || got.TokenSource != w.TokenSource ||
			(got.Preemptions == nil) != (w.Preemptions == nil) || got.Preemptions != nil && *got.Preemptions != *w.Preemptions {
			t.Errorf("%s: %+v, want %+v", where, got, w)
		}
	}
	for _, r := range list.Requests {
		check("list", r)
	}
	var trace struct {
		Requests []row `json:"requests"`
	}
	b.getJSON("/api/v1/traces/"+joined.TraceID, apptest.Key, &trace)
	if len(trace.Requests) != 1 {
		t.Fatalf("trace API: %d requests, want 1", len(trace.Requests))
	}
	check("trace API", trace.Requests[0])

	page := b.get("/requests/" + joined.TraceID)
	for _, s := range []string{"TTFT from", "the client&#39;s first chunk event (gen_ai.content.completion.chunk)", "Tokens from", "Preemptions"} {
		if !strings.Contains(page.Body, s) {
			t.Errorf("request page lacks %q", s)
		}
	}
	if list := b.get("/requests?last=1h"); !strings.Contains(list.Body, "id join") {
		t.Errorf("requests page does not tag the id join")
	}
}
