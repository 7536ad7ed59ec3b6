package normalize

import "strconv"

// errorTypeKey is an attribute that names the class of error a call ended
// with. MinStatus > 0 marks an HTTP status code, which a span carries on
// success too: only a status of at least MinStatus names an error.
type errorTypeKey struct {
	Attr      string
	MinStatus int64
}

// errorTypeKeys are tried in order; the first that names an error wins.
var errorTypeKeys = []errorTypeKey{
	// OTel semconv error.type (open-telemetry/semantic-conventions
	// docs/gen-ai/gen-ai-spans.md, "error.type": the status code for an
	// HTTP error, else a low-cardinality class); the Python GenAI
	// instrumentations set the exception's class name, e.g. RateLimitError
	// (open-telemetry/opentelemetry-python-contrib instrumentation-genai/
	// opentelemetry-instrumentation-openai-v2/src/opentelemetry/
	// instrumentation/openai_v2/utils.py handle_span_exception).
	{Attr: "error.type"},
	// HTTP client spans: semconv http.response.status_code
	// (docs/http/http-spans.md), before v1.21 http.status_code.
	{Attr: "http.response.status_code", MinStatus: 400},
	{Attr: "http.status_code", MinStatus: 400},
}

// maxErrorTypeBytes bounds the stored class: it is a low-cardinality
// label, not a message.
const maxErrorTypeBytes = 64

// errorType is the error class the span's attributes name, or "".
func (v *spanView) errorType() string {
	for _, k := range errorTypeKeys {
		t := v.text(k.Attr, maxErrorTypeBytes)
		if t == "" {
			continue
		}
		if k.MinStatus > 0 {
			code, err := strconv.ParseInt(t, 10, 64)
			if err != nil || code < k.MinStatus {
				continue
			}
		}
		return t
	}
	return ""
}
