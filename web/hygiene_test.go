package web_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/web"
)

// Every logged-in page, present and future, is marked no-store: the SLO
// page shows the webhook URL, which is a secret.
func TestLoggedInPagesAreNotCached(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	e := web.New(web.Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	n := 0
	for _, r := range e.Routes() {
		if r.Method != http.MethodGet || publicRoutes[r.Method+" "+r.Path] || strings.HasPrefix(r.Path, "/api/") {
			continue
		}
		n++
		path := strings.NewReplacer(":trace", strings.Repeat("a", 32), ":id", "1", ":token", "x", "*", "x").Replace(r.Path)
		if p := b.get(path); p.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: %d with Cache-Control %q, want no-store", r.Path, p.Code, p.Header.Get("Cache-Control"))
		}
	}
	if n < 8 {
		t.Fatalf("only %d logged-in pages found; the route table looks wrong", n)
	}
}

// tp_csrf is Secure wherever the session cookie is (behind TLS or a proxy
// that says so), /static/ lists no directory, and OTLP/JSON with junk
// after the object is refused.
func TestHygiene(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := newBrowser(t, srv)
	p := b.get("/login", "X-Forwarded-Proto", "https")
	var csrf string
	for _, c := range p.Header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "tp_csrf=") {
			csrf = c
		}
	}
	if !strings.Contains(csrf, "; Secure") {
		t.Errorf("tp_csrf behind https: %q, want Secure", csrf)
	}
	for _, dir := range []string{"/static/", "/static/vendor/", "/static/vendor"} {
		if p := b.get(dir); p.Code != http.StatusNotFound || strings.Contains(p.Body, "<a href=") && strings.Contains(p.Body, "<pre>") {
			t.Errorf("GET %s: %d %.200s; want 404 and no listing", dir, p.Code, p.Body)
		}
	}
	if p := b.get("/static/app.css"); p.Code != http.StatusOK {
		t.Errorf("GET /static/app.css: %d", p.Code)
	}
	for body, want := range map[string]int{`{"resourceSpans":[]} junk`: 400, `{"resourceSpans":[]}{"resourceSpans":[]}`: 400, `{"resourceSpans":[]}` + "\n": 200} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+srv.OTLPHTTPAddr+"/v1/traces", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+apptest.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("OTLP/JSON %q: %d, want %d", body, resp.StatusCode, want)
		}
	}
}
