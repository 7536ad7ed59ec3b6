package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web"
)

// publicRoutes may be reached without a key or session; every other route
// the router knows must refuse. The list is explicit so a new route that
// forgets auth fails this test.
var publicRoutes = map[string]bool{
	"GET /healthz": true, "GET /readyz": true, "GET /metrics": true, "GET /static/*": true,
	"GET /login": true, "POST /login": true, "POST /logout": true, "GET /s/:token": true,
	"GET /s/:token/chart.png": true,
}

func TestEveryRouteNeedsAuth(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	e := web.New(web.Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	n := 0
	for _, r := range e.Routes() {
		key := r.Method + " " + r.Path
		if publicRoutes[key] || r.Method == "echo_route_not_found" || strings.HasPrefix(r.Method, "echo_") {
			continue
		}
		n++
		path := strings.NewReplacer(":trace", strings.Repeat("a", 32), ":id", "1", ":token", "x", "*", "x").Replace(r.Path)
		req, _ := http.NewRequest(r.Method, "http://"+srv.HTTPAddr+path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
		case resp.StatusCode == http.StatusForbidden && !strings.HasPrefix(r.Path, "/api/"): // CSRF refuses a page's cookie-less POST first
		// The API says what is missing: the key.
		case resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(loc, "/login"):
		default:
			t.Errorf("%s answered %d (Location %q) without credentials", key, resp.StatusCode, loc)
		}
	}
	if n < 10 {
		t.Fatalf("only %d protected routes found; the route table looks wrong", n)
	}
}

// A key of project A never reads project B's rows through the API.
func TestProjectIsolation(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	other, err := srv.PG.EnsureProjectWithKey(ctx, "other", "tp_other_project_key_0123456789")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rows := []telemetry.LLMRequest{
		{ProjectID: 1, TraceID: strings.Repeat("a", 32), SpanID: strings.Repeat("1", 16), Service: "mine", Start: now.Add(-time.Minute), TTFT: telemetry.Ptr(10.0)},
		{ProjectID: uint32(other), TraceID: strings.Repeat("b", 32), SpanID: strings.Repeat("2", 16), Service: "theirs", Start: now.Add(-time.Minute), TTFT: telemetry.Ptr(20.0)},
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	get := func(key, path string) string {
		req, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, path := range []string{"/api/v1/requests?last=1h", "/api/v1/services", "/api/v1/diagnose?last=1h", "/api/v1/traces/" + strings.Repeat("b", 32)} {
		body := get(apptest.Key, path)
		if strings.Contains(body, "theirs") || strings.Contains(body, strings.Repeat("b", 32)+`"`) && !strings.Contains(path, "traces") {
			t.Errorf("project 1 sees project 2 through %s: %.300s", path, body)
		}
	}
	if body := get(apptest.Key, "/api/v1/traces/"+strings.Repeat("b", 32)); !strings.Contains(body, "no trace") {
		t.Errorf("project 1 can open project 2's trace: %.300s", body)
	}
	if body := get("tp_other_project_key_0123456789", "/api/v1/requests?last=1h"); !strings.Contains(body, "theirs") || strings.Contains(body, "mine") {
		t.Errorf("project 2 view wrong: %.300s", body)
	}
}

// After login the browser goes only to a path of this site: values that
// browsers turn into another host (a TAB or newline they drop, a
// backslash they read as "/", a scheme or an authority) go to "/".
func TestLoginRedirectStaysOnSite(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	for next, want := range map[string]string{
		"/\t/evil.example/":        "/",
		"/\n/evil.example/":        "/",
		"/\r\n/evil.example/":      "/",
		"/\x00/evil.example/":      "/",
		"\t//evil.example/":        "/",
		"//evil.example/":          "/",
		"/\\evil.example/":         "/",
		"https://evil.example/":    "/",
		"javascript:alert(1)":      "/",
		"/@evil.example":           "/@evil.example",
		"/requests?service=a&b=c":  "/requests?service=a&b=c",
		"/diagnose?last=1h#charts": "/diagnose?last=1h#charts",
	} {
		r := b.get("/login?next=" + url.QueryEscape(next))
		if r.Code != http.StatusSeeOther || r.Header.Get("Location") != want {
			t.Errorf("next=%q: %d to %q, want 303 to %q", next, r.Code, r.Header.Get("Location"), want)
		}
	}
}

// TOKENPATH_METRICS_KEY closes /metrics to requests without it.
func TestMetricsKey(t *testing.T) {
	const metricsKey = "metrics-key-0123456789"
	srv := apptest.Start(t, apptest.Options{Configure: func(c *config.Config) { c.MetricsKey = metricsKey }})
	for auth, want := range map[string]int{"": 401, "Bearer wrong-key-0123456789": 401, "Bearer " + apptest.Key: 401, "Bearer " + metricsKey: 200} {
		req, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || want == 200 && !strings.Contains(string(body), "go_goroutines") {
			t.Errorf("/metrics with Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
}
