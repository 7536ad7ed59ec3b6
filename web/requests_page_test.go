package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/telemetry"
)

var (
	rowTTFT    = regexp.MustCompile(`<td class="num strong"[^>]*>([^<]+)</td>`)
	detailLink = regexp.MustCompile(`href="/requests/([0-9a-f]{32})#call-`)
)

func TestRequestsPage(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	project := projectOfKey(t, srv, apptest.Key)

	// 120 requests in the last hour: 70 of chat-api on two instances with
	// queue 1…70 ms, 50 of search-api (every fifth one a cold start, held
	// 1, 2 … 10 s).
	now := time.Now().UTC()
	var reqs []telemetry.LLMRequest
	for i := range 70 {
		inst := "vllm-0"
		if i%2 == 1 {
			inst = "vllm-1"
		}
		reqs = append(reqs, llmRequest(project, "chat-api", "vllm", "llama", inst, now.Add(-time.Duration(i+1)*20*time.Second), float64(i+1), 100, 10, 500))
	}
	for i := range 50 {
		r := llmRequest(project, "search-api", "vllm", "qwen", "vllm-2", now.Add(-time.Duration(i+1)*30*time.Second), 5, 50, 10, 300)
		r.ColdStart = i%5 == 0
		if r.ColdStart {
			r.ColdStartWait = telemetry.Ptr(float64(1000 * (i/5 + 1)))
		}
		reqs = append(reqs, r)
	}
	insertRequests(t, srv, reqs)
	longestHold := reqs[70+45].TraceID

	first := b.page("/requests?last=1h")
	contains(t, "requests page 1", first, "<h1>Requests</h1>", "1–50 of 120 requests", "Page 1 of 3",
		`href="/requests?last=1h&amp;page=2"`, `aria-sort="descending"`, // newest first by default
		`<label for="f-service">Service</label>`, `<option value="chat-api">`, `<option value="search-api">`,
		"cold start", "chat-api → vllm", "Cold starts only", "Slow only")
	if n := len(detailLink.FindAllString(first, -1)); n != 50 {
		t.Errorf("page 1 has %d request links, want 50", n)
	}
	last := b.page("/requests?last=1h&page=3")
	contains(t, "requests page 3", last, "101–120 of 120 requests", "Page 3 of 3", `rel="prev"`)
	lacks(t, "requests page 3", last, `rel="next"`)

	// Sorting by TTFT: the slowest chat-api request (queue 70 ms → TTFT
	// 180 ms) first, then ascending from the fastest (search-api, 65 ms).
	desc := b.page("/requests?last=1h&sort=ttft")
	if m := rowTTFT.FindStringSubmatch(desc); m == nil || m[1] != "180 ms" {
		t.Errorf("sort=ttft: first TTFT %v, want 180 ms", m)
	}
	contains(t, "sorted page", desc, `href="/requests?last=1h&amp;order=asc&amp;sort=ttft"`) // the header flips the order
	asc := b.page("/requests?last=1h&sort=ttft&order=asc")
	if m := rowTTFT.FindStringSubmatch(asc); m == nil || m[1] != "65 ms" {
		t.Errorf("sort=ttft&order=asc: first TTFT %v, want 65 ms", m)
	}
	contains(t, "ascending", asc, `aria-sort="ascending"`)

	// Filters narrow the total and stay selected.
	svc := b.page("/requests?last=1h&service=search-api")
	contains(t, "service filter", svc, "1–50 of 50 requests", `<option value="search-api" selected>`)
	lacks(t, "service filter", svc, "chat-api → vllm")
	cold := b.page("/requests?last=1h&cold_start=true")
	contains(t, "cold filter", cold, "1–10 of 10 requests", `name="cold_start" value="true" checked`)
	// A list of cold starts shows how long each was held (the column takes
	// the room of pre-inference and tokens, which then need 1440 px), sorts
	// by it and filters on it: held 5 s or more are the six longest holds,
	// the longest first. Other lists leave the column out.
	contains(t, "cold wait column", cold, "Cold wait", `href="/requests?cold_start=true&amp;last=1h&amp;sort=cold_start_wait"`,
		`<td class="num hide-below-md">10.0 s</td>`, `<td class="num hide-below-xl">800</td>`)
	lacks(t, "unfiltered list", first, "Cold wait")
	held := b.page("/requests?last=1h&min_cold_start_wait_ms=5000&sort=cold_start_wait")
	contains(t, "cold wait filter", held, "1–6 of 6 requests", `name="min_cold_start_wait_ms" type="number" min="0" step="100" inputmode="numeric" value="5000"`)
	if m := detailLink.FindStringSubmatch(held); m == nil || m[1] != longestHold {
		t.Errorf("sort=cold_start_wait: first request %v, want the 10 s hold %s", m, longestHold)
	}
	if bad := b.get("/requests?min_cold_start_wait_ms=soon"); bad.Code != http.StatusBadRequest {
		t.Errorf("min_cold_start_wait_ms=soon: %d, want 400", bad.Code)
	}
	inst := b.page("/requests?last=1h&instance=vllm-1")
	contains(t, "instance filter", inst, "1–35 of 35 requests")
	slow := b.page("/requests?last=1h&slow=true&service=chat-api")
	if !regexp.MustCompile(`1–[5-8] of [5-8] requests`).MatchString(slow) {
		t.Errorf("slow chat-api requests should be the ~10 %% above p90; page says %q", regexp.MustCompile(`1–\d+ of \d+ requests`).FindString(slow))
	}
	none := b.page("/requests?last=1h&service=chat-api&model=qwen")
	contains(t, "no match", none, "No requests match these filters")

	// htmx asks for the results block only: no layout, the sort fields and
	// range links updated out of band.
	frag := b.get("/requests?last=1h&sort=e2e", "HX-Request", "true", "HX-Target", "requests-results")
	if frag.Code != http.StatusOK || strings.Contains(frag.Body, "<html") || !strings.Contains(frag.Body, `<div id="requests-sort" hx-swap-oob="true">`) ||
		!strings.Contains(frag.Body, `name="sort" value="e2e"`) {
		t.Errorf("htmx fragment: %d\n%.600s", frag.Code, frag.Body)
	}
	if !strings.Contains(strings.Join(frag.Header.Values("Vary"), ","), "HX-Request") {
		t.Errorf("the fragment and the page share a URL, so the answer must vary on HX-Request")
	}

	if bad := b.get("/requests?sort=password"); bad.Code != http.StatusBadRequest {
		t.Errorf("sort=password: %d, want 400", bad.Code)
	}

	// A window too big to count exactly (here: over 20 stored rows) shows
	// the stored sample's estimate as such, and the API flags it.
	srv.Queries.ExactCountRows = 20
	busy := b.page("/requests?last=1h")
	if !regexp.MustCompile(`1–50 of about [\d,]+ requests`).MatchString(busy) || !strings.Contains(busy, "Page 1 of about ") {
		t.Errorf("estimated total: page says %q", regexp.MustCompile(`1–\d+ of [^<]*`).FindString(busy))
	}
	req, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr+"/api/v1/requests?last=1h&limit=10", nil)
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var api struct {
		Total          int  `json:"total"`
		TotalEstimated bool `json:"total_estimated"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&api); err != nil || !api.TotalEstimated || api.Total < 10 {
		t.Errorf("API total %+v (%v), want an estimate of at least the 10 rows listed", api, err)
	}
}

func TestRequestDetailPage(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	ctx := context.Background()

	// One trace: POST /chat → chat llama (client) → llm_request (vLLM), the
	// same shape as the decomposition test: queue 200 ms, prefill 250 ms,
	// network 50 ms, decode 1 s.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(srv.TraceExporter(t)), sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("rag-chat"))))
	vllm := sdktrace.NewTracerProvider(sdktrace.WithSyncer(srv.TraceExporter(t)),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("vllm"), semconv.ServiceInstanceID("vllm-0"))))
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	rootCtx, root := tp.Tracer("app").Start(ctx, "POST /chat", trace.WithTimestamp(t0))
	_, retrieval := tp.Tracer("app").Start(rootCtx, "retrieval", trace.WithTimestamp(t0.Add(10*time.Millisecond)))
	retrieval.End(trace.WithTimestamp(t0.Add(90 * time.Millisecond)))
	_, llm := tp.Tracer("app").Start(rootCtx, "chat llama", trace.WithTimestamp(t0.Add(100*time.Millisecond)), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "vllm"),
			attribute.String("gen_ai.request.model", "llama"), attribute.Int("gen_ai.usage.input_tokens", 800),
			attribute.Int("gen_ai.usage.output_tokens", 101), attribute.Float64("gen_ai.response.time_to_first_chunk", 0.5)))
	_, s := vllm.Tracer("vllm").Start(trace.ContextWithSpanContext(ctx, llm.SpanContext()), "llm_request",
		trace.WithTimestamp(t0.Add(110*time.Millisecond)), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.Float64("gen_ai.latency.time_in_queue", 0.2), attribute.Float64("gen_ai.latency.time_in_model_prefill", 0.25),
			attribute.Float64("gen_ai.latency.time_to_first_token", 0.45), attribute.Float64("gen_ai.latency.time_in_model_decode", 1.0),
			attribute.String("gen_ai.request.model", "llama")))
	s.End(trace.WithTimestamp(t0.Add(1560 * time.Millisecond)))
	llm.End(trace.WithTimestamp(t0.Add(1600 * time.Millisecond)))
	root.End(trace.WithTimestamp(t0.Add(1700 * time.Millisecond)))
	traceID := root.SpanContext().TraceID().String()
	spanID := llm.SpanContext().SpanID().String()

	var body string
	// Generous: on a loaded CI machine the assembler can lag tens of seconds.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		r := b.get("/requests/" + traceID) // 404 until the first spans are stored
		body = r.Body
		if r.Code == http.StatusOK && strings.Contains(body, `id="call-`+spanID+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trace's LLM call was never assembled:\n%s", body)
		}
	}
	contains(t, "trace page", body,
		"<h1>Trace <span", traceID, "POST /chat", "retrieval", "chat llama", "llm_request", // every span
		`class="wf-svg"`, `class="wf-seg seg-queue"`, `class="wf-seg seg-prefill"`, `class="wf-seg seg-network"`, `class="wf-seg seg-decode"`,
		"Queue 200 ms", "Prefill 250 ms", "Network 50 ms", "Decode 1.0 s", // segment titles
		`class="wf-name depth-1"`, `class="wf-name depth-2"`, // nesting: retrieval/chat under the root, llm_request under chat
		"<dt>Duration</dt><dd>1.7 s</dd>",
		"rag-chat → vllm", "vllm-0", "800 / 101", // the call's facts
		`href="#call-`+spanID+`"`, `id="span-`+spanID+`"`, // links to the call and to its span
		"gen_ai.request.model", "gen_ai.latency.time_in_queue", "service.name", // attributes and resource
	)
	// The component table states the split and its share of E2E (1.5 s).
	table := body[strings.Index(body, `id="call-`+spanID+`"`):]
	for _, want := range [][2]string{{"Queue", "200 ms"}, {"Prefill", "250 ms"}, {"Network", "50 ms"}, {"Decode", "1.0 s"}, {"TTFT", "500 ms"}, {"E2E", "1.5 s"}} {
		if !regexp.MustCompile(want[0] + `</th>\s*<td class="num">` + regexp.QuoteMeta(want[1])).MatchString(table) {
			t.Errorf("component table: no %s = %s", want[0], want[1])
		}
	}
	contains(t, "shares", table, "13 %", "17 %", "67 %") // queue, prefill, decode of 1.5 s

	// The bar of the LLM call starts at 100 ms of 1.7 s (5.882 %).
	contains(t, "bar position", body, `x="5.882%"`)
	// The live page links back into the app (a shared copy does not).
	contains(t, "links into the app", body, `<a href="/requests">Requests</a>`, "Diagnose this service")

	// The server's span shows its own split where it fell in its span (it
	// starts at 110 ms; its first token at 560 ms) and links to the call.
	serverRow := waterfallRowHTML(t, body, s.SpanContext().SpanID().String())
	contains(t, "server span row", serverRow,
		`<rect class="wf-seg seg-queue" x="6.471%" y="3" width="11.765%"`, "<title>Queue 200 ms</title>",
		`<rect class="wf-seg seg-prefill" x="18.235%" y="3" width="14.706%"`, "<title>Prefill 250 ms</title>",
		`<rect class="wf-seg seg-decode" x="32.941%" y="3" width="58.824%"`, "<title>Decode 1.0 s</title>",
		`href="#call-`+spanID+`"`, "server side")
	serverID := s.SpanContext().SpanID().String()
	details := body[strings.Index(body, `id="span-`+serverID+`"`):]
	if summary := details[:strings.Index(details, "</summary>")]; !strings.Contains(summary, `<span class="tag">server side</span>`) || strings.Contains(summary, "LLM call") {
		t.Errorf("the server span's attributes are not headed as its call's server side:\n%s", summary)
	}
	if strings.Contains(serverRow, "seg-network") {
		t.Errorf("the server's span has a network segment; the network lies outside it:\n%s", serverRow)
	}

	for path, want := range map[string]string{
		"/requests/0123456789abcdef0123456789abcdef": "There is no trace 0123456789abcdef0123456789abcdef in this project",
		"/requests/not-a-trace":                      "is not a trace ID",
	} {
		r := b.get(path)
		if r.Code != http.StatusNotFound || !strings.Contains(r.Body, want) || !strings.Contains(r.Body, "<h1>Not found</h1>") {
			t.Errorf("GET %s: %d, want a 404 page saying %q\n%.400s", path, r.Code, want, r.Body)
		}
	}
}

// waterfallRowHTML is the waterfall's row of one span in a trace page.
func waterfallRowHTML(t *testing.T, body, spanID string) string {
	t.Helper()
	i := strings.Index(body, `href="#span-`+spanID+`"`)
	if i < 0 {
		t.Fatalf("no waterfall row for span %s", spanID)
	}
	start := strings.LastIndex(body[:i], "<tr")
	end := strings.Index(body[i:], "</tr>")
	return body[start : i+end]
}
