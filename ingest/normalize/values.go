package normalize

import (
	"encoding/json"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
)

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

// usageCount reads one side ("input" or "output") of a Langfuse
// usage_details JSON object. Its SDKs send it in two shapes:
//   - split: "input" holds the prompt minus every detail, each detail sent
//     beside it as "input_<detail>" ({"input": 21, "input_cached_tokens":
//     16}); the prompt is their sum. @langfuse/openai parseUsageDetails
//     (langfuse/langfuse-js packages/openai/src/parseOpenAI.ts, as built in
//     testdata/producers/js node_modules/@langfuse/openai/dist/index.cjs)
//     and the Python LangChain handler (langfuse/langfuse-python
//     langfuse/langchain/CallbackHandler.py _parse_usage_model, which leaves
//     "priority*" details in the total, so they are not added back).
//   - raw: the provider's usage object as it came (langfuse-python
//     langfuse/openai.py _parse_usage): prompt_tokens/completion_tokens or
//     the Responses API's input_tokens/output_tokens, with nested
//     *_tokens_details objects that are parts of those counts.
//
// Backed by TestLangfuseUsageDetails and the JS suite's langfuse rows.
func usageCount(v *commonpb.AnyValue, side string) (int64, bool) {
	s, ok := v.GetValue().(*commonpb.AnyValue_StringValue)
	if !ok || len(s.StringValue) > defaultMaxValueBytes {
		return 0, false
	}
	// Members are read raw: nested detail objects sit beside the counts.
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s.StringValue), &obj); err != nil {
		return 0, false
	}
	if raw, ok := obj[side]; ok {
		n, ok := jsonNumber(raw)
		if !ok {
			return 0, false
		}
		prefix := side + "_"
		for k, raw := range obj {
			if !strings.HasPrefix(k, prefix) || strings.HasPrefix(k[len(prefix):], "priority") {
				continue
			}
			if d, ok := jsonNumber(raw); ok {
				n += d
			}
		}
		return countFromFloat(float64(n), n <= maxCount)
	}
	rawKeys := [2]string{"prompt_tokens", "input_tokens"}
	if side == "output" {
		rawKeys = [2]string{"completion_tokens", "output_tokens"}
	}
	for _, k := range rawKeys {
		if raw, ok := obj[k]; ok {
			return jsonNumber(raw)
		}
	}
	return 0, false
}

// jsonNumber is a JSON value read as a token count.
func jsonNumber(raw json.RawMessage) (int64, bool) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false
	}
	f, err := n.Float64()
	return countFromFloat(f, err == nil)
}

// readDurationText is a duration printed by Rust's Debug for Duration
// ("12.3ms", "850µs", "1.000000001s"): finite, non-negative, under a week.
func readDurationText(v *commonpb.AnyValue) (time.Duration, bool) {
	s, ok := v.GetValue().(*commonpb.AnyValue_StringValue)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(s.StringValue))
	if err != nil || d < 0 || d > maxSeconds*time.Second {
		return 0, false
	}
	return d, true
}

// readEndpoint is the host and port of a URL ("http://vllm:8000/v1"); the
// port is the scheme's default when the URL names none.
func readEndpoint(v *commonpb.AnyValue) (string, uint16, bool) {
	s, ok := v.GetValue().(*commonpb.AnyValue_StringValue)
	if !ok || len(s.StringValue) > maxNameBytes {
		return "", 0, false
	}
	u, err := url.Parse(strings.TrimSpace(s.StringValue))
	if err != nil || u.Hostname() == "" {
		return "", 0, false
	}
	p := u.Port()
	if p == "" {
		switch u.Scheme {
		case "https":
			p = "443"
		case "http":
			p = "80"
		}
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		n = 0
	}
	return strings.ToLower(u.Hostname()), uint16(n), true
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
