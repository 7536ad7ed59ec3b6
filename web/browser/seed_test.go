package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/demo"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Hostile values planted in one trace: every page that shows them must
// print them as text and run none of them.
const (
	hostileService = `<script>window.__xss=1</script>`
	hostileAttr    = `"><img src=x onerror=window.__xss=1>`
	hostileModel   = `gpt"><svg onload=window.__xss=1>`
	hostileSQL     = `'; DROP TABLE llm_requests; -- ' OR '1'='1`
	// hostileUTF8 is not valid UTF-8: OTLP cannot carry it, but a
	// ClickHouse String can, so pages must survive it.
	hostileUTF8 = "caf\xe9 \xff\xfe end"
)

// seeded describes the planted traffic.
type seeded struct {
	from, to time.Time
	// kv and cold are the planted incidents.
	kv, cold demo.Phase
	// requests is how many LLM calls the demo made (plus the hostile one).
	requests int
	// hostileTrace is the trace id of the hostile request.
	hostileTrace string
}

// seed sends 45 minutes of demo traffic (a cold start, then a KV-cache
// saturation) through OTLP/HTTP and the events API, inserts the hostile
// trace's spans, and waits until the assembler has decomposed all of it.
func seed(t *testing.T, srv *apptest.Server) seeded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now := time.Now().UTC().Truncate(time.Second)
	s := seeded{
		from: now.Add(-45 * time.Minute),
		to:   now,
		// The cold start comes first: a KV backlog takes minutes to drain
		// and would spoil the default baseline (the 3× window before) of
		// anything planted after it.
		cold: demo.Phase{Incident: demo.ColdStart, From: now.Add(-38 * time.Minute), To: now.Add(-32 * time.Minute)},
		kv:   demo.Phase{Incident: demo.KVSaturation, From: now.Add(-10 * time.Minute), To: now.Add(-4 * time.Minute)},
	}
	cfg := demo.Config{
		OTLPEndpoint: "http://" + srv.OTLPHTTPAddr,
		APIBase:      "http://" + srv.HTTPAddr,
		APIKey:       apptest.Key,
		Seed:         1,
		Rate:         2,
	}
	start := time.Now()
	sc := demo.Simulate(cfg, s.from, s.to, []demo.Phase{s.cold, s.kv})
	simulated := time.Since(start)
	if err := sc.Send(ctx, cfg); err != nil {
		t.Fatalf("send demo traffic: %v", err)
	}
	t.Logf("simulated %d spans in %s, sent in %s", len(sc.Spans), simulated.Round(time.Millisecond), (time.Since(start) - simulated).Round(time.Millisecond))
	s.hostileTrace = strings.Repeat("ab", 16)
	if err := srv.CH.Insert(ctx, clickhouse.SpansBatch(hostileSpans(s.hostileTrace, now.Add(-4*time.Minute)))); err != nil {
		t.Fatalf("insert hostile spans: %v", err)
	}
	s.requests = len(sc.Requests) + 1

	// The assembler runs every second behind a 2 s lag.
	var n int64
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		r, err := srv.CH.Query(ctx, "SELECT count() AS n FROM llm_requests FINAL WHERE project_id = 1 AND is_deleted = 0")
		if err != nil {
			t.Fatalf("count requests: %v", err)
		}
		if n = r.Row(0).Int("n"); n >= int64(s.requests) {
			break
		}
	}
	if n < int64(s.requests) {
		t.Fatalf("only %d of %d LLM requests were assembled after 90 s", n, s.requests)
	}
	// The API must see the hostile row too (it is what the pages read).
	rows := apiRequests(t, srv, url.Values{"service": {hostileService},
		"from": {s.from.Format(time.RFC3339)}, "to": {now.Add(time.Minute).Format(time.RFC3339)}})
	if len(rows) != 1 {
		t.Fatalf("the hostile request is not served by /api/v1/requests: %v", rows)
	}
	return s
}

// hostileSpans is a root span and an LLM client span whose names,
// service, model and attributes are HTML, SQL and invalid UTF-8.
func hostileSpans(traceID string, start time.Time) []telemetry.Span {
	ttft := 900 * time.Millisecond
	attrs := map[string]string{
		"user.comment":          hostileAttr,
		"db.statement":          hostileSQL,
		"bad.utf8":              hostileUTF8,
		"gen_ai.operation.name": "chat",
		"gen_ai.request.model":  hostileModel,
	}
	res := map[string]string{"service.name": hostileService, "service.instance.id": `<b>pod</b>`}
	return []telemetry.Span{
		{
			ProjectID: 1, TraceID: traceID, SpanID: "00000000000000a1", Service: hostileService, Instance: `<b>pod</b>`,
			Name: "POST /chat " + hostileAttr, Kind: "server", Start: start, End: start.Add(3 * time.Second),
			StatusCode: "ok", Attributes: map[string]string{"http.route": "/chat" + hostileSQL, "note": hostileAttr}, Resource: res,
		},
		{
			ProjectID: 1, TraceID: traceID, SpanID: "00000000000000a2", ParentSpanID: "00000000000000a1",
			Service: hostileService, Instance: `<b>pod</b>`, Name: "chat " + hostileModel, Kind: "client",
			Start: start.Add(200 * time.Millisecond), End: start.Add(2800 * time.Millisecond), StatusCode: "ok",
			LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", Model: hostileModel, Operation: "chat",
				InputTokens: telemetry.Ptr[int64](1200), OutputTokens: telemetry.Ptr[int64](300), ClientTTFT: &ttft},
			Attributes: attrs, Resource: res,
		},
	}
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func newAPIRequest(srv *apptest.Server, path, key string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return req, nil
}

// apiGet calls the REST API with the test key and decodes the JSON.
func apiGet(t *testing.T, srv *apptest.Server, path string, q url.Values, out any) {
	t.Helper()
	req, _ := newAPIRequest(srv, path+"?"+q.Encode(), apptest.Key)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s?%s: HTTP %d", path, q.Encode(), resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: decode: %v", path, err)
	}
}

// apiRow is the part of a /api/v1/requests row the tests read.
type apiRow struct {
	TraceID string   `json:"trace_id"`
	Service string   `json:"service"`
	TTFT    *float64 `json:"ttft_ms"`
}

func apiRequests(t *testing.T, srv *apptest.Server, q url.Values) []apiRow {
	t.Helper()
	q.Set("limit", "1000")
	var body struct {
		Requests []apiRow `json:"requests"`
	}
	apiGet(t, srv, "/api/v1/requests", q, &body)
	return body.Requests
}

// apiDiagnosis is the part of /api/v1/diagnose the tests compare with the
// page.
type apiDiagnosis struct {
	Verdict          string     `json:"verdict"`
	Summary          string     `json:"summary"`
	BaselineDataFrom *time.Time `json:"baseline_data_from"`
}

func windowQuery(service string, p demo.Phase) url.Values {
	return url.Values{"service": {service}, "from": {p.From.Format(time.RFC3339)}, "to": {p.To.Format(time.RFC3339)}}
}

func (s seeded) String() string {
	return fmt.Sprintf("%s–%s, kv %s–%s, cold %s–%s", s.from.Format("15:04"), s.to.Format("15:04"),
		s.kv.From.Format("15:04"), s.kv.To.Format("15:04"), s.cold.From.Format("15:04"), s.cold.To.Format("15:04"))
}
