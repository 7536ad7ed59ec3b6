package analysis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// joinRig sends spans through the real OTLP/HTTP receiver, one export per
// span, each span in a trace of its own: the app does not propagate trace
// context to the inference server.
type joinRig struct {
	t   *testing.T
	srv *apptest.Server
}

func (r joinRig) provider(service, instance string) *sdktrace.TracerProvider {
	e := r.srv.TraceExporter(r.t)
	attrs := []attribute.KeyValue{semconv.ServiceName(service)}
	if instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(instance))
	}
	return sdktrace.NewTracerProvider(sdktrace.WithSyncer(e), sdktrace.WithResource(resource.NewSchemaless(attrs...)))
}

// client sends an OpenAI-SDK-like chat span of service app and returns its
// trace id; responseID and tokens are left out when empty or 0.
func (r joinRig) client(app string, start, end time.Time, responseID string, tokens int) string {
	tp := r.provider(app, "")
	attrs := []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", "llama"), attribute.Int("gen_ai.usage.output_tokens", 101),
		attribute.Float64("gen_ai.response.time_to_first_chunk", 0.5), attribute.String("server.address", "vllm.inference.svc.cluster.local"),
		attribute.Int("server.port", 8000)}
	if responseID != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.id", responseID))
	}
	if tokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", tokens))
	}
	_, s := tp.Tracer("app").Start(context.Background(), "chat llama", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
	s.End(trace.WithTimestamp(end))
	if err := tp.Shutdown(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	return s.SpanContext().TraceID().String()
}

// server sends a vLLM V1 llm_request span (no model, as vLLM sends it)
// with no parent, and returns its trace id.
func (r joinRig) server(start, end time.Time, requestID string, tokens int) string {
	tp := r.provider("vllm", "vllm-0")
	attrs := []attribute.KeyValue{attribute.Float64("gen_ai.latency.time_in_queue", 0.2), attribute.Float64("gen_ai.latency.time_in_model_prefill", 0.25),
		attribute.Float64("gen_ai.latency.time_to_first_token", 0.45), attribute.Float64("gen_ai.latency.time_in_model_decode", 1.0),
		attribute.Float64("gen_ai.latency.e2e", 1.45), attribute.Int("gen_ai.usage.prompt_tokens", tokens), attribute.Int("gen_ai.usage.completion_tokens", 101)}
	if requestID != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.id", requestID))
	}
	_, s := tp.Tracer("vllm").Start(context.Background(), "llm_request", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrs...))
	s.End(trace.WithTimestamp(end))
	if err := tp.Shutdown(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	return s.SpanContext().TraceID().String()
}

// traceRequests reads GET /api/v1/traces/{id}'s requests.
func (r joinRig) traceRequests(id string) []map[string]any {
	r.t.Helper()
	var body struct {
		Requests []map[string]any `json:"requests"`
	}
	r.srv.GetJSON(r.t, "/api/v1/traces/"+id, &body)
	return body.Requests
}

func services(rs []map[string]any) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		out[fmt.Sprint(r["service"])]++
	}
	return out
}

// A client call and its vLLM span in another trace, sent in either order
// and assembled in different passes, become one request with the full
// split and join "id"; the vLLM span's internal id suffix is tolerated and
// its missing model comes from the client. A match without ids joins too;
// two candidate clients for one server span join nothing. No request is
// ever counted twice.
func TestJoinAcrossTracesThroughReceiver(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	r := joinRig{t: t, srv: srv}
	base := time.Now().Add(-50 * time.Minute).Truncate(time.Millisecond)
	ms := func(t0 time.Time, n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	wantSplit := map[string]float64{"ttft_ms": 500, "queue_ms": 200, "prefill_ms": 250, "network_ms": 50, "decode_ms": 1000,
		"e2e_ms": 1500, "input_tokens": 800, "output_tokens": 101}
	checkJoined := func(t *testing.T, t0 time.Time, clientTrace, serverTrace, join string) {
		t.Helper()
		var got map[string]any
		waitRequests(t, srv, t0, func(rs []map[string]any) bool {
			if len(rs) == 1 && rs[0]["service"] == "chat-app" && rs[0]["queue_ms"] != nil {
				got = rs[0]
				return true
			}
			return false
		})
		for k, v := range wantSplit {
			if f, ok := got[k].(float64); !ok || f < v-0.001 || f > v+0.001 {
				t.Errorf("%s = %v, want %v", k, got[k], v)
			}
		}
		if got["model"] != "llama" || got["instance"] != "vllm-0" || got["server_service"] != "vllm" {
			t.Errorf("row: %v", got)
		}
		detail := r.traceRequests(clientTrace)
		if len(detail) != 1 || detail[0]["join"] != join || detail[0]["server_trace_id"] != serverTrace {
			t.Errorf("trace API: %v, want join %q to server trace %s", detail, join, serverTrace)
		}
		if rs := r.traceRequests(serverTrace); len(rs) != 0 {
			t.Errorf("server trace still has its own requests: %v", rs)
		}
	}

	t.Run("server first, then client, by id", func(t *testing.T) {
		t0 := base
		st := r.server(ms(t0, 110), ms(t0, 1560), "chatcmpl-7f3a-1a2b3c4d", 800)
		// The server half is assembled alone first: a server-only request.
		waitRequests(t, srv, t0, func(rs []map[string]any) bool { return len(rs) == 1 && rs[0]["service"] == "vllm" })
		ct := r.client("chat-app", ms(t0, 100), ms(t0, 1600), "chatcmpl-7f3a", 800)
		checkJoined(t, t0, ct, st, "id")
	})

	t.Run("client first, then server, by id", func(t *testing.T) {
		t0 := base.Add(10 * time.Minute)
		ct := r.client("chat-app", ms(t0, 100), ms(t0, 1600), "chatcmpl-9c1d", 800)
		waitRequests(t, srv, t0, func(rs []map[string]any) bool { return len(rs) == 1 && rs[0]["service"] == "chat-app" })
		st := r.server(ms(t0, 110), ms(t0, 1560), "chatcmpl-9c1d", 800)
		checkJoined(t, t0, ct, st, "id")
	})

	t.Run("no ids: a unique match", func(t *testing.T) {
		t0 := base.Add(20 * time.Minute)
		st := r.server(ms(t0, 110), ms(t0, 1560), "", 800)
		waitRequests(t, srv, t0, func(rs []map[string]any) bool { return len(rs) == 1 })
		ct := r.client("chat-app", ms(t0, 100), ms(t0, 1600), "", 800)
		checkJoined(t, t0, ct, st, "match")
	})

	t.Run("two candidate clients: no match, three requests", func(t *testing.T) {
		t0 := base.Add(30 * time.Minute)
		r.client("chat-app", ms(t0, 100), ms(t0, 1600), "", 800)
		r.client("chat-app", ms(t0, 50), ms(t0, 1700), "", 800)
		r.server(ms(t0, 110), ms(t0, 1560), "", 800)
		var got []map[string]any
		waitRequests(t, srv, t0, func(rs []map[string]any) bool { got = rs; return len(rs) == 3 })
		// Give later passes the chance to (wrongly) pair them.
		time.Sleep(3 * time.Second)
		waitRequests(t, srv, t0, func(rs []map[string]any) bool { got = rs; return len(rs) == 3 })
		if s := services(got); s["chat-app"] != 2 || s["vllm"] != 1 {
			t.Errorf("services %v, want 2 chat-app and 1 vllm", s)
		}
		for _, q := range got {
			if q["service"] == "chat-app" && q["queue_ms"] != nil {
				t.Errorf("an ambiguous client took the server span: %v", q)
			}
		}
	})

	t.Run("a matched server keeps its client when a second candidate arrives later", func(t *testing.T) {
		t0 := base.Add(40 * time.Minute)
		st := r.server(ms(t0, 110), ms(t0, 1560), "", 800)
		ct := r.client("chat-app", ms(t0, 100), ms(t0, 1600), "", 800)
		checkJoined(t, t0, ct, st, "match")
		r.client("chat-app", ms(t0, 50), ms(t0, 1700), "", 800)
		var got []map[string]any
		waitRequests(t, srv, t0, func(rs []map[string]any) bool { got = rs; return len(rs) == 2 })
		time.Sleep(3 * time.Second)
		waitRequests(t, srv, t0, func(rs []map[string]any) bool { got = rs; return len(rs) == 2 })
		if s := services(got); s["chat-app"] != 2 {
			t.Errorf("services %v, want 2 chat-app requests and no server-only one", s)
		}
		if d := r.traceRequests(ct); len(d) != 1 || d[0]["join"] != "match" {
			t.Errorf("first client lost its match: %v", d)
		}
	})

	// Coverage over all the cases above: per service, what was split and
	// how it was joined; the inference service's diagnosis says its
	// coverage is thin.
	t.Run("coverage", func(t *testing.T) {
		q := fmt.Sprintf("from=%s&to=%s", base.Add(-time.Minute).Format(time.RFC3339), base.Add(45*time.Minute).Format(time.RFC3339))
		var cov struct {
			Services []struct {
				Service         string           `json:"service"`
				Producers       []string         `json:"producers"`
				Requests        int64            `json:"requests"`
				ClientTTFT      int64            `json:"client_ttft"`
				ServerSplit     int64            `json:"server_split"`
				JoinedBy        map[string]int64 `json:"joined_by"`
				ClientOnly      int64            `json:"client_only"`
				UnmatchedServer int64            `json:"unmatched_server_spans"`
				Advice          string           `json:"advice"`
			} `json:"services"`
		}
		r.srv.GetJSON(r.t, "/api/v1/coverage?"+q, &cov)
		got := map[string]int{}
		for i, c := range cov.Services {
			got[c.Service] = i
		}
		app, ok := got["chat-app"]
		if !ok {
			t.Fatalf("no chat-app coverage: %+v", cov)
		}
		a := cov.Services[app]
		if a.Requests != 7 || a.ClientTTFT != 7 || a.ServerSplit != 4 || a.JoinedBy["id"] != 2 || a.JoinedBy["match"] != 2 || a.ClientOnly != 3 {
			t.Errorf("chat-app coverage %+v", a)
		}
		if len(a.Producers) != 1 || a.Producers[0] != "OTel GenAI semantic conventions" {
			t.Errorf("chat-app producers %q", a.Producers)
		}
		v := cov.Services[got["vllm"]]
		if v.Service != "vllm" || v.Requests != 1 || v.UnmatchedServer != 1 || v.ServerSplit != 1 || v.ClientTTFT != 0 ||
			len(v.Producers) != 1 || v.Producers[0] != "vLLM" || v.Advice == "" {
			t.Errorf("vllm coverage %+v", v)
		}
		var d struct {
			Evidence []struct {
				Text string `json:"text"`
			} `json:"evidence"`
			Coverage []json.RawMessage `json:"coverage"`
		}
		r.srv.GetJSON(r.t, "/api/v1/diagnose?service=vllm&"+q, &d)
		thin := false
		for _, e := range d.Evidence {
			thin = thin || strings.HasPrefix(e.Text, "Thin coverage: 0% of vllm's 1 requests have a client TTFT")
		}
		if !thin || len(d.Coverage) != 1 {
			t.Errorf("diagnosis of vllm: evidence %+v, coverage %d services; want a thin-coverage line and one service", d.Evidence, len(d.Coverage))
		}
	})
}
