package web_test

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// Comparing the healthy baseline with the incident window shows the queue
// (and TTFT) worse, in words, with before/after percentiles and deltas.
func TestComparePage(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	in := plantQueueingIncident(t, srv, defaultProject(t, srv), "rag-chat")
	c := newBrowser(t, srv)
	c.login(apptest.Key)

	// Before: a healthy stretch; after: the incident.
	q := url.Values{"service": {"rag-chat"},
		"a_from": {in.Baseline.From.Format(time.RFC3339)}, "a_to": {in.IncidentFrom.Add(-30 * time.Minute).Format(time.RFC3339)},
		"b_from": {in.IncidentFrom.Format(time.RFC3339)}, "b_to": {in.Window.To.Format(time.RFC3339)}}
	r := c.get("/compare?" + q.Encode())
	if r.Code != http.StatusOK {
		t.Fatalf("GET /compare: %d\n%s", r.Code, r.Body)
	}
	page := r.Body
	mustContain(t, "the compare page", page,
		"What got worse", "Queue", "TTFT", "Decode speed (TPOT)", "KV-cache usage",
		html.EscapeString("/diagnose?"), // link to diagnose the after window
		`action="/share"`,
	)
	// The summary sentence names the regressions in words.
	if !strings.Contains(page, "Worse: queue, ") || !strings.Contains(page, "TTFT p95 ") || strings.Contains(page, "kv_cache_usage") {
		t.Errorf("summary sentence missing or not in words")
	}
	row := func(name string) string {
		i := strings.Index(page, `<th scope="row">`+name)
		if i < 0 {
			t.Fatalf("no %s row", name)
		}
		r := page[i:]
		return r[:strings.Index(r, "</tr>")]
	}
	queue := row("Queue")
	if !strings.Contains(queue, `<span class="dir dir-worse">`) || !strings.Contains(queue, "worse") || !strings.Contains(queue, "+") ||
		!strings.Contains(queue, "×") {
		t.Errorf("queue row lacks worse/delta/ratio: %s", queue)
	}
	// Each side shows p50, p95, p99: 6 figures plus delta and ratio.
	if n := strings.Count(queue, `<td class="num`); n != 8 {
		t.Errorf("queue row has %d number cells, want 8: %s", n, queue)
	}
	prefill := row("Prefill")
	if !strings.Contains(prefill, "no change") {
		t.Errorf("prefill did not stay the same: %s", prefill)
	}
	// No request was held in either window: the cold starts row says 0 %.
	if cold := row("Cold starts"); !strings.Contains(cold, "0 %") || !strings.Contains(cold, "no change") {
		t.Errorf("cold starts row: %s", cold)
	}

	t.Run("presets", func(t *testing.T) {
		r := c.get("/compare?service=rag-chat")
		if r.Code != http.StatusOK {
			t.Fatalf("GET /compare (default preset): %d", r.Code)
		}
		mustContain(t, "the default compare page", r.Body, "Last hour vs the hour before", `aria-current="true">Last hour vs the hour before`,
			html.EscapeString("/compare?preset=yesterday&service=rag-chat"))
	})

	t.Run("half a window is an error", func(t *testing.T) {
		r := c.get("/compare?a_from=2026-01-01T00:00:00Z")
		if r.Code != http.StatusBadRequest || !strings.Contains(r.Body, "Give all four times") {
			t.Errorf("partial windows: %d %.200s", r.Code, r.Body)
		}
	})

	t.Run("empty windows", func(t *testing.T) {
		q := url.Values{"a_from": {"2020-01-01T00:00:00Z"}, "a_to": {"2020-01-01T01:00:00Z"},
			"b_from": {"2020-01-01T01:00:00Z"}, "b_to": {"2020-01-01T02:00:00Z"}}
		r := c.get("/compare?" + q.Encode())
		if r.Code != http.StatusOK || !strings.Contains(r.Body, "No LLM requests in either window") {
			t.Errorf("empty compare: %d %.300s", r.Code, r.Body)
		}
	})
}
