package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand"
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

// dgClient is a browser for the diagnosis/compare/share tests: a cookie jar
// and no automatic redirects, so tests see every 303.
type dgClient struct {
	t    *testing.T
	base string
	http *http.Client
}

func newDGClient(t *testing.T, srv *apptest.Server) *dgClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &dgClient{t: t, base: "http://" + srv.HTTPAddr, http: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// dgResponse is a read response.
type dgResponse struct {
	Code   int
	Header http.Header
	Body   string
}

func (c *dgClient) do(req *http.Request) dgResponse {
	c.t.Helper()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return dgResponse{Code: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

func (c *dgClient) get(path string, header ...string) dgResponse {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return c.do(req)
}

func (c *dgClient) postForm(path string, form url.Values) dgResponse {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

// postJSON calls the API with a Bearer key (no cookies involved).
func (c *dgClient) postJSON(path, key string, body any) dgResponse {
	c.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(string(b)))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return dgResponse{Code: resp.StatusCode, Header: resp.Header, Body: string(out)}
}

// getJSON calls the API with a Bearer key and decodes the answer.
func (c *dgClient) getJSON(path, key string, out any) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		c.t.Fatal(err)
	}
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

// login logs the browser in with key through the login form.
func (c *dgClient) login(key string) {
	c.t.Helper()
	page := c.get("/login")
	if page.Code != http.StatusOK {
		c.t.Fatalf("GET /login: %d", page.Code)
	}
	r := c.postForm("/login", url.Values{"_csrf": {csrfFrom(c.t, page.Body)}, "key": {key}, "next": {"/"}})
	if r.Code != http.StatusSeeOther {
		c.t.Fatalf("POST /login: %d %s", r.Code, r.Body)
	}
}

// incident is a planted queueing incident on rag-chat → vllm: a healthy
// baseline, then in the last 12 minutes of the window the KV cache fills
// and requests wait.
type incident struct {
	Window, Baseline struct{ From, To time.Time }
	IncidentFrom     time.Time
	ScaleAt          time.Time
	Requests         []telemetry.LLMRequest
}

// windowQuery is the diagnosis query of the incident's window.
func (in incident) windowQuery(service string) string {
	q := url.Values{"from": {in.Window.From.Format(time.RFC3339)}, "to": {in.Window.To.Format(time.RFC3339)}}
	if service != "" {
		q.Set("service", service)
	}
	return q.Encode()
}

// plantQueueingIncident inserts the incident's rows for a project.
func plantQueueingIncident(t *testing.T, srv *apptest.Server, project uint32, service string) incident {
	t.Helper()
	ctx := context.Background()
	end := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	var in incident
	in.Window.From, in.Window.To = end.Add(-30*time.Minute), end
	in.Baseline.From, in.Baseline.To = end.Add(-120*time.Minute), end.Add(-30*time.Minute)
	in.IncidentFrom = end.Add(-12 * time.Minute)
	in.ScaleAt = end.Add(-6 * time.Minute)
	rng := rand.New(rand.NewSource(int64(project)))
	var points []telemetry.MetricPoint
	n := 0
	for ts := in.Baseline.From; ts.Before(in.Window.To); ts = ts.Add(5 * time.Second) {
		n++
		hot := !ts.Before(in.IncidentFrom)
		queue := 5 + rng.Float64()*15
		if hot {
			queue = 1500 + rng.Float64()*1000
		}
		prefill := 120 + rng.Float64()*60
		network := 15 + rng.Float64()*10
		decode := 700 + rng.Float64()*300
		ttft := queue + prefill + network
		e2e := ttft + decode
		out := int64(150 + rng.Intn(50))
		itl := decode / float64(out-1)
		in.Requests = append(in.Requests, telemetry.LLMRequest{
			ProjectID: project, TraceID: fmt.Sprintf("%032x", uint64(project)<<48|uint64(n)), SpanID: fmt.Sprintf("%016x", n),
			Service: service, ServerService: "vllm", Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-0",
			Start: ts, TTFT: telemetry.Ptr(ttft), PreInference: telemetry.Ptr(40 + rng.Float64()*20), Queue: telemetry.Ptr(queue),
			Prefill: telemetry.Ptr(prefill), Network: telemetry.Ptr(network), Decode: telemetry.Ptr(decode), E2E: telemetry.Ptr(e2e),
			ITL: telemetry.Ptr(itl), InputTokens: telemetry.Ptr(int64(900 + rng.Intn(200))), OutputTokens: telemetry.Ptr(out),
			Route: "/chat",
		})
	}
	for ts := in.Baseline.From; ts.Before(in.Window.To); ts = ts.Add(15 * time.Second) {
		kv, waiting := 0.35+rng.Float64()*0.2, 0.0
		if !ts.Before(in.IncidentFrom) {
			kv, waiting = 0.97+rng.Float64()*0.02, float64(20+rng.Intn(12))
		}
		for name, v := range map[string]float64{"kv_cache_usage": kv, "requests_waiting": waiting, "requests_running": 8} {
			points = append(points, telemetry.MetricPoint{ProjectID: project, Time: ts, Service: "vllm", Instance: "vllm-0", Name: name, Value: v})
		}
	}
	events := []telemetry.Event{
		{ProjectID: project, Time: in.ScaleAt, Kind: telemetry.EventScale, Service: "vllm",
			FromReplicas: telemetry.Ptr(int32(1)), ToReplicas: telemetry.Ptr(int32(2)), Reason: "HPA: queue length", Source: "test"},
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(in.Requests, nil, 1)); err != nil {
		t.Fatal(err)
	}
	if err := srv.CH.Insert(ctx, clickhouse.MetricsBatch(points)); err != nil {
		t.Fatal(err)
	}
	if err := srv.CH.Insert(ctx, clickhouse.EventsBatch(events)); err != nil {
		t.Fatal(err)
	}
	return in
}

// defaultProject is the id of the test server's project "default".
func defaultProject(t *testing.T, srv *apptest.Server) uint32 {
	t.Helper()
	id, err := srv.PG.ProjectForKey(context.Background(), apptest.Key)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(id)
}

// chartSpec reads a chart's JSON block from a page.
func chartSpec(t *testing.T, page, id string) map[string]any {
	t.Helper()
	re := regexp.MustCompile(`<script id="` + regexp.QuoteMeta(id) + `" type="application/json">([^<]*)</script>`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no JSON block %q in the page", id)
	}
	var spec map[string]any
	if err := json.Unmarshal([]byte(m[1]), &spec); err != nil {
		t.Fatalf("chart %s: %v", id, err)
	}
	return spec
}

// mustContain fails for every snippet the page lacks.
func mustContain(t *testing.T, what, page string, snippets ...string) {
	t.Helper()
	for _, s := range snippets {
		if !strings.Contains(page, s) {
			t.Errorf("%s lacks %q", what, s)
		}
	}
}
