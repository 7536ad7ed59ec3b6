package demo

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is a fake Tokenpath edge: OTLP/HTTP protobuf and the events
// API, recording what it decoded. failLeft makes the next n trace exports
// answer failStatus (and Retry-After) before it accepts them; rejectNext
// and rejectNextPoints answer the next export with a partial success.
type collector struct {
	t   *testing.T
	key string

	mu               sync.Mutex
	spans            []*tracepb.Span
	resources        map[string]map[string]string // span id → resource attributes
	scopes           map[string]string            // span id → instrumentation scope name
	metrics          []*colmetricspb.ExportMetricsServiceRequest
	events           []EventJSON
	userAgents       map[string]bool // of OTLP requests
	requests         int
	badAuth          int
	failStatus       int
	failLeft         int
	rejectNext       int64
	rejectNextPoints int64
}

func newCollector(t *testing.T, key string) (*collector, *httptest.Server) {
	c := &collector{t: t, key: key, resources: map[string]map[string]string{}, scopes: map[string]string{}, userAgents: map[string]bool{}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		c.userAgents[r.UserAgent()] = true
	}
	if r.Header.Get("Authorization") != "Bearer "+c.key {
		c.badAuth++
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body := r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/v1/traces":
		if c.failLeft > 0 {
			c.failLeft--
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", c.failStatus)
			return
		}
		if r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "content type", http.StatusUnsupportedMediaType)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			res := attrMap(rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					c.spans = append(c.spans, sp)
					c.resources[string(sp.SpanId)] = res
					c.scopes[string(sp.SpanId)] = ss.GetScope().GetName()
				}
			}
		}
		ack := &coltracepb.ExportTraceServiceResponse{}
		if c.rejectNext > 0 {
			ack.PartialSuccess = &coltracepb.ExportTracePartialSuccess{RejectedSpans: c.rejectNext, ErrorMessage: "span too old"}
			c.rejectNext = 0
		}
		out, _ := proto.Marshal(ack)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	case "/v1/metrics":
		var req colmetricspb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.metrics = append(c.metrics, &req)
		ack := &colmetricspb.ExportMetricsServiceResponse{}
		if c.rejectNextPoints > 0 {
			ack.PartialSuccess = &colmetricspb.ExportMetricsPartialSuccess{RejectedDataPoints: c.rejectNextPoints, ErrorMessage: "bad gauge"}
			c.rejectNextPoints = 0
		}
		out, _ := proto.Marshal(ack)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	case "/api/v1/events":
		var evs []EventJSON
		if err := json.Unmarshal(data, &evs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.events = append(c.events, evs...)
		w.WriteHeader(http.StatusAccepted)
	default:
		http.NotFound(w, r)
	}
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = anyString(kv.Value)
	}
	return m
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	default:
		b, _ := json.Marshal(v.Value)
		return string(b)
	}
}

func attr(sp *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range sp.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

func TestSendThroughOTLP(t *testing.T) {
	c, srv := newCollector(t, "test-key")
	c.failStatus, c.failLeft = http.StatusServiceUnavailable, 2
	cfg := Config{OTLPEndpoint: srv.URL, APIBase: srv.URL + "/", APIKey: "test-key", Seed: 4}
	// Two days ago: the receiver must keep the spans' own timestamps.
	from := time.Now().Add(-48 * time.Hour).Truncate(time.Minute)
	phases := []Phase{{Incident: ColdStart, From: from.Add(time.Minute), To: from.Add(4 * time.Minute)}}
	sc := Simulate(cfg, from, from.Add(5*time.Minute), phases)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sc.Send(ctx, cfg); err != nil {
		t.Fatalf("send: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.badAuth > 0 {
		t.Errorf("%d requests without the Bearer key", c.badAuth)
	}
	// The OTel Go SDK's OTLP exporters sent them, nothing hand-made.
	for ua := range c.userAgents {
		// "OTel OTLP Exporter Go/…" (traces), "OTel Go OTLP over
		// HTTP/protobuf metrics exporter/…"
		if !strings.HasPrefix(ua, "OTel ") || !strings.Contains(ua, "OTLP") || !strings.Contains(ua, "Go") {
			t.Errorf("OTLP request with User-Agent %q, want the OTel Go SDK exporter's", ua)
		}
	}
	if len(c.userAgents) == 0 {
		t.Error("no OTLP request seen")
	}
	if len(c.spans) != len(sc.Spans) {
		t.Fatalf("collector got %d spans, scenario has %d (retries must neither lose nor duplicate)", len(c.spans), len(sc.Spans))
	}
	got := map[string]*tracepb.Span{}
	for _, sp := range c.spans {
		got[string(sp.SpanId)] = sp
	}

	// One rag-chat call, checked attribute by attribute against the truth.
	checked := 0
	for _, r := range sc.Requests {
		if r.Managed || (checked > 0 && !r.ColdStart) {
			continue
		}
		client, server := got[string(r.ClientSpanID[:])], got[string(r.ServerSpanID[:])]
		if client == nil || server == nil {
			t.Fatalf("client or server span of %s not received", r.TraceID)
		}
		if !bytes.Equal(server.TraceId, client.TraceId) || !bytes.Equal(server.TraceId, r.TraceID[:]) {
			t.Error("client and server spans are not in the same trace")
		}
		if !bytes.Equal(server.ParentSpanId, client.SpanId) {
			t.Error("server span's parent is not the client span")
		}
		if server.Kind != tracepb.Span_SPAN_KIND_SERVER || server.Name != "llm_request" || client.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("kinds/names: server %v %q, client %v", server.Kind, server.Name, client.Kind)
		}
		// Sampled; the server span's parent (the client span) is remote,
		// the client span's parent (the handler) is local.
		remote := uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
		known := uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
		if server.Flags != 1|known|remote || client.Flags != 1|known {
			t.Errorf("flags: server %#x, client %#x", server.Flags, client.Flags)
		}
		if s := c.scopes[string(server.SpanId)]; s != "github.com/tokenpath/tokenpath/demo" {
			t.Errorf("instrumentation scope %q", s)
		}
		if server.StartTimeUnixNano != uint64(r.Start.Add(r.NetworkUp+r.Hold).UnixNano()) ||
			client.StartTimeUnixNano != uint64(r.Start.UnixNano()) ||
			client.EndTimeUnixNano != uint64(r.Start.Add(r.E2E).UnixNano()) {
			t.Error("span timestamps are not the model's historical times")
		}
		sres, cres := c.resources[string(server.SpanId)], c.resources[string(client.SpanId)]
		if sres["service.name"] != "vllm-llama" || sres["service.instance.id"] != r.Instance || sres["k8s.pod.name"] != r.Instance ||
			!strings.HasPrefix(r.Instance, "vllm-llama-") {
			t.Errorf("server resource %v, instance %s", sres, r.Instance)
		}
		if cres["service.name"] != "rag-chat" {
			t.Errorf("client resource %v", cres)
		}
		seconds := map[string]time.Duration{
			"gen_ai.latency.time_in_queue":         r.Queue,
			"gen_ai.latency.time_in_model_prefill": r.Prefill,
			"gen_ai.latency.time_to_first_token":   r.ServerTTFT,
			"gen_ai.latency.time_in_model_decode":  r.Decode,
			"gen_ai.latency.e2e":                   time.Duration(server.EndTimeUnixNano - server.StartTimeUnixNano),
		}
		for k, want := range seconds {
			v := attr(server, k)
			if v == nil || v.GetDoubleValue() != want.Seconds() {
				t.Errorf("server %s = %v, want %v s", k, v, want.Seconds())
			}
		}
		ints := map[string]int64{"gen_ai.usage.prompt_tokens": int64(r.InputTokens), "gen_ai.usage.completion_tokens": int64(r.OutputTokens)}
		for k, want := range ints {
			if v := attr(server, k); v == nil || v.GetIntValue() != want {
				t.Errorf("server %s = %v, want %d", k, v, want)
			}
		}
		for _, k := range []string{"gen_ai.request.model", "gen_ai.response.model"} {
			if v := attr(server, k); v.GetStringValue() != "meta-llama/Llama-3.1-8B-Instruct" {
				t.Errorf("server %s = %v", k, v)
			}
		}
		if attr(server, "gen_ai.request.id").GetStringValue() == "" {
			t.Error("server span has no gen_ai.request.id")
		}
		strs := map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm", "gen_ai.system": "vllm", "gen_ai.request.model": vllmModel}
		for k, want := range strs {
			if v := attr(client, k); v.GetStringValue() != want {
				t.Errorf("client %s = %v, want %q", k, v, want)
			}
		}
		if v := attr(client, "gen_ai.response.time_to_first_chunk"); v.GetDoubleValue() != r.TTFT.Seconds() {
			t.Errorf("client TTFT %v, want %v", v, r.TTFT.Seconds())
		}
		if v := attr(client, "gen_ai.usage.input_tokens"); v.GetIntValue() != int64(r.InputTokens) {
			t.Errorf("client input tokens %v", v)
		}
		root := got[string(client.ParentSpanId)]
		if root == nil || root.Name != "POST /chat" || len(root.ParentSpanId) != 0 ||
			attr(root, "http.route").GetStringValue() != "/chat" || attr(root, "tenant").GetStringValue() == "" || attr(root, "region").GetStringValue() == "" {
			t.Errorf("root span %v", root)
		}
		checked++
		if checked == 2 {
			break
		}
	}
	if checked != 2 {
		t.Fatalf("checked %d calls, want a plain one and a cold start", checked)
	}

	// A rate-limited managed API call keeps its error status.
	failed := 0
	for _, r := range sc.Requests {
		if !r.Error {
			continue
		}
		failed++
		sp := got[string(r.ClientSpanID[:])]
		if sp == nil || sp.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(sp.GetStatus().GetMessage(), "429") {
			t.Errorf("failed call %s: span %v", r.TraceID, sp)
		}
	}
	if failed == 0 {
		t.Error("the scenario has no failed call to check (change the seed)")
	}

	// Metrics: the vLLM gauge names per instance, at scrape times.
	names := map[string]int{}
	for _, req := range c.metrics {
		for _, rm := range req.ResourceMetrics {
			res := attrMap(rm.Resource.Attributes)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					names[m.Name] += len(m.GetGauge().GetDataPoints())
					if strings.HasPrefix(m.Name, "vllm:") && (res["service.name"] != "vllm-llama" || res["service.instance.id"] == "") {
						t.Errorf("%s exported under resource %v", m.Name, res)
					}
					for _, dp := range m.GetGauge().GetDataPoints() {
						ts := time.Unix(0, int64(dp.TimeUnixNano))
						if ts.Before(from) || !ts.Before(from.Add(5*time.Minute)) || ts.Truncate(scrapeInterval) != ts {
							t.Errorf("%s point at %v, want a scrape time inside the window", m.Name, ts)
						}
						if strings.HasPrefix(m.Name, "vllm:") && attrMap(dp.Attributes)["model_name"] != vllmModel {
							t.Errorf("%s without model_name", m.Name)
						}
					}
				}
			}
		}
	}
	for _, n := range []string{MetricKVCacheUsage, MetricRequestsWaiting, MetricRequestsRunning, MetricReplicas} {
		if names[n] == 0 {
			t.Errorf("no %s points received (got %v)", n, names)
		}
	}
	total := 0
	for _, n := range names {
		total += n
	}
	if total != len(sc.Metrics) {
		t.Errorf("%d metric points received, %d simulated", total, len(sc.Metrics))
	}

	// Events: the scale from zero, as the events API expects it.
	var activation *EventJSON
	for i, e := range c.events {
		if e.FromReplicas != nil && *e.FromReplicas == 0 && *e.ToReplicas == 1 {
			activation = &c.events[i]
		}
	}
	if len(c.events) != len(sc.Events) || activation == nil || activation.Kind != "scale" || activation.Service != "vllm-llama" ||
		activation.Reason != "KEDAScaleTargetActivated" || activation.Source != "keda" || !phases[0].Contains(activation.Time) {
		t.Errorf("events %+v", c.events)
	}
}

func TestSendReportsRejectsAndPermanentErrors(t *testing.T) {
	c, srv := newCollector(t, "k")
	cfg := Config{OTLPEndpoint: srv.URL, APIBase: srv.URL, APIKey: "k", Seed: 1}
	sc := Simulate(cfg, base, base.Add(30*time.Second), nil)
	c.rejectNext = 3
	err := sc.Send(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "3 spans rejected") || !strings.Contains(err.Error(), "span too old") {
		t.Errorf("partial success: err = %v", err)
	}
	// Points the server refused do not keep the spans from being sent.
	c.rejectNextPoints = 2
	c.mu.Lock()
	spansBefore := len(c.spans)
	c.mu.Unlock()
	err = sc.Send(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "2 metric data points rejected") || !strings.Contains(err.Error(), "bad gauge") {
		t.Errorf("metrics partial success: err = %v", err)
	}
	c.mu.Lock()
	sent := len(c.spans) - spansBefore
	c.mu.Unlock()
	if sent != len(sc.Spans) {
		t.Errorf("after a metrics partial success %d of %d spans were sent", sent, len(sc.Spans))
	}

	// 429 is retried (Retry-After honoured), a 401 is not.
	c.failStatus, c.failLeft = http.StatusTooManyRequests, 1
	if err := sc.Send(context.Background(), cfg); err != nil {
		t.Errorf("after one 429: %v", err)
	}
	before := c.requests
	cfg.APIKey = "wrong"
	if err := sc.Send(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("bad key: err = %v", err)
	}
	if c.requests-before != 1 {
		t.Errorf("a 401 was retried: %d requests", c.requests-before)
	}
}

// syncBuffer is a log sink safe for the Run goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunBackfillsThenGoesLive(t *testing.T) {
	// The server comes up after the demo started (`tokenpath demo` beside
	// a starting server): Run waits for it rather than drop the backfill.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := &collector{t: t, key: "k", resources: map[string]map[string]string{}, scopes: map[string]string{}, userAgents: map[string]bool{}}
	var logs syncBuffer
	url := "http://" + addr
	cfg := Config{OTLPEndpoint: url, APIBase: url, APIKey: "k", Seed: 1, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, 10*time.Minute) }()

	time.Sleep(700 * time.Millisecond)
	if !strings.Contains(logs.String(), "waiting for the server") {
		t.Errorf("Run does not say it waits for the server; logs:\n%s", logs.String())
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("reopen %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(c)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	// Wait for the backfill, then one live tick.
	deadline := time.After(20 * time.Second)
	for !strings.Contains(logs.String(), "live traffic started") {
		select {
		case <-deadline:
			t.Fatalf("no live traffic; logs:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.mu.Lock()
	backfilled := len(c.spans)
	c.mu.Unlock()
	time.Sleep(liveTick + 2*time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	// ~10 min × (2 rag-chat × 4 spans + 0.3 agent tasks × ~6 spans) per second.
	if backfilled < 3000 {
		t.Errorf("backfill sent %d spans", backfilled)
	}
	if len(c.spans) <= backfilled {
		t.Errorf("no live spans after the backfill (%d)", len(c.spans))
	}
	var oldest, newest time.Time
	for _, sp := range c.spans {
		ts := time.Unix(0, int64(sp.StartTimeUnixNano))
		if oldest.IsZero() || ts.Before(oldest) {
			oldest = ts
		}
		if ts.After(newest) {
			newest = ts
		}
	}
	if oldest.After(start.Add(-9*time.Minute)) || newest.After(time.Now()) {
		t.Errorf("spans span %v … %v; want 10 min of history and nothing in the future", oldest, newest)
	}
	for _, want := range []string{"backfilling 10m of demo traffic: 50 %", "demo backfill sent"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}
