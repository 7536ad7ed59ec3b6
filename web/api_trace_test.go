package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// GET /api/v1/traces/<id> answers its spans in the API's own shape
// (snake_case, milliseconds, the LLM role by name), with every raw
// attribute, not the store's Go structs.
func TestTraceAPIShape(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	trace := strings.Repeat("c", 32)
	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	spans := []telemetry.Span{
		{ProjectID: project, TraceID: trace, SpanID: strings.Repeat("1", 16), Service: "rag-chat", Name: "POST /chat", Kind: "server",
			Start: start, End: start.Add(900 * time.Millisecond), StatusCode: "ok", Attributes: map[string]string{"http.route": "/chat"}},
		{ProjectID: project, TraceID: trace, SpanID: strings.Repeat("2", 16), ParentSpanID: strings.Repeat("1", 16), Service: "rag-chat",
			Name: "chat llama", Kind: "client", Start: start.Add(100 * time.Millisecond), End: start.Add(850 * time.Millisecond), StatusCode: "ok",
			LLM:        telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "vllm", Model: "llama", Operation: "chat", InputTokens: telemetry.Ptr(int64(812))},
			Attributes: map[string]string{"gen_ai.request.model": "llama", "gen_ai.usage.input_tokens": "812"},
			EventNames: []string{"gen_ai.content.first_token"}, EventTimes: []time.Time{start.Add(300 * time.Millisecond)}},
	}
	if err := srv.CH.Insert(context.Background(), clickhouse.SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Spans []struct {
			TraceID      string            `json:"trace_id"`
			SpanID       string            `json:"span_id"`
			ParentSpanID string            `json:"parent_span_id"`
			Name         string            `json:"name"`
			Kind         string            `json:"kind"`
			DurationMs   float64           `json:"duration_ms"`
			StatusCode   string            `json:"status_code"`
			Attributes   map[string]string `json:"attributes"`
			LLM          *struct {
				Role        string `json:"role"`
				Model       string `json:"model"`
				InputTokens *int64 `json:"input_tokens"`
			} `json:"llm"`
			Events []struct {
				Name string    `json:"name"`
				Time time.Time `json:"time"`
			} `json:"events"`
		} `json:"spans"`
		Requests []map[string]any `json:"requests"`
	}
	b.getJSON("/api/v1/traces/"+trace, apptest.Key, &got)
	if len(got.Spans) != 2 {
		t.Fatalf("%d spans, want 2", len(got.Spans))
	}
	root, call := got.Spans[0], got.Spans[1]
	if root.TraceID != trace || root.ParentSpanID != "" || root.DurationMs != 900 || root.Kind != "server" || root.StatusCode != "ok" ||
		root.LLM != nil || root.Attributes["http.route"] != "/chat" {
		t.Errorf("root span: %+v", root)
	}
	if call.ParentSpanID != root.SpanID || call.DurationMs != 750 || call.LLM == nil || call.LLM.Role != "client" || call.LLM.Model != "llama" ||
		call.LLM.InputTokens == nil || *call.LLM.InputTokens != 812 || call.Attributes["gen_ai.usage.input_tokens"] != "812" ||
		len(call.Events) != 1 || call.Events[0].Name != "gen_ai.content.first_token" || !call.Events[0].Time.Equal(start.Add(300*time.Millisecond)) {
		t.Errorf("LLM call span: %+v (llm %+v)", call, call.LLM)
	}
}

// order=asc without sort lists the oldest first (the default sort is by
// start, newest first).
func TestRequestsAPIOrderAlone(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)
	now := time.Now().UTC()
	var reqs []telemetry.LLMRequest
	for i := range 3 {
		reqs = append(reqs, llmRequest(project, "chat", "vllm", "m", "vllm-0", now.Add(-time.Duration(10+i)*time.Minute), 10, 10, 10, 10))
	}
	insertRequests(t, srv, reqs)
	var got struct {
		Requests []struct {
			Start time.Time `json:"start"`
		} `json:"requests"`
	}
	b.getJSON("/api/v1/requests?last=1h&order=asc", apptest.Key, &got)
	if len(got.Requests) != 3 || !got.Requests[0].Start.Equal(reqs[2].Start) || !got.Requests[2].Start.Equal(reqs[0].Start) {
		t.Errorf("order=asc: %+v, want the oldest (%s) first", got.Requests, reqs[2].Start)
	}
	// The page and the API refuse the same unknown column alike.
	if s := apiStatus(t, srv, "/api/v1/requests?sort=bogus", apptest.Key); s != http.StatusBadRequest {
		t.Errorf("API sort=bogus: %d, want 400", s)
	}
	if r := b.get("/requests?sort=bogus"); r.Code != http.StatusBadRequest || !strings.Contains(r.Body, "input_tokens, itl, network") {
		t.Errorf("page sort=bogus: %d, want 400 listing the columns", r.Code)
	}
}
