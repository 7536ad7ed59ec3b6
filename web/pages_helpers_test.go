package web_test

// Helpers of the page tests: a
// logged-in browser without automatic redirects, and llm_requests rows
// written straight into ClickHouse.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// browser is a logged-in session: cookie jar, CSRF token, no automatic
// redirects (tests check every 303).
type browser struct {
	t    *testing.T
	base string
	http *http.Client
	csrf string
}

// page is a read response.
type page struct {
	Code   int
	Header http.Header
	Body   string
}

var csrfField = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// csrfFrom reads the CSRF token from a page's form.
func csrfFrom(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no _csrf field in the page:\n%s", page)
	}
	return html.UnescapeString(m[1])
}

// newBrowser is a logged-out browser: a cookie jar and no automatic
// redirects, so tests see every 303.
func newBrowser(t *testing.T, srv *apptest.Server) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, base: "http://" + srv.HTTPAddr, http: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// logIn opens a session with key through the login form, as a browser does.
func logIn(t *testing.T, srv *apptest.Server, key string) *browser {
	t.Helper()
	b := newBrowser(t, srv)
	b.login(key)
	return b
}

// login logs the browser in with key through the login form and keeps the
// session's CSRF token (read from a page after login) for post.
func (b *browser) login(key string) {
	b.t.Helper()
	page := b.get("/login")
	if page.Code != http.StatusOK {
		b.t.Fatalf("GET /login: %d", page.Code)
	}
	b.csrf = csrfFrom(b.t, page.Body)
	r := b.postForm("/login", url.Values{"_csrf": {b.csrf}, "key": {key}, "next": {"/"}})
	if r.Code != http.StatusSeeOther {
		b.t.Fatalf("POST /login: %d\n%s", r.Code, r.Body)
	}
	// The session's forms carry a token tied to the new session.
	b.csrf = csrfFrom(b.t, b.page("/shares"))
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return page{Code: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// get fetches a path; header is name, value pairs.
func (b *browser) get(path string, header ...string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return b.do(req)
}

// page fetches a path and fails unless it answers 200.
func (b *browser) page(path string) string {
	b.t.Helper()
	p := b.get(path)
	if p.Code != http.StatusOK {
		b.t.Fatalf("GET %s: %d\n%s", path, p.Code, p.Body)
	}
	return p.Body
}

// resultsHref finds where a diagnose page's frame loads its diagnosis.
var resultsHref = regexp.MustCompile(`<div id="diagnosis" hx-get="([^"]+)" hx-trigger="load"`)

// diagnosePage fetches /diagnose?query and the diagnosis its frame loads
// (as htmx would), and returns both: the frame (which must answer 200)
// followed by the diagnosis.
func (b *browser) diagnosePage(query string) string {
	b.t.Helper()
	frame := b.page("/diagnose?" + query)
	m := resultsHref.FindStringSubmatch(frame)
	if m == nil {
		b.t.Fatalf("the diagnose page does not load its diagnosis:\n%s", frame)
	}
	return frame + b.page(html.UnescapeString(m[1]))
}

// post submits a form with the session's CSRF token (unless the form
// carries its own).
func (b *browser) post(path string, form url.Values) page {
	b.t.Helper()
	if _, ok := form["_csrf"]; !ok && b.csrf != "" {
		form.Set("_csrf", b.csrf)
	}
	return b.postForm(path, form)
}

// postForm submits a form exactly as given (tests of CSRF refusal).
func (b *browser) postForm(path string, form url.Values) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// postJSON calls the API with a Bearer key (no cookies involved).
func (b *browser) postJSON(path, key string, body any) page {
	b.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		b.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(string(raw)))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return page{Code: resp.StatusCode, Header: resp.Header, Body: string(out)}
}

// getJSON calls the API with a Bearer key and decodes the answer.
func (b *browser) getJSON(path, key string, out any) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		b.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		b.t.Fatal(err)
	}
}

// apiStatus calls GET path of the API with a Bearer key.
func apiStatus(t *testing.T, srv *apptest.Server, path, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// projectOfKey is the project id of an API key.
func projectOfKey(t *testing.T, srv *apptest.Server, key string) uint32 {
	t.Helper()
	p, err := srv.PG.ProjectForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(p)
}

// insertRequests writes decomposed requests as the assembler would.
func insertRequests(t *testing.T, srv *apptest.Server, reqs []telemetry.LLMRequest) {
	t.Helper()
	if err := srv.CH.Insert(context.Background(), clickhouse.RequestsBatch(reqs, nil, 1)); err != nil {
		t.Fatal(err)
	}
}

// newTraceID returns a random 32-hex trace id.
func newTraceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// llmRequest builds a vLLM-served request row with the split given in ms.
func llmRequest(project uint32, service, server, model, instance string, start time.Time, queue, prefill, network, decode float64) telemetry.LLMRequest {
	ttft := queue + prefill + network
	e2e := ttft + decode
	out := int64(101)
	itl := decode / float64(out-1)
	return telemetry.LLMRequest{ProjectID: project, TraceID: newTraceID(), SpanID: "00000000000000a1", Service: service,
		ServerService: server, Model: model, Provider: "vllm", Instance: instance, Start: start,
		TTFT: telemetry.Ptr(ttft), PreInference: telemetry.Ptr(20.0), Queue: telemetry.Ptr(queue), Prefill: telemetry.Ptr(prefill),
		Network: telemetry.Ptr(network), Decode: telemetry.Ptr(decode), E2E: telemetry.Ptr(e2e), ITL: telemetry.Ptr(itl),
		InputTokens: telemetry.Ptr(int64(800)), OutputTokens: telemetry.Ptr(out)}
}

// contains fails for each snippet the page lacks.
func contains(t *testing.T, what, body string, snippets ...string) {
	t.Helper()
	for _, s := range snippets {
		if !strings.Contains(body, s) {
			t.Errorf("%s: missing %q", what, s)
		}
	}
}

// lacks fails for each snippet the page has.
func lacks(t *testing.T, what, body string, snippets ...string) {
	t.Helper()
	for _, s := range snippets {
		if strings.Contains(body, s) {
			t.Errorf("%s: unexpected %q", what, s)
		}
	}
}
