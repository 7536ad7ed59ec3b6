package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/app/apptest"
)

var (
	newKey       = regexp.MustCompile(`tp_[a-z2-7]{52}`)
	revokeAction = regexp.MustCompile(`action="(/settings/keys/(\d+)/revoke)"`)
)

func TestSettingsAPIKeys(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)

	body := b.page("/settings")
	contains(t, "settings", body, "<h1>Settings</h1>", "bootstrap", "this browser", "Active",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://", "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20&lt;your key&gt;",
		"kept for <strong>30 days</strong>", "TOKENPATH_RETENTION_DAYS")

	// A new key is shown once, in the answer to the POST itself.
	created := b.post("/settings/keys", url.Values{"name": {"ci exporter"}})
	if created.Code != http.StatusCreated {
		t.Fatalf("create key: %d\n%s", created.Code, created.Body)
	}
	key := newKey.FindString(created.Body)
	if key == "" {
		t.Fatalf("the new key is not on the page:\n%s", created.Body)
	}
	contains(t, "created", created.Body, "New key ci exporter created", "it will not be shown again", `data-copy="`+key+`"`)
	if cc := created.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("the page with a secret must not be cached; Cache-Control %q", cc)
	}
	again := b.page("/settings")
	lacks(t, "settings after creation", again, key)
	contains(t, "settings after creation", again, "ci exporter", key[:8]+"…")
	if code := apiStatus(t, srv, "/api/v1/services", key); code != http.StatusOK {
		t.Fatalf("the new key does not authenticate: %d", code)
	}

	// Revoking takes effect at once, despite the auth cache that has just
	// seen the key as valid.
	var action string
	for _, m := range revokeAction.FindAllStringSubmatch(again, -1) {
		row := again[:strings.Index(again, m[0])]
		if strings.LastIndex(row, "ci exporter") > strings.LastIndex(row, "bootstrap") {
			action = m[1]
		}
	}
	if action == "" {
		t.Fatalf("no revoke form for the new key:\n%s", again)
	}
	r := b.post(action, url.Values{})
	if r.Code != http.StatusSeeOther || r.Header.Get("Location") != "/settings?done=key-revoked#keys" {
		t.Fatalf("revoke: %d → %q", r.Code, r.Header.Get("Location"))
	}
	if code := apiStatus(t, srv, "/api/v1/services", key); code != http.StatusUnauthorized {
		t.Errorf("a revoked key still authenticates: %d", code)
	}
	after := b.page("/settings?done=key-revoked")
	contains(t, "after revoke", after, "The key was revoked", "Revoked just now")

	// Errors are sentences, forms without the CSRF token are refused, and
	// other projects' keys cannot be revoked.
	if r := b.post("/settings/keys", url.Values{"name": {"  "}}); r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "Give the key a name") {
		t.Errorf("empty key name: %d", r.Code)
	}
	if r := b.post("/settings/keys", url.Values{"name": {"x"}, "_csrf": {"forged"}}); r.Code != http.StatusForbidden {
		t.Errorf("forged CSRF token: %d, want 403", r.Code)
	}
	other, err := srv.PG.EnsureProjectWithKey(context.Background(), "other", "tp_other_project_key_0123456789")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := srv.PG.ListKeys(context.Background(), other)
	if err != nil || len(keys) != 1 {
		t.Fatal(keys, err)
	}
	if r := b.post("/settings/keys/"+strconv.FormatInt(keys[0].ID, 10)+"/revoke", url.Values{}); r.Code != http.StatusNotFound {
		t.Errorf("revoking another project's key: %d, want 404", r.Code)
	}
	if code := apiStatus(t, srv, "/api/v1/services", "tp_other_project_key_0123456789"); code != http.StatusOK {
		t.Errorf("the other project's key was revoked: %d", code)
	}
}

func TestSettingsTargetsAndPrices(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	ctx := context.Background()
	project := projectOfKey(t, srv, apptest.Key)

	contains(t, "no targets", b.page("/settings"), "No scrape targets yet.")
	r := b.post("/settings/targets", url.Values{"url": {"http://127.0.0.1:1/metrics"}, "service": {"vllm"}, "interval": {"30"}})
	if r.Code != http.StatusSeeOther {
		t.Fatalf("add target: %d\n%s", r.Code, r.Body)
	}
	body := b.page("/settings?done=target-added")
	contains(t, "targets", body, "Scrape target added", "http://127.0.0.1:1/metrics", "<td>vllm</td>", "<td>30 s</td>")
	targets, err := srv.PG.ListTargets(ctx, int64(project))
	if err != nil || len(targets) != 1 || targets[0].Timeout.Seconds() != 10 {
		t.Fatalf("stored targets: %+v %v", targets, err)
	}
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"url": {"http://127.0.0.1:1/metrics"}}, "already scraped"},
		{url.Values{"url": {"ftp://host/metrics"}}, "must be an absolute http://"},
		{url.Values{"url": {"http://h/metrics"}, "interval": {"0"}}, "whole number of seconds"},
	} {
		r := b.post("/settings/targets", tc.form)
		if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, tc.want) {
			t.Errorf("add target %v: %d, want 422 saying %q", tc.form, r.Code, tc.want)
		}
	}
	r = b.post("/settings/targets/"+strconv.FormatInt(targets[0].ID, 10)+"/delete", url.Values{})
	if r.Code != http.StatusSeeOther {
		t.Fatalf("delete target: %d", r.Code)
	}
	contains(t, "deleted", b.page("/settings?done=target-deleted"), "Scrape target deleted.", "No scrape targets yet.")

	// Prices: one row per model, saved as the table the diagnosis reads.
	r = b.post("/settings/prices", url.Values{"model": {"gpt-4o-mini", "llama", ""}, "input": {"0.15", "", ""}, "output": {"0.6", "", ""}})
	if r.Code != http.StatusSeeOther {
		t.Fatalf("save prices: %d\n%s", r.Code, r.Body)
	}
	body = b.page("/settings?done=prices-saved")
	contains(t, "prices", body, "Prices saved.", `<input type="hidden" name="model" value="gpt-4o-mini">`, `value="0.15"`, `value="0.6"`)
	settings := &analysis.StoredSettings{PG: srv.PG}
	prices, err := settings.Prices(ctx, project)
	if err != nil || len(prices) != 1 || prices["gpt-4o-mini"].InputPerMTok != 0.15 || prices["gpt-4o-mini"].OutputPerMTok != 0.6 {
		t.Errorf("stored prices: %+v %v", prices, err)
	}
	if _, p := settings.SLOAndPrices(ctx, project, "", "gpt-4o-mini"); p["gpt-4o-mini"].OutputPerMTok != 0.6 {
		t.Errorf("SLOAndPrices does not return the saved prices: %+v", p)
	}
	r = b.post("/settings/prices", url.Values{"model": {"gpt-4o-mini"}, "input": {"cheap"}, "output": {"1"}})
	if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "Nothing was saved") || !strings.Contains(r.Body, `value="cheap"`) {
		t.Errorf("bad price: %d, want 422 keeping the input", r.Code)
	}
	if prices, _ := settings.Prices(ctx, project); prices["gpt-4o-mini"].InputPerMTok != 0.15 {
		t.Errorf("a rejected form changed the prices: %+v", prices)
	}
}
