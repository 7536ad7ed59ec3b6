package web_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// apiGet calls GET path of the API with the test key and returns the
// status, the X-Request-Id and the body.
func apiGet(t *testing.T, srv *apptest.Server, path string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr+path, nil)
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Request-Id"), string(body)
}

// apiPut calls PUT path of the API with the test key and a JSON body.
func apiPut(t *testing.T, srv *apptest.Server, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+srv.HTTPAddr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// Windows the engine cannot hold (far future, before 1970, a `last` that
// overflows) are refused with a sentence, not passed to ClickHouse.
func TestWindowBounds(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	for _, q := range []string{
		"from=2300-01-01T00:00:00Z&to=2300-01-02T00:00:00Z",
		"from=2262-04-10T00:00:00Z&to=2262-04-12T00:00:00Z",
		"from=1900-01-01T00:00:00Z&to=1900-01-02T00:00:00Z",
		"last=1000000d",
		"last=9223372036d",
		"last=2562047h",
	} {
		for _, api := range []string{"/api/v1/requests", "/api/v1/diagnose", "/api/v1/series"} {
			code, _, body := apiGet(t, srv, api+"?"+q)
			if code != http.StatusBadRequest || strings.Contains(body, "SELECT") || strings.Contains(body, "Code:") {
				t.Errorf("%s?%s: %d %.300s; want 400 with a sentence", api, q, code, body)
			}
		}
	}
	if code, _, body := apiGet(t, srv, "/api/v1/requests?last=30d"); code != http.StatusOK {
		t.Errorf("last=30d: %d %.200s", code, body)
	}
}

// A failing event store shows the user a sentence and the request id the
// log carries, never the engine's error, which quotes the SQL.
func TestStoreErrorsStayInTheLog(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	if err := srv.CH.Exec(context.Background(), "RENAME TABLE llm_requests TO llm_requests_gone"); err != nil {
		t.Fatal(err)
	}
	code, id, body := apiGet(t, srv, "/api/v1/requests?last=1h")
	if code != http.StatusServiceUnavailable || id == "" || !strings.Contains(body, "request id "+id) {
		t.Errorf("with llm_requests gone: %d, request id %q, body %.300s; want 503 naming the request id", code, id, body)
	}
	for _, leak := range []string{"SELECT", "llm_requests", "UNKNOWN_TABLE", "Code:"} {
		if strings.Contains(body, leak) {
			t.Errorf("the answer shows %q: %.400s", leak, body)
		}
	}
	b := logIn(t, srv, apptest.Key)
	if page := b.diagnosePage("service=x&last=1h"); strings.Contains(page, "UNKNOWN_TABLE") || strings.Contains(page, "SELECT") {
		t.Errorf("the diagnose page shows the engine's error")
	}
}

// The webhook test says only whether the post went through and the reply's
// status class: not the reply, not the network error naming the port, so
// a logged-in user cannot read or map internal services through it.
func TestWebhookTestEchoesOnlyAClass(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	secret := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "internal-admin-secret", http.StatusForbidden)
	}))
	defer secret.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String() + "/hook"
	closed.Close()
	for target, want := range map[string]string{secret.URL + "/hook": "webhook answered HTTP 4xx", closedURL: "cannot reach the webhook"} {
		r := b.post("/slos/alerts", url.Values{"webhook_url": {target}, "enabled": {"true"}, "action": {"test"}})
		if !strings.Contains(r.Body, want) {
			t.Errorf("test post to %s: %d, page lacks %q", target, r.Code, want)
		}
		for _, leak := range []string{"internal-admin-secret", "refused", "dial tcp"} {
			if strings.Contains(r.Body, leak) {
				t.Errorf("test post to %s: the page shows %q", target, leak)
			}
		}
	}
}
