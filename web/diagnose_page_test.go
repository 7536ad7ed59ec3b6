package web_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// The diagnosis page of a planted queueing incident says queueing, in one
// sentence, with the evidence, charts and tables the design asks for.
func TestDiagnosePage(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	in := plantQueueingIncident(t, srv, defaultProject(t, srv), "rag-chat")
	c := newBrowser(t, srv)

	if r := c.get("/diagnose?" + in.windowQuery("rag-chat")); r.Code != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/login") {
		t.Fatalf("logged-out GET /diagnose = %d %s, want a redirect to /login", r.Code, r.Header.Get("Location"))
	}
	c.login(apptest.Key)

	var api struct {
		Verdict string `json:"verdict"`
		Summary string `json:"summary"`
	}
	c.getJSON("/api/v1/diagnose?"+in.windowQuery("rag-chat"), apptest.Key, &api)
	if api.Verdict != "queueing" {
		t.Fatalf("the planted incident diagnoses as %q (%s), want queueing", api.Verdict, api.Summary)
	}

	page := c.diagnosePage(in.windowQuery("rag-chat"))

	t.Run("frame first, diagnosis through htmx", func(t *testing.T) {
		frame := c.page("/diagnose?" + in.windowQuery("rag-chat"))
		mustContain(t, "the frame", frame, `data-pending="diagnosis"`, "Diagnosing rag-chat",
			`<select id="pick-service"`, `action="/share"`, // pickers and share work before the diagnosis arrives
			html.EscapeString("/diagnose?"+in.windowQuery("rag-chat")+"&wait=1")) // the link for browsers without script
		if strings.Contains(frame, `class="verdict`) {
			t.Error("the frame already holds a verdict: the diagnosis was computed before answering")
		}
		// Without script: the same page in one go.
		whole := c.page("/diagnose?" + in.windowQuery("rag-chat") + "&wait=1")
		if strings.Contains(whole, `data-pending=`) || !strings.Contains(whole, html.EscapeString(api.Summary)) {
			t.Errorf("wait=1 does not compute the diagnosis in one go:\n%.600s", whole)
		}
		// Only the diagnosis knows where a thin baseline's data starts: the
		// results bring the frame's baseline line again, out of band, with it.
		thin := in.windowQuery("rag-chat") + "&" + url.Values{"baseline_from": {in.Baseline.From.Add(-3 * time.Hour).Format(time.RFC3339)},
			"baseline_to": {in.Baseline.To.Format(time.RFC3339)}}.Encode()
		startsAt := "its requests start at " + in.Baseline.From.Format("15:04:05")
		if f := c.page("/diagnose?" + thin); !strings.Contains(f, `<span id="baseline-text">`) || strings.Contains(f, startsAt) {
			t.Errorf("the frame's baseline line is not the one to replace, or already knows the data's start:\n%.2000s", f)
		}
		results := c.page("/diagnose/results?" + thin)
		mustContain(t, "the results of a thin baseline", results, `<span id="baseline-text" hx-swap-oob="true">`, startsAt)
		// A window the results request cannot read shows why, in place.
		bad := c.page("/diagnose/results?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z")
		mustContain(t, "bad results request", bad, `role="alert"`, "must be before")
		if strings.Contains(bad, "<html") {
			t.Error("the results request answered a whole page")
		}
	})

	t.Run("verdict", func(t *testing.T) {
		mustContain(t, "the page", page,
			html.EscapeString(api.Summary),            // the one sentence, as the API says it
			`<span class="badge v-queueing">Queueing`, // the badge, in words
			`<meter id="verdict-confidence"`,
			"KV cache", // evidence quotes the corroboration
			`<ol class="evidence">`,
		)
		if n := strings.Count(page, "<li value="); n < 3 {
			t.Errorf("%d evidence lines, want at least 3", n)
		}
	})

	t.Run("charts", func(t *testing.T) {
		// Lines of each part's p95 and TTFT p95, not a stack; decode (not
		// in TTFT) starts hidden when it is not the verdict.
		parts := chartSpec(t, page, "chart-parts")
		var labels []string
		for _, s := range parts["series"].([]any) {
			m := s.(map[string]any)
			label := m["label"].(string)
			if m["fill"] == true {
				t.Errorf("component series %s is a filled area, want a line", label)
			}
			if m["hidden"] == true {
				label += "(hidden)"
			}
			if m["bold"] == true {
				label += "(bold)"
			}
			labels = append(labels, label)
		}
		if strings.Join(labels, ",") != "Pre-inference,Queue,Prefill,Network,Decode(hidden),TTFT p95(bold)" {
			t.Errorf("component series = %v", labels)
		}
		data := parts["data"].([]any)
		if len(data) != 7 || len(data[0].([]any)) < 20 || len(data[1].([]any)) != len(data[0].([]any)) {
			t.Errorf("component data: %d rows, %d buckets", len(data), len(data[0].([]any)))
		}
		ttft := chartSpec(t, page, "chart-ttft")
		var axes []string
		for _, s := range ttft["series"].([]any) {
			m := s.(map[string]any)
			axes = append(axes, fmt.Sprintf("%s@%v", m["label"], m["axis"]))
		}
		// A percentage and a count get an axis each.
		if strings.Join(axes, ",") != "TTFT p99@1,TTFT p50@1,KV cache %@2,Requests waiting@3" {
			t.Errorf("TTFT chart series = %v", axes)
		}
		if ttft["y2Unit"] != "pct" || ttft["y3Unit"] != "count" {
			t.Errorf("TTFT chart right axes are %v and %v, want pct and count", ttft["y2Unit"], ttft["y3Unit"])
		}
		markers := ttft["markers"].([]any)
		found := false
		for _, m := range markers {
			mm := m.(map[string]any)
			if mm["label"] == "scale 1→2" && int64(mm["t"].(float64)) == in.ScaleAt.Unix() {
				found = true
			}
		}
		if !found {
			t.Errorf("no scale marker at %v in %v", in.ScaleAt, markers)
		}
		// Every chart has its table.
		if n := strings.Count(page, `<details class="chart-table">`); n != 2 {
			t.Errorf("%d chart tables, want 2", n)
		}
		mustContain(t, "the page", page, "scaled 1 → 2 replicas (HPA: queue length)")
	})

	t.Run("answers and tables", func(t *testing.T) {
		mustContain(t, "the page", page,
			"Is the workload prefill- or decode-heavy?",
			"Is TTFT prefill-bound, or queueing or cold start?",
			"Does it meet the SLO?",
			"Is decode memory- or compute-bound?",
			"What changed against the baseline?",
			"What does a task cost?",
			"Why is it slow?",
			"What sets the slow requests apart",
		)
		// The queue row is worse, in words.
		i := strings.Index(page, "waiting for a slot on the server")
		if i < 0 {
			t.Fatal("no queue row")
		}
		row := page[i:]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, `<span class="dir dir-worse">`) || !strings.Contains(row, "worse") {
			t.Errorf("queue row does not say worse: %s", row)
		}
	})

	t.Run("slowest requests", func(t *testing.T) {
		slow := url.Values{"from": {in.Window.From.Format(time.RFC3339)}, "model": nil, "service": {"rag-chat"},
			"slow": {"true"}, "sort": {"ttft"}, "to": {in.Window.To.Format(time.RFC3339)}}
		mustContain(t, "the page", page, html.EscapeString("/requests?"+slow.Encode()))
		// The slowest request is one of the incident's and links to its trace.
		var slowest string
		var max float64
		for _, r := range in.Requests {
			if !r.Start.Before(in.Window.From) && *r.TTFT > max {
				max, slowest = *r.TTFT, r.TraceID
			}
		}
		mustContain(t, "the page", page, `href="/requests/`+slowest+`"`)
		if n := strings.Count(page, `href="/requests/`); n != 10 {
			t.Errorf("%d links to traces, want the top 10", n)
		}
	})

	t.Run("share button", func(t *testing.T) {
		mustContain(t, "the page", page, `action="/share"`, `name="path" value="/diagnose?`, `name="expires"`)
	})

	t.Run("htmx swaps only the body", func(t *testing.T) {
		r := c.get("/diagnose?"+in.windowQuery("rag-chat"), "HX-Request", "true")
		if r.Code != http.StatusOK || strings.Contains(r.Body, "<html") || !strings.HasPrefix(strings.TrimSpace(r.Body), `<div id="page-body"`) {
			t.Errorf("htmx answer is not the body fragment: %d %.200s", r.Code, r.Body)
		}
		r = c.get("/diagnose?"+in.windowQuery("rag-chat"), "HX-Request", "true", "HX-History-Restore-Request", "true")
		if !strings.Contains(r.Body, "<html") {
			t.Error("a history restore got a fragment, not the page")
		}
	})

	t.Run("empty window", func(t *testing.T) {
		q := url.Values{"service": {"rag-chat"}, "from": {"2020-01-01T00:00:00Z"}, "to": {"2020-01-01T01:00:00Z"}}
		body := c.diagnosePage(q.Encode())
		mustContain(t, "the empty page", body, "No LLM requests in this window", `<a href="/">See every service on the overview</a>`)
		if strings.Contains(body, `data-chart=`) {
			t.Error("the empty page draws charts")
		}
	})

	t.Run("bad window", func(t *testing.T) {
		r := c.get("/diagnose?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z")
		if r.Code != http.StatusBadRequest || !strings.Contains(r.Body, "must be before") {
			t.Errorf("reversed window: %d %.300s", r.Code, r.Body)
		}
	})

	t.Run("pickers list the service", func(t *testing.T) {
		r := c.get("/diagnose")
		if r.Code != http.StatusOK {
			t.Fatalf("GET /diagnose: %d", r.Code)
		}
		mustContain(t, "the default page", r.Body, `<option value="rag-chat">rag-chat`, `<option value="llama-3-8b">llama-3-8b</option>`,
			`href="/diagnose?last=15m"`, `aria-current="true">1h</a>`)
	})
}
