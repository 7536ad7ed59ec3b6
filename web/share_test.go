package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"html"
	"image"
	"image/png"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// createdShare is the API's answer to POST /api/v1/share.
type createdShare struct {
	ID        int64      `json:"id"`
	URL       string     `json:"url"`
	Title     string     `json:"title"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func (c *browser) apiShare(key, path, expires string) createdShare {
	c.t.Helper()
	r := c.postJSON("/api/v1/share", key, map[string]string{"path": path, "expires": expires})
	if r.Code != http.StatusCreated {
		c.t.Fatalf("POST /api/v1/share %s: %d %s", path, r.Code, r.Body)
	}
	var out createdShare
	if err := json.Unmarshal([]byte(r.Body), &out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// sharePath is the /s/<token> part of a share URL.
func sharePath(t *testing.T, shareURL string) string {
	t.Helper()
	u, err := url.Parse(shareURL)
	if err != nil || !strings.HasPrefix(u.Path, "/s/") {
		t.Fatalf("share URL %q is not …/s/<token>", shareURL)
	}
	return u.Path
}

// metaContent is the unescaped content of a page's <meta property=…>.
func metaContent(page, property string) string {
	m := regexp.MustCompile(`<meta property="` + regexp.QuoteMeta(property) + `" content="([^"]*)"`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// hasInk reports whether a picture has dark pixels (lines, text) on it.
func hasInk(img image.Image) bool {
	r := img.Bounds()
	dark := 0
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			if cr, cg, cb, _ := img.At(x, y).RGBA(); cr+cg+cb < 3*0x8000 {
				dark++
			}
		}
	}
	return dark > 500
}

func TestShareLinks(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	project := defaultProject(t, srv)
	in := plantQueueingIncident(t, srv, project, "rag-chat")
	plantTrace(t, srv, project, in.Requests[len(in.Requests)-1])
	c := newBrowser(t, srv)
	c.login(apptest.Key)
	anon := newBrowser(t, srv) // a chat user who follows the link: no login

	var api struct {
		Summary  string `json:"summary"`
		Evidence []struct {
			Text string `json:"text"`
		} `json:"evidence"`
	}
	c.getJSON("/api/v1/diagnose?"+in.windowQuery("rag-chat"), apptest.Key, &api)
	if !strings.Contains(api.Summary, "queued") {
		t.Fatalf("planted incident summary: %s", api.Summary)
	}
	diagnosePath := "/diagnose?" + in.windowQuery("rag-chat")

	// Created through the API; opened logged out.
	link := c.apiShare(apptest.Key, diagnosePath, "")
	path := sharePath(t, link.URL)
	token := strings.TrimPrefix(path, "/s/")
	if raw, err := base64.RawURLEncoding.DecodeString(token); err != nil || len(token) < 22 || len(raw) < 16 {
		t.Fatalf("token %q is not ≥ 128 bits of base64url (%d bytes, %v)", token, len(raw), err)
	}
	if link.Title != api.Summary {
		t.Errorf("title = %q, want the verdict sentence %q", link.Title, api.Summary)
	}
	if link.ExpiresAt == nil || time.Until(*link.ExpiresAt) < 29*24*time.Hour || time.Until(*link.ExpiresAt) > 31*24*time.Hour {
		t.Errorf("default expiry = %v, want 30 days", link.ExpiresAt)
	}
	shared := anon.get(path)
	if shared.Code != http.StatusOK {
		t.Fatalf("GET %s logged out: %d\n%s", path, shared.Code, shared.Body)
	}

	t.Run("shared page", func(t *testing.T) {
		page := shared.Body
		// The unfurl names service, verdict and window; the verdict
		// sentence and the first evidence come under it.
		wantTitle := "rag-chat: Queueing · " + views.HumanRange(in.Window.From, in.Window.To)
		if got := metaContent(page, "og:title"); got != wantTitle {
			t.Errorf("og:title = %q, want %q", got, wantTitle)
		}
		if got := metaContent(page, "og:description"); !strings.HasPrefix(got, api.Summary+" 1. "+api.Evidence[0].Text) {
			t.Errorf("og:description = %q, want the verdict sentence then evidence 1 (%q)", got, api.Evidence[0].Text)
		}
		mustContain(t, "the shared page", page,
			html.EscapeString(api.Summary),
			`<meta property="og:type" content="article"`,
			`<meta property="twitter:card" content="summary_large_image"`,
			"Snapshot taken at",
			`<span class="badge v-queueing">Queueing`,
			`id="chart-parts"`, `id="chart-ttft"`,
			html.EscapeString(api.Evidence[0].Text),
		)
		// The picture: an absolute URL under the token, served without
		// login, a PNG of the size the tags announce.
		img := metaContent(page, "og:image")
		if img != link.URL+"/chart.png" || !strings.HasPrefix(img, "http://") {
			t.Fatalf("og:image = %q, want the absolute %s/chart.png", img, link.URL)
		}
		if w, h := metaContent(page, "og:image:width"), metaContent(page, "og:image:height"); w != "1200" || h != "630" {
			t.Errorf("og:image size tags = %s×%s, want 1200×630", w, h)
		}
		got := anon.get(sharePath(t, link.URL) + "/chart.png")
		if got.Code != http.StatusOK || got.Header.Get("Content-Type") != "image/png" {
			t.Fatalf("GET og:image logged out: %d %s", got.Code, got.Header.Get("Content-Type"))
		}
		pic, err := png.Decode(strings.NewReader(got.Body))
		if err != nil {
			t.Fatalf("og:image is not a PNG: %v", err)
		}
		if b := pic.Bounds(); b.Dx() != 1200 || b.Dy() != 630 {
			t.Errorf("og:image is %dx%d, want 1200x630", b.Dx(), b.Dy())
		}
		if !hasInk(pic) {
			t.Errorf("og:image is blank")
		}
		for _, leak := range []string{`<nav class="main"`, "<form", `name="_csrf"`, `href="/requests/`, "Log out"} {
			if strings.Contains(page, leak) {
				t.Errorf("the shared page contains %q (no navigation, forms or logged-in links)", leak)
			}
		}
		if shared.Header.Get("Cache-Control") != "no-store" || !strings.Contains(shared.Header.Get("X-Robots-Tag"), "noindex") {
			t.Errorf("shared page headers: %v", shared.Header)
		}
	})

	t.Run("trace form share", func(t *testing.T) {
		// The trace page carries its own Share form; the link shows the
		// trace's waterfall to someone logged out, without the form.
		id := in.Requests[len(in.Requests)-1].TraceID
		page := c.get("/requests/" + id)
		mustContain(t, "the trace page", page.Body, `<form class="share-form"`, `name="path" value="/requests/`+id+`"`)
		r := c.postForm("/share", url.Values{"_csrf": {csrfFrom(t, page.Body)}, "path": {"/requests/" + id}})
		if r.Code != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/shares?created=") {
			t.Fatalf("POST /share of a trace: %d %s %s", r.Code, r.Header.Get("Location"), r.Body)
		}
		created := c.get(r.Header.Get("Location"))
		m := regexp.MustCompile(`<input id="created-url" type="text" readonly value="([^"]+)"`).FindStringSubmatch(created.Body)
		if m == nil {
			t.Fatalf("the created page does not show the URL:\n%s", created.Body)
		}
		got := anon.get(sharePath(t, html.UnescapeString(m[1])))
		if got.Code != http.StatusOK {
			t.Fatalf("the trace's link answers %d", got.Code)
		}
		mustContain(t, "the shared trace", got.Body, id, `class="waterfall-table"`, "Snapshot taken at")
		// One link into the app: the live trace, for team members who
		// can log in; no form, no other app links (the call's diagnosis,
		// the requests list), no picture to unfurl.
		mustContain(t, "the shared trace", got.Body, `<a href="/requests/`+id+`" rel="nofollow">open the live page</a> (login needed)`,
			`<meta property="twitter:card" content="summary"`)
		rest := strings.Replace(got.Body, `href="/requests/`+id+`"`, "", 1)
		for _, leak := range []string{"<form", `href="/requests`, `href="/diagnose`, `og:image`} {
			if strings.Contains(rest, leak) {
				t.Errorf("the shared trace contains %q", leak)
			}
		}
		if r := anon.get(sharePath(t, html.UnescapeString(m[1])) + "/chart.png"); r.Code != http.StatusNotFound {
			t.Errorf("a trace's link answers %d for a picture it does not have, want 404", r.Code)
		}
	})

	t.Run("form share", func(t *testing.T) {
		page := c.get(diagnosePath)
		r := c.postForm("/share", url.Values{"_csrf": {csrfFrom(t, page.Body)}, "path": {diagnosePath}, "expires": {"7d"}})
		if r.Code != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/shares?created=") {
			t.Fatalf("POST /share: %d %s %s", r.Code, r.Header.Get("Location"), r.Body)
		}
		created := c.get(r.Header.Get("Location"))
		if created.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", r.Header.Get("Location"), created.Code)
		}
		m := regexp.MustCompile(`<input id="created-url" type="text" readonly value="([^"]+)"`).FindStringSubmatch(created.Body)
		if m == nil {
			t.Fatalf("the created page does not show the URL:\n%s", created.Body)
		}
		u := html.UnescapeString(m[1])
		mustContain(t, "the created page", created.Body, `data-copy="`+html.EscapeString(u)+`"`, "Link created")
		if r := anon.get(sharePath(t, u)); r.Code != http.StatusOK || !strings.Contains(r.Body, html.EscapeString(api.Summary)) {
			t.Errorf("form-made link: %d", r.Code)
		}
		// A form without the CSRF token is refused, and so is the API
		// called with the session's cookie alone; the API called with
		// neither cookie nor key says the key is missing.
		if r := c.postForm("/share", url.Values{"path": {diagnosePath}}); r.Code != http.StatusForbidden {
			t.Errorf("POST /share without CSRF: %d, want 403", r.Code)
		}
		if r := c.postForm("/api/v1/share", url.Values{"path": {diagnosePath}}); r.Code != http.StatusForbidden {
			t.Errorf("POST /api/v1/share with the session cookie and no CSRF token: %d, want 403", r.Code)
		}
		if r := anon.postForm("/api/v1/share", url.Values{"path": {diagnosePath}}); r.Code != http.StatusUnauthorized || !strings.Contains(r.Body, "key") {
			t.Errorf("POST /api/v1/share with neither cookie nor key: %d %s, want 401 naming the key", r.Code, r.Body)
		}
	})

	t.Run("compare and trace snapshots", func(t *testing.T) {
		q := url.Values{"service": {"rag-chat"},
			"a_from": {in.Baseline.From.Format(time.RFC3339)}, "a_to": {in.IncidentFrom.Add(-30 * time.Minute).Format(time.RFC3339)},
			"b_from": {in.IncidentFrom.Format(time.RFC3339)}, "b_to": {in.Window.To.Format(time.RFC3339)}}
		cmp := c.apiShare(apptest.Key, "/compare?"+q.Encode(), "never")
		if cmp.ExpiresAt != nil || !strings.HasPrefix(cmp.Title, "Compare rag-chat: ") {
			t.Errorf("compare link: %+v", cmp)
		}
		r := anon.get(sharePath(t, cmp.URL))
		mustContain(t, "the shared comparison", r.Body, "What got worse", "Queue", "Snapshot taken at")
		trace := in.Requests[len(in.Requests)-1].TraceID
		tr := c.apiShare(apptest.Key, "/requests/"+trace, "1d")
		r = anon.get(sharePath(t, tr.URL))
		if r.Code != http.StatusOK {
			t.Fatalf("shared trace: %d", r.Code)
		}
		mustContain(t, "the shared trace", r.Body, trace, "POST /chat", "chat llama-3-8b", "llm_request", "Snapshot taken at",
			`<meta property="og:title" content="Trace `+trace[:8])
		if strings.Contains(r.Body, `<nav class="main"`) || strings.Contains(r.Body, "<form") {
			t.Error("the shared trace has navigation or forms")
		}
	})

	t.Run("only shareable pages", func(t *testing.T) {
		for _, p := range []string{"https://evil.example/diagnose?service=x", "//evil.example/diagnose", "/settings", "/requests/nothex",
			"/diagnose?from=bad", "diagnose", ""} {
			if r := c.postJSON("/api/v1/share", apptest.Key, map[string]string{"path": p}); r.Code != http.StatusBadRequest {
				t.Errorf("share %q: %d %s, want 400", p, r.Code, r.Body)
			}
		}
		if r := c.postJSON("/api/v1/share", apptest.Key, map[string]string{"path": diagnosePath, "expires": "2y"}); r.Code != http.StatusBadRequest {
			t.Errorf("expires=2y: %d, want 400", r.Code)
		}
		if r := c.postJSON("/api/v1/share", "tp_not_a_key", map[string]string{"path": diagnosePath}); r.Code != http.StatusUnauthorized {
			t.Errorf("bad key: %d, want 401", r.Code)
		}
	})

	// Unknown, malformed, revoked and expired links answer the same 404.
	t.Run("dead links look alike", func(t *testing.T) {
		unknown := anon.get("/s/" + strings.Repeat("A", len(token)))
		if unknown.Code != http.StatusNotFound {
			t.Fatalf("unknown token: %d", unknown.Code)
		}
		same := func(what string, r page) {
			t.Helper()
			if r.Code != unknown.Code || r.Body != unknown.Body || r.Header.Get("Content-Type") != unknown.Header.Get("Content-Type") {
				t.Errorf("%s: %d, body differs from an unknown token's: %v", what, r.Code, r.Body != unknown.Body)
			}
		}
		same("malformed token", anon.get("/s/short"))

		revoke := c.apiShare(apptest.Key, diagnosePath, "")
		if r := anon.get(sharePath(t, revoke.URL)); r.Code != http.StatusOK {
			t.Fatalf("fresh link: %d", r.Code)
		}
		list := c.get("/shares")
		mustContain(t, "the list", list.Body, html.EscapeString(api.Summary), `action="/shares/`)
		if strings.Contains(list.Body, strings.TrimPrefix(sharePath(t, revoke.URL), "/s/")) {
			t.Error("the list page shows a token")
		}
		r := c.postForm("/shares/"+itoa(revoke.ID)+"/revoke", url.Values{"_csrf": {csrfFrom(t, list.Body)}})
		if r.Code != http.StatusSeeOther {
			t.Fatalf("revoke: %d %s", r.Code, r.Body)
		}
		same("revoked link", anon.get(sharePath(t, revoke.URL)))
		if !strings.Contains(c.get("/shares").Body, "Revoked ") {
			t.Error("the list does not show the link as revoked")
		}

		expired := c.apiShare(apptest.Key, diagnosePath, "1d")
		if _, err := srv.PG.Pool.Exec(ctx, "UPDATE share_links SET expires_at = now() - interval '1 second' WHERE id = $1", expired.ID); err != nil {
			t.Fatal(err)
		}
		same("expired link", anon.get(sharePath(t, expired.URL)))
		// The live link still opens.
		if r := anon.get(path); r.Code != http.StatusOK {
			t.Errorf("the first link stopped working: %d", r.Code)
		}
	})

	t.Run("project isolation", func(t *testing.T) {
		const keyB = "tp_test_key_of_project_b_0123456789"
		idB, err := srv.PG.EnsureProjectWithKey(ctx, "b", keyB)
		if err != nil {
			t.Fatal(err)
		}
		plantQueueingIncident(t, srv, uint32(idB), "b-secret-svc")
		// A's all-services diagnosis, shared, shows none of B's data.
		a := c.apiShare(apptest.Key, "/diagnose?"+in.windowQuery(""), "")
		r := anon.get(sharePath(t, a.URL))
		if r.Code != http.StatusOK || strings.Contains(r.Body, "b-secret-svc") {
			t.Errorf("project A's share shows project B's service (%d)", r.Code)
		}
		// B's share of its own service shows it; B cannot see or revoke A's links.
		b := c.apiShare(keyB, "/diagnose?"+in.windowQuery("b-secret-svc"), "")
		if r := anon.get(sharePath(t, b.URL)); !strings.Contains(r.Body, "b-secret-svc") {
			t.Error("project B's share lacks its own service")
		}
		cb := newBrowser(t, srv)
		cb.login(keyB)
		list := cb.get("/shares")
		if strings.Contains(list.Body, html.EscapeString(api.Summary)) && strings.Count(list.Body, `action="/shares/`) != 1 {
			t.Errorf("project B's list shows project A's links")
		}
		if r := cb.postForm("/shares/"+itoa(a.ID)+"/revoke", url.Values{"_csrf": {csrfFrom(t, list.Body)}}); r.Code != http.StatusNotFound {
			t.Errorf("project B revoking A's link: %d, want 404", r.Code)
		}
		if r := anon.get(sharePath(t, a.URL)); r.Code != http.StatusOK {
			t.Errorf("A's link after B's revoke attempt: %d", r.Code)
		}
		// A trace of project A is not found from project B.
		if r := cb.postJSON("/api/v1/share", keyB, map[string]string{"path": "/requests/" + in.Requests[0].TraceID}); r.Code != http.StatusBadRequest {
			t.Errorf("B sharing A's trace: %d, want 400", r.Code)
		}
	})

	t.Run("rate limit", func(t *testing.T) {
		const keyC = "tp_test_key_of_project_c_0123456789"
		if _, err := srv.PG.EnsureProjectWithKey(ctx, "c", keyC); err != nil {
			t.Fatal(err)
		}
		empty := "/diagnose?from=2020-01-01T00:00:00Z&to=2020-01-01T00:15:00Z"
		start, ok := time.Now(), 0
		for i := 0; i < 60; i++ {
			r := c.postJSON("/api/v1/share", keyC, map[string]string{"path": empty})
			if r.Code == http.StatusTooManyRequests {
				break
			}
			if r.Code != http.StatusCreated {
				t.Fatalf("share %d: %d %s", i, r.Code, r.Body)
			}
			ok++
		}
		// 30 at once, then one every 2 s.
		if allowed := 30 + int(time.Since(start).Seconds()/2) + 1; ok < 30 || ok > allowed {
			t.Errorf("%d links before 429, want 30..%d", ok, allowed)
		}
		// Another project is not held back.
		c.apiShare(apptest.Key, empty, "")
	})

	// Last: the data goes, the snapshots stay word for word.
	t.Run("survives deleted rows", func(t *testing.T) {
		trace := in.Requests[len(in.Requests)-1].TraceID
		tr := c.apiShare(apptest.Key, "/requests/"+trace, "")
		beforeTrace := anon.get(sharePath(t, tr.URL))
		// Spans first, and again until no request is left: the assembler may
		// be writing requests it built from spans read just before.
		for deadline := time.Now().Add(10 * time.Second); ; {
			for _, table := range []string{"spans", "llm_requests", "llm_requests_sample", "llm_requests_sample64", "metric_points", "events"} {
				if err := srv.CH.Exec(ctx, "TRUNCATE TABLE "+table); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(300 * time.Millisecond)
			r, err := srv.CH.Query(ctx, "SELECT count() AS n FROM llm_requests")
			if err != nil {
				t.Fatal(err)
			}
			if r.Row(0).Int("n") == 0 || time.Now().After(deadline) {
				break
			}
		}
		if live := c.diagnosePage(strings.TrimPrefix(diagnosePath, "/diagnose?")); !strings.Contains(live, "No LLM requests in this window") {
			t.Fatal("the rows are still there: the live page still diagnoses")
		}
		after := anon.get(path)
		if after.Code != http.StatusOK || after.Body != shared.Body {
			t.Errorf("the shared diagnosis changed after the rows were deleted (%d)", after.Code)
		}
		if r := anon.get(sharePath(t, tr.URL)); r.Body != beforeTrace.Body {
			t.Error("the shared trace changed after the rows were deleted")
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// plantTrace stores the spans of one request's trace: app root, LLM client
// span, vLLM server span.
func plantTrace(t *testing.T, srv *apptest.Server, project uint32, r telemetry.LLMRequest) {
	t.Helper()
	root := telemetry.Span{ProjectID: project, TraceID: r.TraceID, SpanID: "a000000000000001", Service: "rag-chat", Instance: "app-0",
		Name: "POST /chat", Kind: "server", Start: r.Start.Add(-50 * time.Millisecond), End: r.Start.Add(time.Duration(*r.E2E+20) * time.Millisecond), StatusCode: "ok"}
	client := telemetry.Span{ProjectID: project, TraceID: r.TraceID, SpanID: r.SpanID, ParentSpanID: root.SpanID, Service: "rag-chat", Instance: "app-0",
		Name: "chat llama-3-8b", Kind: "client", Start: r.Start, End: r.Start.Add(time.Duration(*r.E2E) * time.Millisecond), StatusCode: "ok",
		LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "vllm", Model: "llama-3-8b"}}
	server := telemetry.Span{ProjectID: project, TraceID: r.TraceID, SpanID: "b000000000000001", ParentSpanID: client.SpanID, Service: "vllm", Instance: "vllm-0",
		Name: "llm_request", Kind: "server", Start: r.Start.Add(5 * time.Millisecond), End: client.End.Add(-5 * time.Millisecond), StatusCode: "ok",
		LLM: telemetry.LLMCall{Role: telemetry.LLMServer, Model: "llama-3-8b"}}
	if err := srv.CH.Insert(context.Background(), clickhouse.SpansBatch([]telemetry.Span{root, client, server})); err != nil {
		t.Fatal(err)
	}
}
