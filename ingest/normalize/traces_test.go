package normalize

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TestTracesConventions feeds one span per wire convention, with the
// attribute set that convention's SDK or server really emits, and asserts
// every canonical field.
func TestTracesConventions(t *testing.T) {
	tests := []struct {
		name string
		span *tracepb.Span
		want telemetry.LLMCall
	}{
		{
			name: "OTel GenAI semconv 1.37+ (provider.name, input_tokens, time_to_first_chunk)",
			span: newSpan("chat gpt-4o",
				str("gen_ai.operation.name", "chat"),
				str("gen_ai.provider.name", "openai"),
				str("gen_ai.request.model", "gpt-4o"),
				str("gen_ai.response.model", "gpt-4o-2024-08-06"),
				str("gen_ai.response.id", "chatcmpl-AYjTqv1rX3w4"),
				kv("gen_ai.response.finish_reasons", arr(sv("stop"))),
				i64("gen_ai.usage.input_tokens", 1200),
				i64("gen_ai.usage.output_tokens", 85),
				f64("gen_ai.response.time_to_first_chunk", 0.61),
				str("server.address", "api.openai.com"),
			),
			want: telemetry.LLMCall{
				Role: telemetry.LLMClient, Provider: "openai", Model: "gpt-4o-2024-08-06", Operation: "chat",
				InputTokens: cnt(1200), OutputTokens: cnt(85), ClientTTFT: dur(610 * time.Millisecond),
				TTFTSource: "gen_ai.response.time_to_first_chunk", ResponseID: "chatcmpl-AYjTqv1rX3w4",
				ServerAddress: "api.openai.com",
			},
		},
		{
			name: "OTel GenAI semconv before 1.27 (gen_ai.system, prompt_tokens)",
			span: newSpan("anthropic.chat",
				str("gen_ai.system", "anthropic"),
				str("gen_ai.request.model", "claude-3-5-sonnet-20241022"),
				i64("gen_ai.request.max_tokens", 1024),
				i64("gen_ai.usage.prompt_tokens", 5000),
				i64("gen_ai.usage.completion_tokens", 300),
			),
			want: telemetry.LLMCall{
				Role: telemetry.LLMClient, Provider: "anthropic", Model: "claude-3-5-sonnet-20241022",
				InputTokens: cnt(5000), OutputTokens: cnt(300),
			},
		},
		{
			name: "vLLM llm_request server span (vllm/tracing.py SpanAttributes)",
			span: func() *tracepb.Span {
				s := newSpan("llm_request",
					str("gen_ai.response.model", "meta-llama/Llama-3.1-8B-Instruct"),
					str("gen_ai.request.id", "cmpl-bench-00871b8e-0-0"),
					f64("gen_ai.request.temperature", 1),
					f64("gen_ai.request.top_p", 1),
					i64("gen_ai.request.max_tokens", 32),
					i64("gen_ai.request.n", 1),
					i64("gen_ai.usage.prompt_tokens", 384),
					i64("gen_ai.usage.completion_tokens", 32),
					f64("gen_ai.latency.time_in_queue", 0.001),
					f64("gen_ai.latency.time_to_first_token", 1.325),
					f64("gen_ai.latency.e2e", 1.976),
					f64("gen_ai.latency.time_in_model_prefill", 1.281),
					f64("gen_ai.latency.time_in_model_decode", 0.654),
					f64("gen_ai.latency.time_in_model_inference", 1.935),
				)
				s.Kind = tracepb.Span_SPAN_KIND_SERVER
				return s
			}(),
			want: telemetry.LLMCall{
				Role: telemetry.LLMServer, Model: "meta-llama/Llama-3.1-8B-Instruct",
				InputTokens: cnt(384), OutputTokens: cnt(32),
				QueueTime: dur(time.Millisecond), PrefillTime: dur(1281 * time.Millisecond),
				ServerTTFT: dur(1325 * time.Millisecond), DecodeTime: dur(654 * time.Millisecond),
				ServerE2E: dur(1976 * time.Millisecond), ResponseID: "cmpl-bench-00871b8e-0-0",
			},
		},
		{
			name: "vLLM span with gen_ai.request.model only; a first-token event does not make a client TTFT",
			span: func() *tracepb.Span {
				s := newSpan("llm_request",
					str("gen_ai.request.model", "Qwen/Qwen2.5-7B-Instruct"),
					i64("gen_ai.usage.prompt_tokens", 2048),
					f64("gen_ai.latency.time_in_queue", 1.9),
					f64("gen_ai.latency.time_to_first_token", 2.2),
				)
				s.Events = []*tracepb.Span_Event{{Name: "first_token", TimeUnixNano: ns(start.Add(time.Second))}}
				return s
			}(),
			want: telemetry.LLMCall{
				Role: telemetry.LLMServer, Model: "Qwen/Qwen2.5-7B-Instruct", InputTokens: cnt(2048),
				QueueTime: dur(1900 * time.Millisecond), ServerTTFT: dur(2200 * time.Millisecond),
			},
		},
		{
			name: "OpenLIT streamed (gen_ai.server.time_to_first_token, after the headers)",
			span: newSpan("chat gpt-4o-mini",
				str("gen_ai.system", "openai"),
				str("gen_ai.operation.name", "chat"),
				str("gen_ai.request.model", "gpt-4o-mini"),
				str("gen_ai.response.model", "gpt-4o-mini-2024-07-18"),
				i64("gen_ai.usage.input_tokens", 742),
				i64("gen_ai.usage.output_tokens", 118),
				f64("gen_ai.server.time_to_first_token", 0.42),
				f64("gen_ai.server.time_per_output_token", 0.012),
				boolean("gen_ai.request.stream", true),
				str("gen_ai.response.id", "chatcmpl-B9x"),
				str("server.address", "api.openai.com"),
				i64("server.port", 443),
				str("telemetry.sdk.name", "openlit"),
			),
			want: telemetry.LLMCall{
				Role: telemetry.LLMClient, Provider: "openai", Model: "gpt-4o-mini-2024-07-18", Operation: "chat",
				InputTokens: cnt(742), OutputTokens: cnt(118), ClientTTFT: dur(420 * time.Millisecond),
				TTFTSource: "gen_ai.server.time_to_first_token" + telemetry.TTFTAfterHeaders,
				ResponseID: "chatcmpl-B9x", ServerAddress: "api.openai.com", ServerPort: 443,
			},
		},
		{
			// OpenLIT sets its TTFT to the whole duration when not streaming.
			name: "OpenLIT not streamed: its TTFT key is the duration, not a TTFT",
			span: newSpan("chat gpt-4o-mini",
				str("gen_ai.system", "openai"),
				str("gen_ai.operation.name", "chat"),
				str("gen_ai.request.model", "gpt-4o-mini"),
				f64("gen_ai.server.time_to_first_token", 1.9),
				boolean("gen_ai.request.stream", false),
			),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", Model: "gpt-4o-mini", Operation: "chat"},
		},
		{
			name: "OpenLLMetry (llm.request.type, llm.usage.*, capitalized gen_ai.system)",
			span: newSpan("openai.chat",
				str("llm.request.type", "chat"),
				str("gen_ai.system", "OpenAI"),
				str("gen_ai.request.model", "gpt-3.5-turbo"),
				str("gen_ai.response.model", "gpt-3.5-turbo-0125"),
				boolean("llm.is_streaming", false),
				i64("llm.usage.prompt_tokens", 57),
				i64("llm.usage.completion_tokens", 12),
				i64("llm.usage.total_tokens", 69),
				str("gen_ai.prompt.0.role", "user"),
			),
			want: telemetry.LLMCall{
				Role: telemetry.LLMClient, Provider: "openai", Model: "gpt-3.5-turbo-0125", Operation: "chat",
				InputTokens: cnt(57), OutputTokens: cnt(12),
			},
		},
		{
			name: "OpenInference (span.kind LLM, llm.model_name, token_count, First Token Stream Event)",
			span: func() *tracepb.Span {
				s := newSpan("ChatCompletion",
					str("openinference.span.kind", "LLM"),
					str("llm.model_name", "gpt-4-0613"),
					str("llm.provider", "openai"),
					str("llm.system", "openai"),
					str("llm.invocation_parameters", `{"temperature": 0.1, "stream": true}`),
					i64("llm.token_count.prompt", 18),
					i64("llm.token_count.completion", 7),
					i64("llm.token_count.total", 25),
					str("input.mime_type", "application/json"),
				)
				s.Events = []*tracepb.Span_Event{{Name: "First Token Stream Event", TimeUnixNano: ns(start.Add(350 * time.Millisecond))}}
				return s
			}(),
			want: telemetry.LLMCall{
				Role: telemetry.LLMClient, Provider: "openai", Model: "gpt-4-0613",
				InputTokens: cnt(18), OutputTokens: cnt(7), ClientTTFT: dur(350 * time.Millisecond),
				TTFTSource: "event:First Token Stream Event",
			},
		},
		{
			name: "Langfuse generation (JSON-quoted completion_start_time, usage_details)",
			span: newSpan("answer",
				str("langfuse.observation.type", "generation"),
				str("langfuse.observation.model.name", "claude-sonnet-4-5"),
				// The Langfuse SDK JSON-encodes the instant: the quotes
				// are part of the value.
				str("langfuse.observation.completion_start_time", `"2026-03-01T11:59:50.488Z"`),
				// Nested *_tokens_details objects sit beside the counts.
				str("langfuse.observation.usage_details", `{"input": 10, "output": 5, "input_tokens_details": {"cached_tokens": 2}, "output_tokens_details": {"reasoning_tokens": 0}}`),
				str("langfuse.observation.model.parameters", `{"max_tokens": 1024}`),
			),
			want: telemetry.LLMCall{
				Role: telemetry.LLMClient, Model: "claude-sonnet-4-5",
				InputTokens: cnt(10), OutputTokens: cnt(5), ClientTTFT: dur(488 * time.Millisecond),
				TTFTSource: "langfuse.observation.completion_start_time",
			},
		},
		{
			name: "Langfuse completion_start_time as unix nanoseconds",
			span: newSpan("answer",
				str("langfuse.observation.type", "GENERATION"),
				str("langfuse.observation.model.name", "gpt-4o"),
				i64("langfuse.observation.completion_start_time", start.Add(1234567891*time.Nanosecond).UnixNano()),
			),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Model: "gpt-4o", ClientTTFT: dur(1234567891 * time.Nanosecond), TTFTSource: "langfuse.observation.completion_start_time"},
		},
		{
			name: "Langfuse completion_start_time from Python isoformat (no zone, microseconds)",
			span: newSpan("answer",
				str("langfuse.observation.type", "generation"),
				str("langfuse.observation.completion_start_time", "2026-03-01T11:59:50.250000"),
			),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, ClientTTFT: dur(250 * time.Millisecond), TTFTSource: "langfuse.observation.completion_start_time"},
		},
		{
			name: "first-token span event on a GenAI span without a TTFT attribute",
			span: func() *tracepb.Span {
				s := newSpan("chat mistral-large",
					str("gen_ai.operation.name", "chat"),
					str("gen_ai.provider.name", "mistral_ai"),
					str("gen_ai.request.model", "mistral-large-latest"),
				)
				s.Events = []*tracepb.Span_Event{
					{Name: "gen_ai.content.prompt", TimeUnixNano: ns(start.Add(time.Millisecond))},
					{Name: "gen_ai.first_chunk_received", TimeUnixNano: ns(start.Add(800 * time.Millisecond))},
					{Name: "First token", TimeUnixNano: ns(start.Add(900 * time.Millisecond))},
				}
				return s
			}(),
			want: telemetry.LLMCall{
				Role: telemetry.LLMClient, Provider: "mistral_ai", Model: "mistral-large-latest", Operation: "chat",
				ClientTTFT: dur(800 * time.Millisecond), TTFTSource: "event:first token",
			},
		},
		{
			name: "the attribute TTFT wins over a first-token event",
			span: func() *tracepb.Span {
				s := newSpan("chat", str("gen_ai.provider.name", "openai"), f64("gen_ai.response.time_to_first_chunk", 0.2))
				s.Events = []*tracepb.Span_Event{{Name: "first_token", TimeUnixNano: ns(start.Add(900 * time.Millisecond))}}
				return s
			}(),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", ClientTTFT: dur(200 * time.Millisecond), TTFTSource: "gen_ai.response.time_to_first_chunk"},
		},
		{
			name: "numbers as strings and doubles; negative, NaN and fractional values dropped",
			span: newSpan("chat",
				str("gen_ai.system", "openai"),
				i64("gen_ai.usage.input_tokens", -5),
				str("gen_ai.usage.output_tokens", " 12 "),
				f64("gen_ai.response.time_to_first_chunk", math.NaN()),
				str("gen_ai.server.ttft", "-0.3"),
			),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", OutputTokens: cnt(12)},
		},
		{
			name: "a usable later key fills in when the first is unusable",
			span: newSpan("chat",
				str("gen_ai.system", "openai"),
				f64("gen_ai.usage.input_tokens", 12.5),
				f64("gen_ai.usage.prompt_tokens", 40), // JavaScript sends integers as doubles
			),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", InputTokens: cnt(40)},
		},
		{
			name: "server latency: negative, Inf and absurd values dropped",
			span: newSpan("llm_request",
				f64("gen_ai.latency.time_in_queue", -1),
				f64("gen_ai.latency.e2e", math.Inf(1)),
				f64("gen_ai.latency.time_to_first_token", 1e12),
				str("gen_ai.latency.time_in_model_decode", "0.5"),
			),
			want: telemetry.LLMCall{Role: telemetry.LLMServer, DecodeTime: dur(500 * time.Millisecond)},
		},
		{
			name: "a TTFT outside the span is a broken clock, not a figure",
			span: newSpan("answer",
				str("langfuse.observation.type", "generation"),
				str("langfuse.observation.completion_start_time", "2026-03-01T11:59:40Z"),
			),
			want: telemetry.LLMCall{Role: telemetry.LLMClient},
		},
		{
			name: "OpenInference span of another kind is not an LLM call",
			span: newSpan("retrieve", str("openinference.span.kind", "RETRIEVER"), str("llm.model_name", "text-embedding-3-small")),
			want: telemetry.LLMCall{},
		},
		{
			name: "GenAI agent span is not an LLM call, though it names a provider",
			span: newSpan("invoke_agent travel-planner",
				str("gen_ai.operation.name", "invoke_agent"),
				str("gen_ai.provider.name", "openai"),
				str("gen_ai.agent.name", "travel-planner"),
				i64("gen_ai.usage.input_tokens", 9000),
			),
			want: telemetry.LLMCall{},
		},
		{
			// opentelemetry-python-contrib openai-v2 (utils.py
			// handle_span_exception): the exception's class as error.type.
			name: "failed call: error.type names the class",
			span: newSpan("chat gpt-4o-mini",
				str("gen_ai.operation.name", "chat"),
				str("gen_ai.system", "openai"),
				str("gen_ai.request.model", "gpt-4o-mini"),
				str("error.type", "RateLimitError"),
				i64("http.response.status_code", 429),
			),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", Model: "gpt-4o-mini", Operation: "chat", ErrorType: "RateLimitError"},
		},
		{
			name: "failed call: an HTTP status of 400 or more, without error.type",
			span: newSpan("chat", str("gen_ai.operation.name", "chat"), i64("http.response.status_code", 503)),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Operation: "chat", ErrorType: "503"},
		},
		{
			name: "a successful call's HTTP status is no error",
			span: newSpan("chat", str("gen_ai.operation.name", "chat"), i64("http.response.status_code", 200), str("http.status_code", "201")),
			want: telemetry.LLMCall{Role: telemetry.LLMClient, Operation: "chat"},
		},
		{
			name: "non-LLM app span",
			span: newSpan("GET /api/answer",
				str("http.request.method", "GET"),
				str("url.path", "/api/answer"),
				i64("http.response.status_code", 200),
			),
			want: telemetry.LLMCall{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Traces(7, traceRequest([]*commonpb.KeyValue{str("service.name", "chat-api")}, tc.span), now, Limits{})
			if res.Rejected != 0 || len(res.Spans) != 1 {
				t.Fatalf("got %d spans, %d rejected (%v); want 1 span", len(res.Spans), res.Rejected, res.Errors)
			}
			if got := res.Spans[0].LLM; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("LLM fields\n got %s\nwant %s", describe(got), describe(tc.want))
			}
		})
	}
}

// describe prints an LLMCall with its pointers dereferenced.
func describe(c telemetry.LLMCall) string {
	p := func(v any) string {
		switch x := v.(type) {
		case *int64:
			if x != nil {
				return fmt.Sprint(*x)
			}
		case *time.Duration:
			if x != nil {
				return x.String()
			}
		}
		return "nil"
	}
	return fmt.Sprintf("{role=%s provider=%q model=%q op=%q in=%s out=%s ttft=%s (%q) queue=%s prefill=%s sttft=%s decode=%s e2e=%s preempt=%s id=%q server=%s:%d error=%q}",
		c.Role, c.Provider, c.Model, c.Operation, p(c.InputTokens), p(c.OutputTokens), p(c.ClientTTFT), c.TTFTSource,
		p(c.QueueTime), p(c.PrefillTime), p(c.ServerTTFT), p(c.DecodeTime), p(c.ServerE2E), p(c.Preemptions),
		c.ResponseID, c.ServerAddress, c.ServerPort, c.ErrorType)
}

// TestTracesIdentity checks the non-LLM fields of a span: ids, names,
// resource identity, kind, status, attributes and events.
func TestTracesIdentity(t *testing.T) {
	s := newSpan("POST /v1/chat/completions",
		str("http.request.method", "POST"),
		i64("http.response.status_code", 503),
		f64("retry.backoff", 0.5),
		boolean("stream", true),
		kv("tags", arr(sv("a"), iv(1), &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: true}})),
		kv("user", kvlist(str("tier", `gold "vip"`), i64("id", 42))),
		kv("raw", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0xde, 0xad}}}),
		kv("empty", nil),
	)
	s.Kind = tracepb.Span_SPAN_KIND_SERVER
	s.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "upstream overloaded"}
	s.Events = []*tracepb.Span_Event{{Name: "exception", TimeUnixNano: ns(start.Add(time.Second))}}
	root := newSpan("root")
	root.SpanId = []byte{1, 2, 3, 4, 5, 6, 7, 8}
	root.ParentSpanId = nil
	root.Kind = tracepb.Span_SPAN_KIND_UNSPECIFIED

	res := Traces(7, traceRequest([]*commonpb.KeyValue{
		str("service.name", "gateway"),
		str("k8s.pod.name", "gateway-7d9f-abcde"),
		str("host.name", "node-3"),
		i64("process.pid", 4242),
	}, s, root), now, Limits{})
	if len(res.Spans) != 2 {
		t.Fatalf("got %d spans (%v), want 2", len(res.Spans), res.Errors)
	}
	got := res.Spans[0]
	want := telemetry.Span{
		ProjectID:     7,
		TraceID:       "4bf92f3577b34da6a3ce929d0e0e4736",
		SpanID:        "00f067aa0ba902b7",
		ParentSpanID:  "53995c3f42cd8ad8",
		Service:       "gateway",
		Instance:      "gateway-7d9f-abcde", // no service.instance.id: the pod wins over the host
		Name:          "POST /v1/chat/completions",
		Kind:          "server",
		Start:         start,
		End:           start.Add(2500 * time.Millisecond),
		StatusCode:    "error",
		StatusMessage: "upstream overloaded",
		Attributes: map[string]string{
			"http.request.method":       "POST",
			"http.response.status_code": "503",
			"retry.backoff":             "0.5",
			"stream":                    "true",
			"tags":                      `["a",1,true]`,
			"user":                      `{"tier":"gold \"vip\"","id":42}`,
			"raw":                       "3q0=",
			"empty":                     "",
		},
		Resource: map[string]string{
			"service.name": "gateway", "k8s.pod.name": "gateway-7d9f-abcde", "host.name": "node-3", "process.pid": "4242",
		},
		EventNames: []string{"exception"},
		EventTimes: []time.Time{start.Add(time.Second)},
	}
	want.ResourceHash = telemetry.ResourceHash(7, want.Resource)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("span\n got %+v\nwant %+v", got, want)
	}
	if r := res.Spans[1]; r.ParentSpanID != "" || r.Kind != "internal" || r.StatusCode != "unset" {
		t.Errorf("root span: parent=%q kind=%q status=%q, want \"\", internal, unset", r.ParentSpanID, r.Kind, r.StatusCode)
	}
}

func TestTracesServiceAndInstanceDefaults(t *testing.T) {
	tests := []struct {
		resource              []*commonpb.KeyValue
		service, instanceWant string
	}{
		{nil, "unknown_service", ""},
		{[]*commonpb.KeyValue{str("service.name", "")}, "unknown_service", ""},
		{[]*commonpb.KeyValue{str("service.name", "rag"), str("host.name", "h1")}, "rag", "h1"},
		{[]*commonpb.KeyValue{str("service.instance.id", "627cc493"), str("k8s.pod.name", "p"), str("host.name", "h")}, "unknown_service", "627cc493"},
	}
	for _, tc := range tests {
		res := Traces(1, traceRequest(tc.resource, newSpan("x")), now, Limits{})
		if len(res.Spans) != 1 {
			t.Fatalf("resource %v: span rejected: %v", tc.resource, res.Errors)
		}
		if got := res.Spans[0]; got.Service != tc.service || got.Instance != tc.instanceWant {
			t.Errorf("resource %v: service=%q instance=%q, want %q %q", tc.resource, got.Service, got.Instance, tc.service, tc.instanceWant)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
