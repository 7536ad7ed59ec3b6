package assemble

import (
	"testing"

	"github.com/tokenpath/tokenpath/telemetry"
)

// journeyTrace is vLLM journey tracing under a client call: the API
// server's llm_request (id, tokens, its own first-response time) and its
// child llm_core (queue, first token, decode, preemptions).
func journeyTrace() []telemetry.Span {
	api := server("s1", "c1", "vllm-0", 110, 1990, telemetry.LLMCall{ResponseID: "chatcmpl-j",
		InputTokens: n(900), OutputTokens: n(40), ServerTTFT: d(470)})
	core := server("s2", "s1", "vllm-0", 115, 1985, telemetry.LLMCall{QueueTime: d(300), ServerTTFT: d(460),
		DecodeTime: d(1400), Preemptions: n(1)})
	core.Name = "llm_core"
	return []telemetry.Span{
		client("c1", "", 100, 2000, telemetry.LLMCall{Model: "qwen", ClientTTFT: d(500), InputTokens: n(12)}),
		api, core,
	}
}

// The pair is one server record: one request, network known (the pair is
// not two attempts), queue and preemptions from the engine, prefill its
// TTFT less its queue, server TTFT and tokens from the API span. Arriving
// in parts, each part is one request, never two.
func TestJourneyPairIsOneServer(t *testing.T) {
	all := journeyTrace()
	joined := telemetry.LLMRequest{ProjectID: 1, TraceID: "trace-1", SpanID: "c1", Service: "app", ServerService: "vllm", Join: telemetry.JoinTrace,
		Model: "qwen", Provider: "vllm", Instance: "vllm-0", Start: at(100), TTFT: f(500), PreInference: f(0),
		Queue: f(300), Prefill: f(160), Network: f(30), Decode: f(1400), E2E: f(1900), ITL: f(1400.0 / 39),
		InputTokens: n(900), OutputTokens: n(40), Route: "chat", TokenSource: telemetry.TokensFromServer, Preemptions: n(1)}
	assertRequests(t, Traces(all, nil, Options{}), []telemetry.LLMRequest{joined})

	serverOnly := func(span string, start int, r telemetry.LLMRequest) telemetry.LLMRequest {
		r.ProjectID, r.TraceID, r.SpanID, r.Service, r.ServerService, r.Provider, r.Instance, r.Start =
			1, "trace-1", span, "vllm", "vllm", "vllm", "vllm-0", at(start)
		return r
	}
	cases := []struct {
		name  string
		spans []telemetry.Span
		want  telemetry.LLMRequest
	}{
		{"the pair without its client", all[1:], serverOnly("s1", 110, telemetry.LLMRequest{TTFT: f(470), Queue: f(300), Prefill: f(160),
			Decode: f(1400), E2E: f(1880), ITL: f(1400.0 / 39), InputTokens: n(900), OutputTokens: n(40),
			TTFTSource: telemetry.TTFTFromServer, TokenSource: telemetry.TokensFromServer, Preemptions: n(1)})},
		{"the engine span alone (its parent not arrived)", all[2:], serverOnly("s2", 115, telemetry.LLMRequest{TTFT: f(460), Queue: f(300),
			Prefill: f(160), Decode: f(1400), E2E: f(1870), TTFTSource: telemetry.TTFTFromServer, Preemptions: n(1)})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertRequests(t, Traces(c.spans, nil, Options{}), []telemetry.LLMRequest{c.want})
		})
	}
}
