package web

import (
	"encoding/json"
	"fmt"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// requestJSON is one LLM request in the public API's shape (docs/api.md):
// the public columns of llm_requests in their order
// (clickhouse.RequestFields), with the keys the API derives
// (requestDerived) in the place of the column they come from.
// TestRequestJSONGolden holds the shape; TestRequestJSONDocumented the docs.
type requestJSON struct{ r telemetry.LLMRequest }

func toRequestJSON(r telemetry.LLMRequest) requestJSON { return requestJSON{r} }

// MarshalJSON writes the request's keys (requestKeys).
func (j requestJSON) MarshalJSON() ([]byte, error) {
	o := jsonObject{buf: make([]byte, 1, 1024)}
	o.buf[0] = '{'
	for _, write := range requestKeys {
		if err := write(&o, &j.r); err != nil {
			return nil, fmt.Errorf("request %s/%s: %w", j.r.TraceID, j.r.SpanID, err)
		}
	}
	return append(o.buf, '}'), nil
}

// requestDerived writes, in place of a column (by its llm_requests name),
// keys whose values the API derives rather than copies.
var requestDerived = map[string]func(o *jsonObject, r *telemetry.LLMRequest) error{
	// A failed call's error type and its class (rate_limit, server_error,
	// timeout, other, unnamed); both left out on success.
	"error_type": func(o *jsonObject, r *telemetry.LLMRequest) error {
		if !r.Error {
			return nil
		}
		if err := o.stringKey("error_type", r.ErrorType, true); err != nil {
			return err
		}
		return o.stringKey("error_class", diagnose.ErrorClass(r.ErrorType), true)
	},
	// The kind of TTFT source and, for a client one, its wire key.
	"ttft_source": func(o *jsonObject, r *telemetry.LLMRequest) error {
		kind, key := ttftSource(r)
		if err := o.stringKey("ttft_source", kind, false); err != nil {
			return err
		}
		return o.stringKey("ttft_key", key, true)
	},
	"token_source": func(o *jsonObject, r *telemetry.LLMRequest) error {
		return o.stringKey("token_source", tokenSource(r), false)
	},
}

// requestKeys write a request's keys in order: each public column's, or
// what requestDerived writes in its place.
var requestKeys = func() []func(o *jsonObject, r *telemetry.LLMRequest) error {
	var out []func(o *jsonObject, r *telemetry.LLMRequest) error
	for _, f := range clickhouse.RequestFields {
		if d := requestDerived[f.Column]; d != nil {
			out = append(out, d)
			continue
		}
		out = append(out, func(o *jsonObject, r *telemetry.LLMRequest) error {
			mark := len(o.buf)
			o.key(f.Key)
			at := len(o.buf)
			var err error
			if o.buf, err = f.AppendValue(o.buf, r); err != nil {
				return err
			}
			if f.OmitEmpty && string(o.buf[at:]) == `""` {
				o.buf = o.buf[:mark]
			}
			return nil
		})
	}
	return out
}()

// jsonObject is a JSON object being written; buf holds its "{" and the
// keys so far.
type jsonObject struct{ buf []byte }

// key writes a key (a plain ASCII name) and its colon.
func (o *jsonObject) key(k string) {
	if len(o.buf) > 1 {
		o.buf = append(o.buf, ',')
	}
	o.buf = append(o.buf, '"')
	o.buf = append(o.buf, k...)
	o.buf = append(o.buf, '"', ':')
}

// stringKey writes a key with a string value, none when omitEmpty and v
// is "".
func (o *jsonObject) stringKey(k, v string, omitEmpty bool) error {
	if omitEmpty && v == "" {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	o.key(k)
	o.buf = append(o.buf, b...)
	return nil
}
