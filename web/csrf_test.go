package web_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/web"
)

// sessionCookie is the logged-in browser's session cookie value.
func (b *browser) sessionCookie() string {
	b.t.Helper()
	u, _ := url.Parse(b.base)
	for _, c := range b.http.Jar.Cookies(u) {
		if c.Name == "tp_session" {
			return c.Value
		}
	}
	b.t.Fatal("the browser has no session cookie")
	return ""
}

// raw sends method path with the session cookie plus extra cookies and
// headers exactly as given (no jar), as a hostile page makes a browser do.
func (b *browser) raw(method, path, cookies string, form url.Values, header ...string) page {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", "tp_session="+b.sessionCookie()+cookies)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{Code: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// A page on another port of the same host (same-site, cross-origin) sets
// tp_csrf itself and submits the same value: the token is tied to the
// session, so the forged pair is refused, and so is any request the
// browser marks as not same-origin, token or not.
func TestCSRFCookieTossing(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	hook := newWebhookReceiver(t)
	forged := strings.Repeat("X", 43)
	form := url.Values{"webhook_url": {hook.URL + "/attacker"}, "enabled": {"true"}, "action": {"save"}, "_csrf": {forged}}
	if r := b.raw("POST", "/slos/alerts", "; tp_csrf="+forged, form); r.Code != http.StatusForbidden {
		t.Errorf("tossed tp_csrf cookie with the same _csrf: %d, want 403\n%.300s", r.Code, r.Body)
	}
	form.Set("_csrf", b.csrf)
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "same-site"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Origin", "http://127.0.0.1:1"},
	} {
		if r := b.raw("POST", "/slos/alerts", "", form, h...); r.Code != http.StatusForbidden {
			t.Errorf("%s: %s with a valid token: %d, want 403", h[0], h[1], r.Code)
		}
	}
	if strings.Contains(b.page("/slos"), "/attacker") {
		t.Fatal("a forged form re-pointed the alert webhook")
	}
	// The session's own token from a same-origin page still works.
	if r := b.raw("POST", "/slos/alerts", "", form, "Sec-Fetch-Site", "same-origin", "Origin", b.base); r.Code != http.StatusSeeOther {
		t.Errorf("same-origin form with the session token: %d, want 303\n%.300s", r.Code, r.Body)
	}
	// Another session's token is not this one's.
	other := logIn(t, srv, apptest.Key)
	if other.csrf == b.csrf {
		t.Fatal("two sessions share one form token")
	}
	form.Set("_csrf", other.csrf)
	if r := b.raw("POST", "/slos/alerts", "", form); r.Code != http.StatusForbidden {
		t.Errorf("another session's token: %d, want 403", r.Code)
	}
}

// An Authorization header skips the form token only when that key
// authenticates the request: beside a session cookie, a made-up Bearer
// value neither skips the token on a page nor lets the cookie
// authenticate the API.
func TestBearerHeaderDoesNotSkipFormToken(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	if r := b.raw("POST", "/settings/keys", "", url.Values{"name": {"forged"}}, "Authorization", "Bearer anything"); r.Code != http.StatusForbidden {
		t.Errorf("page POST with a made-up Bearer and the session cookie, no token: %d, want 403", r.Code)
	}
	for _, h := range []string{"Bearer anything", "Bearer ", "Basic eDp4"} {
		if r := b.raw("POST", "/api/v1/share", "", nil, "Authorization", h, "Content-Type", "application/json"); r.Code != http.StatusUnauthorized {
			t.Errorf("API POST with Authorization %q and the session cookie, no token: %d, want 401", h, r.Code)
		}
	}
	if strings.Contains(b.page("/settings"), "forged") {
		t.Fatal("a key was created without a form token")
	}
}

// Every state-changing route, present and future, refuses the three
// forgeries from a logged-in browser: a tossed token cookie, a request the
// browser marks as coming from another origin, and a made-up Bearer header
// beside the session cookie.
func TestEveryStateChangeRefusesForgery(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	b := logIn(t, srv, apptest.Key)
	e := web.New(web.Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	forged := strings.Repeat("X", 43)
	n := 0
	for _, r := range e.Routes() {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			continue
		}
		if strings.HasPrefix(r.Method, "echo_") {
			continue
		}
		n++
		path := strings.NewReplacer(":trace", strings.Repeat("a", 32), ":id", "1", ":token", "x", "*", "x").Replace(r.Path)
		attacks := []struct {
			name    string
			cookies string
			form    url.Values
			header  []string
		}{
			{"tossed tp_csrf", "; tp_csrf=" + forged, url.Values{"_csrf": {forged}}, nil},
			{"same-site page", "", url.Values{"_csrf": {b.csrf}}, []string{"Sec-Fetch-Site", "same-site"}},
			{"foreign Origin", "", url.Values{"_csrf": {b.csrf}}, []string{"Origin", "http://127.0.0.1:1"}},
			{"made-up Bearer", "", url.Values{}, []string{"Authorization", "Bearer made-up"}},
		}
		for _, a := range attacks {
			resp := b.raw(r.Method, path, a.cookies, a.form, a.header...)
			if resp.Code != http.StatusForbidden && resp.Code != http.StatusUnauthorized {
				t.Errorf("%s %s, %s: %d, want 403 or 401\n%.200s", r.Method, r.Path, a.name, resp.Code, resp.Body)
			}
		}
	}
	if n < 8 {
		t.Fatalf("only %d state-changing routes found; the route table looks wrong", n)
	}
}
