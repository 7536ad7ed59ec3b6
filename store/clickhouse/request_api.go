package clickhouse

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tokenpath/tokenpath/telemetry"
)

// RequestField is one key of a request in the public API's JSON
// (docs/api.md, GET /api/v1/requests): a requestSchema column under its
// public name.
type RequestField struct {
	// Column is the llm_requests column, Key its name in the API.
	Column, Key string
	// OmitEmpty leaves the key out when its value is "" (string columns).
	OmitEmpty bool
	// AppendValue appends the field's JSON value for r, byte for byte as
	// encoding/json writes the Go value (TestRequestFieldsEncodeAsJSON).
	AppendValue func(dst []byte, r *telemetry.LLMRequest) ([]byte, error)
}

// RequestFields are a request's public keys, in requestSchema's order. The
// web package writes them and the few keys it derives (error_class,
// ttft_key) into the API's request JSON.
var RequestFields = func() []RequestField {
	var out []RequestField
	for _, c := range requestSchema {
		if c.api.key != "" {
			out = append(out, RequestField{Column: c.name, Key: c.api.key, OmitEmpty: c.api.omitEmpty, AppendValue: c.api.value})
		}
	}
	return out
}()

// apiField is how a column appears in the API's request JSON: under key,
// none when key is "".
type apiField struct {
	key       string
	omitEmpty bool
	value     func(dst []byte, q *rq) ([]byte, error)
}

func apiOf(name string, value func(dst []byte, q *rq) ([]byte, error)) apiField {
	return apiField{key: name, value: value}
}

// publicAs names the column key in the API instead of its own name.
func (c requestColumn) publicAs(key string) requestColumn {
	c.api.key = key
	return c
}

// omitEmpty leaves the column's key out of the API when its value is "".
func (c requestColumn) omitEmpty() requestColumn {
	c.api.omitEmpty = true
	return c
}

// internal keeps the column out of the API (the project, row versions).
func (c requestColumn) internal() requestColumn {
	c.api = apiField{}
	return c
}

func jsonString(f func(*rq) *string) func([]byte, *rq) ([]byte, error) {
	return func(dst []byte, q *rq) ([]byte, error) { return appendJSONString(dst, *f(q)), nil }
}

func jsonTime(f func(*rq) *time.Time) func([]byte, *rq) ([]byte, error) {
	return func(dst []byte, q *rq) ([]byte, error) {
		b, err := f(q).MarshalJSON()
		return append(dst, b...), err
	}
}

func jsonNullFloat(f func(*rq) **float64) func([]byte, *rq) ([]byte, error) {
	return func(dst []byte, q *rq) ([]byte, error) {
		if v := *f(q); v != nil {
			return appendJSONFloat(dst, *v)
		}
		return append(dst, "null"...), nil
	}
}

func jsonNullInt(f func(*rq) **int64) func([]byte, *rq) ([]byte, error) {
	return func(dst []byte, q *rq) ([]byte, error) {
		if v := *f(q); v != nil {
			return strconv.AppendInt(dst, *v, 10), nil
		}
		return append(dst, "null"...), nil
	}
}

func jsonUint(f func(*rq) *uint32) func([]byte, *rq) ([]byte, error) {
	return func(dst []byte, q *rq) ([]byte, error) { return strconv.AppendUint(dst, uint64(*f(q)), 10), nil }
}

func jsonInt(f func(*rq) *int) func([]byte, *rq) ([]byte, error) {
	return func(dst []byte, q *rq) ([]byte, error) { return strconv.AppendInt(dst, int64(*f(q)), 10), nil }
}

func jsonBool(f func(*rq) *bool) func([]byte, *rq) ([]byte, error) {
	return func(dst []byte, q *rq) ([]byte, error) { return strconv.AppendBool(dst, *f(q)), nil }
}

// appendJSONString writes s as encoding/json does: a plain ASCII string
// as it is, anything it would escape (HTML characters, controls, invalid
// UTF-8, U+2028) through encoding/json itself.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendJSONFloat writes f as encoding/json writes a float64 (ES6 number
// form: an exponent below 1e-6 and from 1e21); NaN and ±Inf are errors,
// as there.
func appendJSONFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if n := len(dst); format == 'e' && n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
		dst[n-2] = dst[n-1] // e-09 → e-9
		dst = dst[:n-1]
	}
	return dst, nil
}
