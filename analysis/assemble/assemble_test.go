package assemble

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// at is t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func d(ms int) *time.Duration { v := time.Duration(ms) * time.Millisecond; return &v }
func f(v float64) *float64    { return &v }
func n(v int64) *int64        { return &v }

// app builds a non-LLM span of trace "trace-1" in project 1.
func app(id, parent, service, name string, start, end int, attrs ...string) telemetry.Span {
	s := telemetry.Span{
		ProjectID:    1,
		TraceID:      "trace-1",
		SpanID:       id,
		ParentSpanID: parent,
		Service:      service,
		Instance:     service + "-pod",
		Name:         name,
		Start:        at(start),
		End:          at(end),
		StatusCode:   "ok",
	}
	if len(attrs) > 0 {
		s.Attributes = map[string]string{}
		for i := 0; i+1 < len(attrs); i += 2 {
			s.Attributes[attrs[i]] = attrs[i+1]
		}
	}
	return s
}

// client builds an LLM client span in service "app".
func client(id, parent string, start, end int, llm telemetry.LLMCall, attrs ...string) telemetry.Span {
	s := app(id, parent, "app", "chat", start, end, attrs...)
	llm.Role = telemetry.LLMClient
	s.LLM = llm
	return s
}

// server builds a vLLM server span in service "vllm".
func server(id, parent, instance string, start, end int, llm telemetry.LLMCall) telemetry.Span {
	s := app(id, parent, "vllm", "llm_request", start, end)
	s.Instance = instance
	llm.Role = telemetry.LLMServer
	if llm.Provider == "" {
		llm.Provider = "vllm"
	}
	s.LLM = llm
	return s
}

// vllmTrace is an app request that retrieves documents, then calls a
// self-hosted model through a gateway.
func vllmTrace() []telemetry.Span {
	return []telemetry.Span{
		app("r1", "", "app", "POST /chat", 0, 2500, "http.route", "/chat", "tenant", "acme"),
		app("rt", "r1", "app", "retrieve", 10, 110),
		client("c1", "r1", 120, 2120, telemetry.LLMCall{Provider: "openai", Model: "llama-3-8b",
			ClientTTFT: d(450), InputTokens: n(1200), OutputTokens: n(101)}),
		app("g1", "c1", "gateway", "POST /v1/chat/completions", 125, 2115),
		server("s1", "g1", "vllm-0", 150, 2100, telemetry.LLMCall{Model: "meta-llama/Meta-Llama-3-8B",
			QueueTime: d(50), PrefillTime: d(300), ServerTTFT: d(380), DecodeTime: d(1500), ServerE2E: d(1950),
			InputTokens: n(1200), OutputTokens: n(101)}),
	}
}

// vllmWant is the decomposition of vllmTrace.
func vllmWant() telemetry.LLMRequest {
	return telemetry.LLMRequest{
		ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
		Model: "llama-3-8b", Provider: "openai", Instance: "vllm-0", Start: at(120),
		TTFT: f(450), PreInference: f(120), Queue: f(50), Prefill: f(300), Network: f(70),
		Decode: f(1550), E2E: f(2000), ITL: f(15.5), InputTokens: n(1200), OutputTokens: n(101),
		Route: "/chat", Tenant: "acme", TokenSource: telemetry.TokensFromServer,
	}
}

// edit returns spans with the span of the given id changed by fn.
func edit(spans []telemetry.Span, id string, fn func(*telemetry.Span)) []telemetry.Span {
	out := slices.Clone(spans)
	for i := range out {
		if out[i].SpanID == id {
			fn(&out[i])
		}
	}
	return out
}

// coldTrace is a request held 8 s before the server span starts on vllm-7.
func coldTrace() []telemetry.Span {
	return []telemetry.Span{
		app("r1", "", "app", "POST /chat", 0, 10000, "http.route", "/chat"),
		client("c1", "r1", 100, 9600, telemetry.LLMCall{Model: "llama-3-8b", ClientTTFT: d(8500), OutputTokens: n(21)}),
		server("s1", "c1", "vllm-7", 8100, 9550, telemetry.LLMCall{QueueTime: d(20), PrefillTime: d(330),
			ServerTTFT: d(400), DecodeTime: d(1100), OutputTokens: n(21)}),
	}
}

// scaleTrace: the client span is the root; the server span starts 5 s late.
func scaleTrace() []telemetry.Span {
	return []telemetry.Span{
		client("c1", "", 0, 7000, telemetry.LLMCall{Model: "llama-3-8b", ClientTTFT: d(5600)}),
		server("s1", "c1", "vllm-3", 5000, 6900, telemetry.LLMCall{QueueTime: d(0), PrefillTime: d(500),
			ServerTTFT: d(500), DecodeTime: d(1400)}),
	}
}

func scaleWant(cold bool) telemetry.LLMRequest {
	r := telemetry.LLMRequest{
		ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
		Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-3", Start: at(0),
		TTFT: f(5600), PreInference: f(0), Queue: f(0), Prefill: f(500), Network: f(5100),
		Decode: f(1400), E2E: f(7000), Route: "chat",
	}
	if cold {
		r.ColdStart, r.ColdStartWait, r.Network = true, f(5000), f(100)
	}
	return r
}

func scale(project uint32, service string, ms int, from, to int32) telemetry.Event {
	return telemetry.Event{ProjectID: project, Time: at(ms), Kind: telemetry.EventScale, Service: service,
		FromReplicas: telemetry.Ptr(from), ToReplicas: telemetry.Ptr(to)}
}

func firstSeen(instance string, ms int) *InstanceHistory {
	return &InstanceHistory{FirstSeen: map[string]time.Time{InstanceKey("vllm", instance): at(ms)}}
}

func TestTraces(t *testing.T) {
	tests := []struct {
		name  string
		spans []telemetry.Span
		hist  *InstanceHistory
		opt   Options
		want  []telemetry.LLMRequest
	}{
		{
			name:  "vllm-backed request through a gateway",
			spans: vllmTrace(),
			hist:  firstSeen("vllm-0", -3_600_000),
			want:  []telemetry.LLMRequest{vllmWant()},
		},
		{
			name: "server span without prefill: prefill = server ttft - queue; model and provider from server",
			spans: edit(edit(vllmTrace(), "s1", func(s *telemetry.Span) { s.LLM.PrefillTime = nil }),
				"c1", func(s *telemetry.Span) { s.LLM.Model, s.LLM.Provider = "", "" }),
			want: func() []telemetry.LLMRequest {
				r := vllmWant()
				r.Prefill, r.Model, r.Provider = f(330), "meta-llama/Meta-Llama-3-8B", "vllm"
				return []telemetry.LLMRequest{r}
			}(),
		},
		{
			name: "server span with ttft only: queue and prefill unknown",
			spans: edit(vllmTrace(), "s1", func(s *telemetry.Span) {
				s.LLM.PrefillTime, s.LLM.QueueTime = nil, nil
			}),
			want: func() []telemetry.LLMRequest {
				r := vllmWant()
				r.Queue, r.Prefill = nil, nil
				return []telemetry.LLMRequest{r}
			}(),
		},
		{
			name: "managed API: no server span, the split stays bundled",
			spans: []telemetry.Span{
				app("r1", "", "app", "handle", 0, 3500, "tenant", "root-tenant"),
				client("c1", "r1", 120, 3120, telemetry.LLMCall{Provider: "openai", Model: "gpt-4o",
					ClientTTFT: d(600), InputTokens: n(900), OutputTokens: n(51)}, "user.id", "u-7"),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", Model: "gpt-4o", Provider: "openai",
				Start: at(120), TTFT: f(600), PreInference: f(120), Decode: f(2400), E2E: f(3000), ITL: f(48),
				InputTokens: n(900), OutputTokens: n(51), Route: "handle", Tenant: "u-7", TokenSource: telemetry.TokensFromClient,
			}},
		},
		{
			name: "managed API without streaming: no ttft, no decode; error status",
			spans: []telemetry.Span{
				func() telemetry.Span {
					s := client("c1", "", 0, 1500, telemetry.LLMCall{Provider: "anthropic", Model: "claude", OutputTokens: n(40), ErrorType: "OverloadedError"})
					s.StatusCode = "error"
					return s
				}(),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", Model: "claude", Provider: "anthropic",
				Start: at(0), PreInference: f(0), E2E: f(1500), OutputTokens: n(40), Error: true, ErrorType: "OverloadedError", Route: "chat",
				TokenSource: telemetry.TokensFromClient,
			}},
		},
		{
			name: "agent loop: three calls in one trace, given in reverse order",
			spans: func() []telemetry.Span {
				s := []telemetry.Span{
					app("r1", "", "app", "agent.run", 0, 7000),
					client("c9", "r1", 100, 1100, telemetry.LLMCall{Model: "llama-3-8b", ClientTTFT: d(200), OutputTokens: n(11)}),
					server("s9", "c9", "vllm-0", 110, 1090, telemetry.LLMCall{QueueTime: d(10), PrefillTime: d(90),
						ServerTTFT: d(100), DecodeTime: d(880)}),
					app("t1", "r1", "app", "tool.search", 1100, 2000),
					client("c5", "r1", 2100, 4100, telemetry.LLMCall{Model: "llama-3-8b", ClientTTFT: d(300)}),
					server("s5", "c5", "vllm-1", 2120, 4090, telemetry.LLMCall{QueueTime: d(20), ServerTTFT: d(250)}),
					client("c1", "r1", 5100, 6100, telemetry.LLMCall{Provider: "anthropic", Model: "claude",
						ClientTTFT: d(400), OutputTokens: n(5)}),
				}
				slices.Reverse(s)
				return s
			}(),
			want: []telemetry.LLMRequest{
				{ProjectID: 1, TraceID: "trace-1", SpanID: "c9", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
					Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-0", Start: at(100),
					TTFT: f(200), PreInference: f(100), Queue: f(10), Prefill: f(90), Network: f(100),
					Decode: f(800), E2E: f(1000), ITL: f(80), OutputTokens: n(11), CallIndex: 0, Route: "agent.run",
					TokenSource: telemetry.TokensFromClient},
				{ProjectID: 1, TraceID: "trace-1", SpanID: "c5", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
					Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-1", Start: at(2100),
					TTFT: f(300), PreInference: f(1100), Queue: f(20), Prefill: f(230), Network: f(50),
					Decode: f(1700), E2E: f(2000), CallIndex: 1, Route: "agent.run"},
				// 5100 ms after the root, 3000 of them in the two calls before.
				{ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app",
					Model: "claude", Provider: "anthropic", Start: at(5100),
					TTFT: f(400), PreInference: f(2100), Decode: f(600), E2E: f(1000), ITL: f(150),
					OutputTokens: n(5), CallIndex: 2, Route: "agent.run", TokenSource: telemetry.TokensFromClient},
			},
		},
		{
			// Two calls in parallel (500–2500 and 1000–3000 overlap by
			// 1500 ms): the union, 2500 ms, is subtracted once, not 4000.
			name: "agent loop with parallel calls: their overlap counts once",
			spans: []telemetry.Span{
				app("r1", "", "app", "agent.run", 0, 6000),
				client("p1", "r1", 500, 2500, telemetry.LLMCall{Model: "gpt-4o", ClientTTFT: d(100)}),
				client("p2", "r1", 1000, 3000, telemetry.LLMCall{Model: "gpt-4o", ClientTTFT: d(100)}),
				app("t1", "r1", "app", "tool.merge", 3000, 3400),
				client("p3", "r1", 3500, 4500, telemetry.LLMCall{Model: "gpt-4o", ClientTTFT: d(100)}),
			},
			want: []telemetry.LLMRequest{
				{ProjectID: 1, TraceID: "trace-1", SpanID: "p1", Service: "app", Model: "gpt-4o", Start: at(500),
					TTFT: f(100), PreInference: f(500), Decode: f(1900), E2E: f(2000), CallIndex: 0, Route: "agent.run"},
				// started during p1: only the part of p1 before it (500 ms) is not its own time
				{ProjectID: 1, TraceID: "trace-1", SpanID: "p2", Service: "app", Model: "gpt-4o", Start: at(1000),
					TTFT: f(100), PreInference: f(500), Decode: f(1900), E2E: f(2000), CallIndex: 1, Route: "agent.run"},
				{ProjectID: 1, TraceID: "trace-1", SpanID: "p3", Service: "app", Model: "gpt-4o", Start: at(3500),
					TTFT: f(100), PreInference: f(1000), Decode: f(900), E2E: f(1000), CallIndex: 2, Route: "agent.run"},
			},
		},
		{
			name: "missing root: pre-inference and route unknown",
			spans: []telemetry.Span{
				app("rt", "gone", "app", "retrieve", 0, 100),
				client("c1", "gone", 120, 1120, telemetry.LLMCall{Model: "llama-3-8b", ClientTTFT: d(300)}, "tenant.id", "t-9"),
				server("s1", "c1", "vllm-0", 130, 1100, telemetry.LLMCall{QueueTime: d(20), ServerTTFT: d(250)}),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
				Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-0", Start: at(120),
				TTFT: f(300), Queue: f(20), Prefill: f(230), Network: f(50), Decode: f(700), E2E: f(1000),
				Tenant: "t-9",
			}},
		},
		{
			name: "missing intermediate span: the root is still the root",
			spans: []telemetry.Span{
				app("r1", "", "app", "POST /x", 0, 2000, "http.route", "/x"),
				client("c1", "h-missing", 300, 1300, telemetry.LLMCall{Provider: "openai", ClientTTFT: d(200)}),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", Provider: "openai", Start: at(300),
				TTFT: f(200), PreInference: f(300), Decode: f(800), E2E: f(1000), Route: "/x",
			}},
		},
		{
			name: "server span only: its own request",
			spans: []telemetry.Span{
				server("s1", "c-missing", "vllm-0", 0, 1500, telemetry.LLMCall{Model: "llama-3-8b", QueueTime: d(30),
					PrefillTime: d(120), ServerTTFT: d(150), DecodeTime: d(1300), ServerE2E: d(1480),
					InputTokens: n(500), OutputTokens: n(66)}),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "s1", Service: "vllm", ServerService: "vllm",
				Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-0", Start: at(0),
				TTFT: f(150), Queue: f(30), Prefill: f(120), Decode: f(1300), E2E: f(1480), ITL: f(20),
				InputTokens: n(500), OutputTokens: n(66), TTFTSource: telemetry.TTFTFromServer, TokenSource: telemetry.TokensFromServer,
			}},
		},
		{
			name: "server span as trace root: nothing known about its caller",
			spans: []telemetry.Span{
				server("s1", "", "vllm-0", 0, 900, telemetry.LLMCall{ServerTTFT: d(100)}),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "s1", Service: "vllm", ServerService: "vllm",
				Provider: "vllm", Instance: "vllm-0", Start: at(0), TTFT: f(100), E2E: f(900), TTFTSource: telemetry.TTFTFromServer,
			}},
		},
		{
			name: "server span under an app root without client span: pre-inference from the root",
			spans: []telemetry.Span{
				app("r1", "", "app", "POST /summarize", 0, 2000, "http.route", "/summarize"),
				app("h1", "r1", "app", "POST", 180, 1800),
				server("s1", "h1", "vllm-0", 200, 1700, telemetry.LLMCall{ServerTTFT: d(100), DecodeTime: d(1400)}),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "s1", Service: "vllm", ServerService: "vllm",
				Provider: "vllm", Instance: "vllm-0", Start: at(200), TTFT: f(100), PreInference: f(200),
				Decode: f(1400), E2E: f(1500), Route: "/summarize", TTFTSource: telemetry.TTFTFromServer,
			}},
		},
		{
			name:  "cold start: new instance, request held 8 s",
			spans: coldTrace(),
			hist:  firstSeen("vllm-7", -10_000),
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
				Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-7", Start: at(100),
				TTFT: f(8500), PreInference: f(100), Queue: f(20), Prefill: f(330), Network: f(100),
				Decode: f(1000), E2E: f(9500), ITL: f(50), ColdStartWait: f(8000), OutputTokens: n(21),
				ColdStart: true, Route: "/chat", TokenSource: telemetry.TokensFromServer,
			}},
		},
		{
			name:  "held, but the instance is old: not a cold start, the gap stays in network",
			spans: coldTrace(),
			hist:  firstSeen("vllm-7", -3_600_000),
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
				Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-7", Start: at(100),
				TTFT: f(8500), PreInference: f(100), Queue: f(20), Prefill: f(330), Network: f(8100),
				Decode: f(1000), E2E: f(9500), ITL: f(50), OutputTokens: n(21), Route: "/chat", TokenSource: telemetry.TokensFromServer,
			}},
		},
		{
			name:  "cold start window is an option",
			spans: coldTrace(),
			hist:  firstSeen("vllm-7", -10_000),
			opt:   Options{ColdStartWindow: 5 * time.Second},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
				Model: "llama-3-8b", Provider: "vllm", Instance: "vllm-7", Start: at(100),
				TTFT: f(8500), PreInference: f(100), Queue: f(20), Prefill: f(330), Network: f(8100),
				Decode: f(1000), E2E: f(9500), ITL: f(50), OutputTokens: n(21), Route: "/chat", TokenSource: telemetry.TokensFromServer,
			}},
		},
		{
			name:  "scale from zero",
			spans: scaleTrace(),
			hist:  &InstanceHistory{Events: []telemetry.Event{scale(1, "vllm", -30_000, 0, 1)}},
			want:  []telemetry.LLMRequest{scaleWant(true)},
		},
		{
			name:  "instance_started event for this instance",
			spans: scaleTrace(),
			hist: &InstanceHistory{Events: []telemetry.Event{{ProjectID: 1, Time: at(-5000),
				Kind: telemetry.EventInstanceStarted, Service: "vllm", Instance: "vllm-3"}}},
			want: []telemetry.LLMRequest{scaleWant(true)},
		},
		{
			name:  "first seen just after the span start still counts as new",
			spans: scaleTrace(),
			hist:  firstSeen("vllm-3", 5500),
			want:  []telemetry.LLMRequest{scaleWant(true)},
		},
		{
			name:  "held, but no scale-up that applies: scale-down, too old, other service, other project, other instance, unknown from",
			spans: scaleTrace(),
			hist: &InstanceHistory{
				FirstSeen: map[string]time.Time{InstanceKey("vllm", "vllm-9"): at(-1000)},
				Events: []telemetry.Event{
					scale(1, "vllm", -30_000, 3, 1),
					scale(1, "vllm", -600_000, 0, 1),
					scale(1, "other", -10_000, 0, 2),
					scale(2, "vllm", -10_000, 0, 2),
					scale(1, "vllm", 10_000, 0, 2), // after the request
					{ProjectID: 1, Time: at(-5000), Kind: telemetry.EventInstanceStarted, Service: "vllm", Instance: "vllm-9"},
					{ProjectID: 1, Time: at(-5000), Kind: telemetry.EventScale, Service: "vllm", ToReplicas: telemetry.Ptr[int32](2)},
				},
			},
			want: []telemetry.LLMRequest{scaleWant(false)},
		},
		{
			name:  "not held: a brand-new instance alone is not a cold start",
			spans: vllmTrace(),
			hist:  firstSeen("vllm-0", -5000),
			want:  []telemetry.LLMRequest{vllmWant()},
		},
		{
			name:  "minimum hold is an option",
			spans: vllmTrace(),
			hist:  firstSeen("vllm-0", -5000),
			opt:   Options{MinHold: 10 * time.Millisecond},
			want: func() []telemetry.LLMRequest {
				r := vllmWant()
				r.ColdStart, r.ColdStartWait, r.Network = true, f(30), f(40)
				return []telemetry.LLMRequest{r}
			}(),
		},
		{
			name: "no client span: a long queue on a new instance is not a cold start",
			spans: []telemetry.Span{
				server("s1", "c-missing", "vllm-5", 0, 7000, telemetry.LLMCall{QueueTime: d(6000), PrefillTime: d(200),
					ServerTTFT: d(6200), DecodeTime: d(700), ServerE2E: d(6950)}),
			},
			hist: firstSeen("vllm-5", -1000),
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "s1", Service: "vllm", ServerService: "vllm",
				Provider: "vllm", Instance: "vllm-5", Start: at(0), TTFT: f(6200), Queue: f(6000),
				Prefill: f(200), Decode: f(700), E2E: f(6950), TTFTSource: telemetry.TTFTFromServer,
			}},
		},
		{
			name:  "clock skew under 5 ms reads as zero network",
			spans: edit(vllmTrace(), "s1", func(s *telemetry.Span) { s.LLM.ServerTTFT = d(453) }),
			want: func() []telemetry.LLMRequest {
				r := vllmWant()
				r.Network = f(0)
				return []telemetry.LLMRequest{r}
			}(),
		},
		{
			name:  "clock skew of 20 ms leaves network unknown",
			spans: edit(vllmTrace(), "s1", func(s *telemetry.Span) { s.LLM.ServerTTFT = d(470) }),
			want: func() []telemetry.LLMRequest {
				r := vllmWant()
				r.Network = nil
				return []telemetry.LLMRequest{r}
			}(),
		},
		{
			name: "server retries: the last attempt to finish serves, network unknown",
			spans: []telemetry.Span{
				client("c1", "", 120, 2120, telemetry.LLMCall{ClientTTFT: d(450)}),
				func() telemetry.Span {
					s := server("sa", "c1", "vllm-0", 130, 600, telemetry.LLMCall{QueueTime: d(10), ServerTTFT: d(380)})
					s.StatusCode = "error"
					return s
				}(),
				server("sb", "c1", "vllm-1", 700, 2100, telemetry.LLMCall{QueueTime: d(5), PrefillTime: d(200), ServerTTFT: d(205)}),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
				Provider: "vllm", Instance: "vllm-1", Start: at(120), TTFT: f(450), PreInference: f(0),
				Queue: f(5), Prefill: f(200), Decode: f(1550), E2E: f(2000), Route: "chat",
			}},
		},
		{
			name: "nested client spans (framework over SDK) are one call, seen from the outermost",
			spans: []telemetry.Span{
				app("r1", "", "app", "POST /chat", 0, 2500),
				client("c1", "r1", 120, 2120, telemetry.LLMCall{Model: "llama-3-8b"}),
				client("c2", "c1", 130, 2110, telemetry.LLMCall{Provider: "openai", ClientTTFT: d(400), OutputTokens: n(101)}),
				server("s1", "c2", "vllm-0", 150, 2100, telemetry.LLMCall{QueueTime: d(50), PrefillTime: d(300), ServerTTFT: d(380)}),
			},
			want: []telemetry.LLMRequest{{
				ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
				Model: "llama-3-8b", Provider: "openai", Instance: "vllm-0", Start: at(120),
				TTFT: f(410), PreInference: f(120), Queue: f(50), Prefill: f(300), Network: f(30),
				Decode: f(1590), E2E: f(2000), ITL: f(15.9), OutputTokens: n(101), Route: "POST /chat",
				TokenSource: telemetry.TokensFromClient,
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Traces(tt.spans, tt.hist, tt.opt)
			assertRequests(t, got, tt.want)
			// Trace on one trace gives the same rows.
			assertRequests(t, Trace(tt.spans, tt.hist, tt.opt), tt.want)
		})
	}
}

func assertRequests(t *testing.T, got, want []telemetry.LLMRequest) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		for _, diff := range diffRequest(got[i], want[i]) {
			t.Errorf("request %d (%s): %s", i, want[i].SpanID, diff)
		}
	}
}

// diffRequest compares field by field, figures to a microsecond.
func diffRequest(got, want telemetry.LLMRequest) []string {
	var diffs []string
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		name := g.Type().Field(i).Name
		gf, wf := g.Field(i).Interface(), w.Field(i).Interface()
		switch gv := gf.(type) {
		case *float64:
			wv := wf.(*float64)
			switch {
			case gv == nil && wv == nil:
			case gv == nil || wv == nil:
				diffs = append(diffs, fmt.Sprintf("%s = %s, want %s", name, show(gv), show(wv)))
			case math.Abs(*gv-*wv) > 1e-3:
				diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", name, *gv, *wv))
			}
		case time.Time:
			if !gv.Equal(wf.(time.Time)) {
				diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", name, gv, wf))
			}
		default:
			if !reflect.DeepEqual(gf, wf) {
				diffs = append(diffs, fmt.Sprintf("%s = %s, want %s", name, show(gf), show(wf)))
			}
		}
	}
	return diffs
}

func show(v any) string {
	switch p := v.(type) {
	case *float64:
		if p != nil {
			return fmt.Sprint(*p)
		}
		return "nil"
	case *int64:
		if p != nil {
			return fmt.Sprint(*p)
		}
		return "nil"
	}
	return fmt.Sprintf("%q", fmt.Sprint(v))
}
