package normalize

// llmMarker says "a span with this attribute (and, if Value is set, this
// value, case-insensitively) records an LLM call".
type llmMarker struct {
	Attr  string
	Value string
}

// llmMarkers are the conventions that identify an LLM client call.
var llmMarkers = []llmMarker{
	// OTel GenAI semconv (open-telemetry/semantic-conventions
	// docs/gen-ai/gen-ai-spans.md); gen_ai.system is its name before 1.37,
	// still sent by OpenLIT (sdk/python/src/openlit/semcov/__init__.py)
	// and older OpenLLMetry.
	{Attr: "gen_ai.operation.name"},
	{Attr: "gen_ai.provider.name"},
	{Attr: "gen_ai.system"},
	// OpenInference (Arize-ai/openinference, python/openinference-semantic-
	// conventions/src/openinference/semconv/trace/__init__.py).
	{Attr: "openinference.span.kind", Value: "LLM"},
	// Langfuse SDK v3/v4 (langfuse/langfuse-python langfuse/_client/attributes.py).
	{Attr: "langfuse.observation.type", Value: "generation"},
	// OpenLLMetry (traceloop/openllmetry packages/opentelemetry-semantic-
	// conventions-ai/opentelemetry/semconv_ai/__init__.py LLM_REQUEST_TYPE).
	{Attr: "llm.request.type"},
}

// notModelCall vetoes a span that carries an LLM marker but is not a model
// call: an agent or workflow wraps several calls and a tool, retrieval or
// embedding call is none, so counting them would invent requests. A rule
// matches when the span's Attr is set and its lowercased value is not one
// of Calls; or, with NamePrefix, when the span name starts with it.
type notModelCall struct {
	Attr       string
	Calls      []string
	NamePrefix string
}

// notModelCalls: a span matching any rule is never an LLM request.
var notModelCalls = []notModelCall{
	// Semconv operations that are model calls; the rest (invoke_agent,
	// create_agent, execute_tool, embeddings, retrieval …) are not.
	// OpenLLMetry LangChain sends execute_task and vector_db_retrieve on
	// task spans (packages/opentelemetry-instrumentation-langchain/
	// opentelemetry/instrumentation/langchain/callback_handler.py), OpenLIT
	// invoke_workflow, vectordb, model_request … (semcov/__init__.py).
	{Attr: "gen_ai.operation.name", Calls: []string{"chat", "text_completion", "generate_content", "completion"}},
	// OpenLLMetry workflow/task/agent/tool spans (semconv_ai
	// TraceloopSpanKindValues); its LLM spans carry no span kind.
	{Attr: "traceloop.span.kind", Calls: []string{"unknown"}},
	// OpenLLMetry LLMRequestTypeValues: embedding and rerank are not calls
	// that produce tokens.
	{Attr: "llm.request.type", Calls: []string{"chat", "completion", "unknown"}},
	// OpenInference: CHAIN, TOOL, AGENT, RETRIEVER, EMBEDDING, RERANKER,
	// GUARDRAIL, EVALUATOR spans are not model calls.
	{Attr: "openinference.span.kind", Calls: []string{"llm"}},
	// Langfuse: span, agent, tool, chain, retriever, embedding, guardrail …
	// (langfuse-python langfuse/_client/constants.py ObservationTypeLiteral).
	{Attr: "langfuse.observation.type", Calls: []string{"generation"}},
	// Pydantic Logfire logs a streamed call's end as a zero-length span
	// named by its message template, "streaming response from
	// {request_data[model]!r} took {duration:.2f}s", with the request's
	// gen_ai.* attributes (pydantic/logfire logfire/_internal/integrations/
	// llm_providers/llm_provider.py): the call is its request span.
	{NamePrefix: "streaming response"},
}

// serverMarker says "a span with this name and attribute is the inference
// server's own record of a call".
type serverMarker struct {
	Name string
	Attr string
	// Event, when set, marks by a span event of that name instead (and by
	// the span's Name too when that is set).
	Event string
}

// serverMarkers identify server spans besides any gen_ai.latency.*
// attribute (vLLM vllm/tracing.py SpanAttributes; SGLang
// python/sglang/srt/observability/trace.py SpanAttributes).
var serverMarkers = []serverMarker{
	// HF TGI's router spans the handler (router/src/server.rs: generate and
	// generate_stream, #[instrument] fields queue_time, inference_time …).
	{Name: "generate", Attr: "inference_time"},
	{Name: "generate_stream", Attr: "inference_time"},
	// vLLM journey tracing: the engine's llm_core span carries lifecycle
	// events journey.QUEUED, journey.SCHEDULED, journey.FIRST_TOKEN,
	// journey.PREEMPTED, journey.FINISHED (vllm-project/vllm
	// JOURNEY_TRACING.md, vllm/v1/core/sched/journey_events.py).
	{Event: journeyQueued},
	// Its parent, the API server's llm_request span, carries api.ARRIVED …
	// api.DEPARTED events, gen_ai.request.id and the token counts, and no
	// gen_ai.latency.* (JOURNEY_TRACING.md "API Layer Events";
	// tests/v1/core/test_completion_tokens_attribute.py lists its
	// attributes). The assembler folds the pair into one server record.
	{Name: "llm_request", Event: journeyArrived},
}

// serverLatencyPrefix starts the attributes vLLM and SGLang put on their
// request span; their presence makes the span the server side of the call.
const serverLatencyPrefix = "gen_ai.latency."

// vLLM journey event names (see serverMarkers).
const (
	journeyQueued     = "journey.QUEUED"
	journeyFinished   = "journey.FINISHED"
	journeyArrived    = "api.ARRIVED"
	journeyFirstReply = "api.FIRST_RESPONSE_FROM_CORE"
	journeyScheduled  = "journey.SCHEDULED"
	journeyFirstToken = "journey.FIRST_TOKEN"
	journeyPreempted  = "journey.PREEMPTED"
)

// streamAttrs say whether the client asked for a stream: semconv and
// OpenLIT Python (semcov/__init__.py GEN_AI_REQUEST_IS_STREAM) send
// gen_ai.request.stream, OpenLIT TypeScript gen_ai.request.is_stream
// (sdk/typescript/src/semantic-convention.ts).
var streamAttrs = [...]string{"gen_ai.request.stream", "gen_ai.request.is_stream"}

// producerAttrs tell a producer apart where a rule depends on it: SGLang's
// request span carries module = "sglang::request" (trace.py
// trace_req_start).
const sglangModuleAttr, sglangModulePrefix = "module", "sglang::"

// unit says how a wire value is read into a canonical field.
type unit uint8

const (
	// text: any value, as its string form; empty means absent.
	text unit = iota
	// lowerText: as text, lowercased (provider names differ only in case).
	lowerText
	// count: a non-negative integer sent as int, integral double or
	// numeric string.
	count
	// seconds: a non-negative number of seconds (int, double or numeric
	// string), stored as a time.Duration.
	seconds
	// durationText: a duration as Rust's Debug prints one ("12.3ms",
	// "850µs", "1.2s"), which is Go's time.ParseDuration syntax.
	durationText
	// timestamp: an absolute time (ISO 8601 string, possibly JSON-quoted,
	// or a unix epoch number); the field is that time minus span start.
	timestamp
	// endpoint: a URL; the field is its host (ServerAddress) or port
	// (ServerPort, the scheme's default when the URL names none).
	endpoint
	// port: a TCP port, 1..65535.
	port
	// firstEvent is not an attribute: the span's first event named Event
	// (or, with Event empty, matching *first*token* / *first*chunk*); the
	// field is its time minus span start.
	firstEvent
	// eventGap is the time from the first event named From to the first
	// named Event after it, both on the span.
	eventGap
	// eventWait sums the waits before work resumes: from each event named
	// From or Also to the next named Event (queued → scheduled, preempted
	// → scheduled again).
	eventWait
	// eventCount is how many events named Event the span has, when it has
	// an event named From (else the producer does not say).
	eventCount
)

// wireKey is one place a canonical field may be found on the wire.
type wireKey struct {
	Attr string
	Unit unit
	// UsageSide, when set ("input", "output"), means the attribute is
	// Langfuse's usage_details JSON and the value is that side's tokens
	// (usageCount).
	UsageSide string
	// Event, From and Also name span events for the event units.
	Event, From, Also string
	// Complete: the event key holds only when the SDK dropped no events
	// (OpenLLMetry keeps a span's last 128 chunk events: the first kept one
	// is then not the first chunk).
	Complete bool
	// StreamOnly: the value means what it says only on a streamed call
	// (gen_ai.request.stream true); OpenLIT sets its TTFT to the whole
	// duration on other calls.
	StreamOnly bool
	// AfterHeaders: a TTFT whose clock starts once the response headers
	// arrived (telemetry.TTFTAfterHeaders).
	AfterHeaders bool
	// NotFor skips the key on SGLang's span ("sglang"), whose prefill
	// includes the queue wait.
	NotFor string
}

// side says for which role of LLM span a rule applies.
type side uint8

const (
	bothSides side = iota
	clientSide
	serverSide
)

// field names a canonical telemetry.LLMCall field.
type field uint8

const (
	fieldModel field = iota
	fieldProvider
	fieldOperation
	fieldInputTokens
	fieldOutputTokens
	fieldClientTTFT
	fieldQueueTime
	fieldPrefillTime
	fieldServerTTFT
	fieldDecodeTime
	fieldServerE2E
	fieldResponseID
	fieldServerAddress
	fieldServerPort
	fieldPreemptions
)

// fieldRule lists, for one canonical field, the wire keys that carry it.
// The first key with a usable value wins; a present but unusable value
// (negative, NaN, not a number) is skipped, never stored.
type fieldRule struct {
	Field field
	Side  side
	Keys  []wireKey
}

// conventions is the mapping table: every accepted LLM attribute, in
// priority order. It is meant to be read as documentation.
var conventions = []fieldRule{
	{Field: fieldModel, Keys: []wireKey{
		{Attr: "gen_ai.response.model"},           // OTel GenAI; SGLang; vLLM V1 sends none
		{Attr: "gen_ai.request.model"},            // OTel GenAI (what was asked for)
		{Attr: "llm.model_name"},                  // OpenInference
		{Attr: "langfuse.observation.model.name"}, // Langfuse
	}},
	{Field: fieldProvider, Keys: []wireKey{
		{Attr: "gen_ai.provider.name", Unit: lowerText}, // OTel GenAI ≥ 1.37, OpenLLMetry
		{Attr: "gen_ai.system", Unit: lowerText},        // OTel GenAI < 1.37, OpenLIT, LiteLLM
		{Attr: "llm.provider", Unit: lowerText},         // OpenInference (hosting provider)
		{Attr: "llm.system", Unit: lowerText},           // OpenInference (model family)
	}},
	{Field: fieldOperation, Keys: []wireKey{
		{Attr: "gen_ai.operation.name"}, // chat, text_completion …
		{Attr: "llm.request.type"},      // OpenLLMetry: chat, completion
	}},
	{Field: fieldInputTokens, Keys: []wireKey{
		{Attr: "gen_ai.usage.input_tokens", Unit: count},  // OTel GenAI ≥ 1.27, OpenLLMetry, OpenLIT
		{Attr: "gen_ai.usage.prompt_tokens", Unit: count}, // OTel GenAI older; vLLM; SGLang; LiteLLM
		{Attr: "llm.token_count.prompt", Unit: count},     // OpenInference
		{Attr: "llm.usage.prompt_tokens", Unit: count},    // OpenLLMetry (older)
		{Attr: "langfuse.observation.usage_details", Unit: count, UsageSide: "input"},
	}},
	{Field: fieldOutputTokens, Keys: []wireKey{
		{Attr: "gen_ai.usage.output_tokens", Unit: count},
		{Attr: "gen_ai.usage.completion_tokens", Unit: count},
		{Attr: "llm.token_count.completion", Unit: count},
		{Attr: "llm.usage.completion_tokens", Unit: count},
		{Attr: "langfuse.observation.usage_details", Unit: count, UsageSide: "output"},
	}},
	{Field: fieldClientTTFT, Side: clientSide, Keys: []wireKey{
		// OTel GenAI: seconds, streamed calls only.
		{Attr: "gen_ai.response.time_to_first_chunk", Unit: seconds},
		// Langfuse: generation.completion_start_time, JSON-quoted ISO time
		// (langfuse-python langfuse/_client/attributes.py).
		{Attr: "langfuse.observation.completion_start_time", Unit: timestamp},
		// OpenInference Python adds "First Token Stream Event" on the first
		// chunk (python/instrumentation/openinference-instrumentation-openai/
		// src/openinference/instrumentation/openai/_stream.py _process_chunk).
		{Unit: firstEvent, Event: "First Token Stream Event"},
		// OpenLLMetry Python adds gen_ai.content.completion.chunk per chunk
		// (packages/opentelemetry-instrumentation-openai/opentelemetry/
		// instrumentation/openai/shared/chat_wrappers.py).
		{Unit: firstEvent, Event: "gen_ai.content.completion.chunk", Complete: true},
		// OpenLIT: gen_ai.server.time_to_first_token in seconds, timed from
		// after the response headers, and the whole duration on non-streamed
		// calls (sdk/python/src/openlit/semcov/__init__.py GEN_AI_SERVER_TTFT).
		{Attr: "gen_ai.server.time_to_first_token", Unit: seconds, StreamOnly: true, AfterHeaders: true},
		{Unit: firstEvent}, // any other *first*token* / *first*chunk* event
	}},
	// The server split. vLLM's llm_request span (vllm/tracing.py
	// SpanAttributes, set in vllm/v1/engine/output_processor.py do_tracing)
	// and SGLang's request span (observability/req_time_stats.py
	// convert_to_gen_ai_span_attrs), all in seconds. SGLang sends no queue
	// time and its prefill runs from dispatch to first token, the wait
	// included: it stays unsplit (queue+prefill) rather than labelled prefill.
	// TGI (router/src/server.rs) records its timings as Rust Debug strings.
	{Field: fieldQueueTime, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_in_queue", Unit: seconds},
		{Attr: "queue_time", Unit: durationText}, // TGI
		// Journey events: waiting in the queue, and again after each
		// preemption; prefill is then server TTFT − queue.
		{Unit: eventWait, From: journeyQueued, Also: journeyPreempted, Event: journeyScheduled},
	}},
	{Field: fieldPrefillTime, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_in_model_prefill", Unit: seconds, NotFor: "sglang"},
	}},
	{Field: fieldServerTTFT, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_to_first_token", Unit: seconds},
		// Journey tracing: on llm_request from arrival at the API server to
		// its first response from the engine; on llm_core from queued to
		// the first token (engine only).
		{Unit: eventGap, From: journeyArrived, Event: journeyFirstReply},
		{Unit: eventGap, From: journeyQueued, Event: journeyFirstToken},
	}},
	{Field: fieldDecodeTime, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_in_model_decode", Unit: seconds},
		// Journey tracing: first token to the engine's FINISHED.
		{Unit: eventGap, From: journeyFirstToken, Event: journeyFinished},
	}},
	{Field: fieldServerE2E, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.e2e", Unit: seconds},
		{Attr: "total_time", Unit: durationText}, // TGI
	}},
	{Field: fieldPreemptions, Side: serverSide, Keys: []wireKey{
		{Unit: eventCount, From: journeyQueued, Event: journeyPreempted},
	}},
	// Identity, for joining a server span that arrived in its own trace:
	// the client's gen_ai.response.id (OTel GenAI, OpenLLMetry, OpenLIT) is
	// the chatcmpl-… id that vLLM logs as gen_ai.request.id
	// (output_processor.py do_tracing: external_req_id).
	{Field: fieldResponseID, Side: clientSide, Keys: []wireKey{
		{Attr: "gen_ai.response.id"},
	}},
	{Field: fieldResponseID, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.request.id"}, // vLLM, SGLang
		{Attr: "rid"},               // SGLang's root span (trace.py trace_req_start)
	}},
	{Field: fieldServerAddress, Side: clientSide, Keys: []wireKey{
		{Attr: "server.address"},                         // OTel GenAI, OpenLIT
		{Attr: "gen_ai.openai.api_base", Unit: endpoint}, // OpenLLMetry: the client's base_url
	}},
	{Field: fieldServerPort, Side: clientSide, Keys: []wireKey{
		{Attr: "server.port", Unit: port},
		{Attr: "gen_ai.openai.api_base", Unit: endpoint},
	}},
}

// conventionKeys is every attribute name the tables above read, so one pass
// over a span's attributes can pick them out without building a full map.
var conventionKeys = func() map[string]struct{} {
	m := map[string]struct{}{streamAttrs[0]: {}, streamAttrs[1]: {}, sglangModuleAttr: {}}
	for _, mk := range llmMarkers {
		m[mk.Attr] = struct{}{}
	}
	for _, r := range notModelCalls {
		if r.Attr != "" {
			m[r.Attr] = struct{}{}
		}
	}
	for _, r := range serverMarkers {
		if r.Attr != "" {
			m[r.Attr] = struct{}{}
		}
	}
	for _, r := range conventions {
		for _, k := range r.Keys {
			if k.Attr != "" {
				m[k.Attr] = struct{}{}
			}
		}
	}
	for _, k := range errorTypeKeys {
		m[k.Attr] = struct{}{}
	}
	return m
}()
