package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

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
