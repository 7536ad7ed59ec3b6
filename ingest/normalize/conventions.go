package normalize

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// llmMarker says "a span with this attribute (and, if Value is set, this
// value, case-insensitively) records an LLM call".
type llmMarker struct {
	Attr  string
	Value string
}

// llmMarkers are the conventions that identify an LLM call. Besides these,
// any gen_ai.latency.* attribute marks the inference server's own span.
var llmMarkers = []llmMarker{
	{Attr: "gen_ai.operation.name"},                          // OTel GenAI semconv
	{Attr: "gen_ai.provider.name"},                           // OTel GenAI semconv ≥ 1.37
	{Attr: "gen_ai.system"},                                  // OTel GenAI semconv < 1.37, OpenLLMetry, OpenLIT
	{Attr: "openinference.span.kind", Value: "LLM"},          // OpenInference (Arize Phoenix)
	{Attr: "langfuse.observation.type", Value: "generation"}, // Langfuse OTel SDK
	{Attr: "llm.request.type"},                               // OpenLLMetry (Traceloop)
}

// nonModelOperations are gen_ai.operation.name values of GenAI spans that
// are not a model call: an agent invocation wraps several LLM calls and a
// tool call wraps none, so counting either as one would double-count or
// invent requests. They carry gen_ai.provider.name too, hence the veto.
var nonModelOperations = map[string]struct{}{
	"invoke_agent": {},
	"create_agent": {},
	"execute_tool": {},
}

// serverLatencyPrefix starts the attributes vLLM puts on its llm_request
// span; their presence makes the span the server side of the call.
const serverLatencyPrefix = "gen_ai.latency."

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
	// timestamp: an absolute time (ISO 8601 string, possibly JSON-quoted,
	// or a unix epoch number); the field is that time minus span start.
	timestamp
	// firstTokenEvent is not an attribute: the first span event whose
	// lowercase name matches *first*token* or *first*chunk*; the field is
	// its time minus span start.
	firstTokenEvent
)

// wireKey is one place a canonical field may be found on the wire.
type wireKey struct {
	Attr string
	Unit unit
	// JSONField, when set, means the attribute holds a JSON object and the
	// value is this member of it (Langfuse's usage_details).
	JSONField string
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
		{Attr: "gen_ai.response.model"},           // OTel GenAI; vLLM llm_request
		{Attr: "gen_ai.request.model"},            // OTel GenAI (what was asked for)
		{Attr: "llm.model_name"},                  // OpenInference
		{Attr: "langfuse.observation.model.name"}, // Langfuse
	}},
	{Field: fieldProvider, Keys: []wireKey{
		{Attr: "gen_ai.provider.name", Unit: lowerText}, // OTel GenAI ≥ 1.37
		{Attr: "gen_ai.system", Unit: lowerText},        // OTel GenAI < 1.37, OpenLLMetry, OpenLIT
		{Attr: "llm.provider", Unit: lowerText},         // OpenInference (hosting provider)
		{Attr: "llm.system", Unit: lowerText},           // OpenInference (model family)
	}},
	{Field: fieldOperation, Keys: []wireKey{
		{Attr: "gen_ai.operation.name"}, // chat, text_completion, embeddings …
		{Attr: "llm.request.type"},      // OpenLLMetry: chat, completion …
	}},
	{Field: fieldInputTokens, Keys: []wireKey{
		{Attr: "gen_ai.usage.input_tokens", Unit: count},  // OTel GenAI ≥ 1.27
		{Attr: "gen_ai.usage.prompt_tokens", Unit: count}, // OTel GenAI older; vLLM; OpenLLMetry
		{Attr: "llm.token_count.prompt", Unit: count},     // OpenInference
		{Attr: "llm.usage.prompt_tokens", Unit: count},    // OpenLLMetry (older)
		{Attr: "langfuse.observation.usage_details", Unit: count, JSONField: "input"},
	}},
	{Field: fieldOutputTokens, Keys: []wireKey{
		{Attr: "gen_ai.usage.output_tokens", Unit: count},
		{Attr: "gen_ai.usage.completion_tokens", Unit: count},
		{Attr: "llm.token_count.completion", Unit: count},
		{Attr: "llm.usage.completion_tokens", Unit: count},
		{Attr: "langfuse.observation.usage_details", Unit: count, JSONField: "output"},
	}},
	{Field: fieldClientTTFT, Side: clientSide, Keys: []wireKey{
		{Attr: "gen_ai.response.time_to_first_chunk", Unit: seconds},          // OTel GenAI
		{Attr: "gen_ai.server.ttft", Unit: seconds},                           // OpenLIT
		{Attr: "langfuse.observation.completion_start_time", Unit: timestamp}, // Langfuse
		{Unit: firstTokenEvent},                                               // e.g. OpenInference "First Token Stream Event"
	}},
	// The server split: vLLM's llm_request span (SpanAttributes in
	// vllm/tracing.py), all in seconds. SGLang's tracing exports stage
	// spans (prefill_waiting, prefill_forward, decode_loop …) rather than
	// these attributes, so it is accepted only when it sends the same keys.
	{Field: fieldQueueTime, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_in_queue", Unit: seconds},
	}},
	{Field: fieldPrefillTime, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_in_model_prefill", Unit: seconds},
	}},
	{Field: fieldServerTTFT, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_to_first_token", Unit: seconds},
	}},
	{Field: fieldDecodeTime, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.time_in_model_decode", Unit: seconds},
	}},
	{Field: fieldServerE2E, Side: serverSide, Keys: []wireKey{
		{Attr: "gen_ai.latency.e2e", Unit: seconds},
	}},
}

// conventionKeys is every attribute name the tables above read, so one pass
// over a span's attributes can pick them out without building a full map.
var conventionKeys = func() map[string]struct{} {
	m := map[string]struct{}{}
	for _, mk := range llmMarkers {
		m[mk.Attr] = struct{}{}
	}
	for _, r := range conventions {
		for _, k := range r.Keys {
			if k.Attr != "" {
				m[k.Attr] = struct{}{}
			}
		}
	}
	return m
}()

// maxSeconds bounds an attribute duration: it keeps the nanosecond
// conversion far from int64 overflow, and no single request runs a week.
const maxSeconds = 7 * 24 * 3600

// maxCount bounds a token count to what a float64 still holds exactly.
const maxCount = 1 << 53

// spanView is what the convention rules need to know about one span.
type spanView struct {
	attrs  map[string]*commonpb.AnyValue // convention keys only
	server bool                          // has a gen_ai.latency.* attribute
	start  time.Time
	end    time.Time
	events []spanEvent
}

type spanEvent struct {
	name string
	time time.Time
}

// role classifies the span: not an LLM call, the client's or the server's.
func (v *spanView) role() telemetry.LLMRole {
	if v.server {
		return telemetry.LLMServer
	}
	if op, ok := v.attrs["gen_ai.operation.name"]; ok {
		if _, agent := nonModelOperations[strings.ToLower(valueString(op, 64))]; agent {
			return telemetry.NotLLM
		}
	}
	for _, mk := range llmMarkers {
		val, ok := v.attrs[mk.Attr]
		if !ok {
			continue
		}
		if mk.Value == "" || strings.EqualFold(strings.TrimSpace(valueString(val, 64)), mk.Value) {
			return telemetry.LLMClient
		}
	}
	return telemetry.NotLLM
}

// llmCall applies the conventions table to one span.
func (v *spanView) llmCall() telemetry.LLMCall {
	call := telemetry.LLMCall{Role: v.role()}
	if call.Role == telemetry.NotLLM {
		return call
	}
	for _, rule := range conventions {
		if rule.Side == clientSide && call.Role != telemetry.LLMClient ||
			rule.Side == serverSide && call.Role != telemetry.LLMServer {
			continue
		}
		for _, k := range rule.Keys {
			if v.apply(&call, rule.Field, k) {
				break
			}
		}
	}
	return call
}

// apply reads one wire key into field f; it reports whether a usable value
// was found.
func (v *spanView) apply(call *telemetry.LLMCall, f field, k wireKey) bool {
	switch k.Unit {
	case text, lowerText:
		val, ok := v.attrs[k.Attr]
		if !ok {
			return false
		}
		s := strings.TrimSpace(valueString(val, maxNameBytes))
		if s == "" {
			return false
		}
		if k.Unit == lowerText {
			s = strings.ToLower(s)
		}
		setText(call, f, s)
		return true
	case count:
		val, ok := v.attrs[k.Attr]
		if !ok {
			return false
		}
		var n int64
		if k.JSONField != "" {
			n, ok = jsonCount(val, k.JSONField)
		} else {
			n, ok = readCount(val)
		}
		if !ok {
			return false
		}
		setCount(call, f, n)
		return true
	case seconds:
		val, ok := v.attrs[k.Attr]
		if !ok {
			return false
		}
		d, ok := readSeconds(val)
		if !ok {
			return false
		}
		setDuration(call, f, d)
		return true
	case timestamp:
		val, ok := v.attrs[k.Attr]
		if !ok {
			return false
		}
		t, ok := readTimestamp(val)
		if !ok {
			return false
		}
		d, ok := v.sinceStart(t)
		if !ok {
			return false
		}
		setDuration(call, f, d)
		return true
	case firstTokenEvent:
		for _, e := range v.events {
			if !isFirstTokenEvent(e.name) {
				continue
			}
			// Only the first matching event counts; if its time is
			// corrupt there is no TTFT rather than a later guess.
			d, ok := v.sinceStart(e.time)
			if !ok {
				return false
			}
			setDuration(call, f, d)
			return true
		}
	}
	return false
}

// sinceStart is t − span start, when t lies within the span: a first token
// before the request or after its end is a broken clock, not a figure.
func (v *spanView) sinceStart(t time.Time) (time.Duration, bool) {
	if t.Before(v.start) || t.After(v.end) {
		return 0, false
	}
	return t.Sub(v.start), true
}

func isFirstTokenEvent(name string) bool {
	n := strings.ToLower(name)
	i := strings.Index(n, "first")
	if i < 0 {
		return false
	}
	rest := n[i+len("first"):]
	return strings.Contains(rest, "token") || strings.Contains(rest, "chunk")
}

func setText(c *telemetry.LLMCall, f field, s string) {
	switch f {
	case fieldModel:
		c.Model = s
	case fieldProvider:
		c.Provider = s
	case fieldOperation:
		c.Operation = s
	}
}

func setCount(c *telemetry.LLMCall, f field, n int64) {
	switch f {
	case fieldInputTokens:
		c.InputTokens = &n
	case fieldOutputTokens:
		c.OutputTokens = &n
	}
}

func setDuration(c *telemetry.LLMCall, f field, d time.Duration) {
	switch f {
	case fieldClientTTFT:
		c.ClientTTFT = &d
	case fieldQueueTime:
		c.QueueTime = &d
	case fieldPrefillTime:
		c.PrefillTime = &d
	case fieldServerTTFT:
		c.ServerTTFT = &d
	case fieldDecodeTime:
		c.DecodeTime = &d
	case fieldServerE2E:
		c.ServerE2E = &d
	}
}

// readNumber accepts int, double and numeric-string values; JavaScript
// SDKs send every number as a double and some exporters stringify.
func readNumber(v *commonpb.AnyValue) (float64, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return float64(x.IntValue), true
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue, true
	case *commonpb.AnyValue_StringValue:
		f, err := strconv.ParseFloat(strings.TrimSpace(x.StringValue), 64)
		return f, err == nil
	}
	return 0, false
}

// readCount is a token count: a non-negative whole number.
func readCount(v *commonpb.AnyValue) (int64, bool) {
	if x, ok := v.GetValue().(*commonpb.AnyValue_IntValue); ok {
		return x.IntValue, x.IntValue >= 0
	}
	f, ok := readNumber(v)
	return countFromFloat(f, ok)
}

func countFromFloat(f float64, ok bool) (int64, bool) {
	if !ok || math.IsNaN(f) || f < 0 || f > maxCount || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// jsonCount reads member field of a JSON object held in a string attribute
// (Langfuse's usage_details: {"input": 10, "output": 5}).
func jsonCount(v *commonpb.AnyValue, member string) (int64, bool) {
	s, ok := v.GetValue().(*commonpb.AnyValue_StringValue)
	if !ok || len(s.StringValue) > defaultMaxValueBytes {
		return 0, false
	}
	var obj map[string]json.Number
	dec := json.NewDecoder(strings.NewReader(s.StringValue))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return 0, false
	}
	n, ok := obj[member]
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return countFromFloat(f, err == nil)
}

// readSeconds is a duration in seconds: finite, non-negative, under a week.
func readSeconds(v *commonpb.AnyValue) (time.Duration, bool) {
	f, ok := readNumber(v)
	if !ok || math.IsNaN(f) || f < 0 || f > maxSeconds {
		return 0, false
	}
	return time.Duration(math.Round(f * float64(time.Second))), true
}

// isoLayouts are the ISO 8601 shapes SDKs actually send: RFC 3339 with any
// fraction, Python's isoformat() without a zone (Langfuse stores UTC), and
// the space-separated variant.
var isoLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
}

// readTimestamp parses an absolute time. Strings may be ISO 8601 or a
// number, and may arrive JSON-quoted ("\"2025-…Z\"": the Langfuse SDK
// JSON-encodes this attribute). Numbers are unix time in s, ms, µs or ns,
// told apart by magnitude, which is unambiguous for any date after 2000.
func readTimestamp(v *commonpb.AnyValue) (time.Time, bool) {
	if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		str := strings.TrimSpace(s.StringValue)
		if len(str) >= 2 && str[0] == '"' && str[len(str)-1] == '"' {
			str = str[1 : len(str)-1]
		}
		for _, layout := range isoLayouts {
			if t, err := time.Parse(layout, str); err == nil {
				return t.UTC(), true
			}
		}
	}
	// Whole numbers stay integers: a float64 cannot hold today's unix
	// nanoseconds exactly.
	if n, ok := readInt(v); ok {
		switch {
		case n <= 0:
			return time.Time{}, false
		case n < 1e11: // seconds, until year 5138
			return time.Unix(n, 0).UTC(), true
		case n < 1e14: // milliseconds
			return time.UnixMilli(n).UTC(), true
		case n < 1e17: // microseconds
			return time.UnixMicro(n).UTC(), true
		default:
			return time.Unix(0, n).UTC(), true
		}
	}
	f, ok := readNumber(v)
	if !ok || math.IsNaN(f) || f <= 0 || f >= 1e11 {
		// Fractional values are only plausible as seconds (time.time()).
		return time.Time{}, false
	}
	return time.Unix(0, int64(math.Round(f*1e9))).UTC(), true
}

// readInt is an int value or a string holding a whole decimal number.
func readInt(v *commonpb.AnyValue) (int64, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return x.IntValue, true
	case *commonpb.AnyValue_StringValue:
		n, err := strconv.ParseInt(strings.TrimSpace(x.StringValue), 10, 64)
		return n, err == nil
	}
	return 0, false
}
