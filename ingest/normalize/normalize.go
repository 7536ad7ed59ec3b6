// Package normalize maps every wire convention Tokenpath accepts (OTel GenAI
// semconv old and new, vLLM, OpenLIT, OpenLLMetry, OpenInference, Langfuse,
// Prometheus expositions of vLLM/SGLang/TGI, Kubernetes events) into the
// canonical rows of package telemetry. It is the one place that knows
// attribute names: the tables in conventions.go, metric_name.go and
// events.go are the documentation of what is accepted.
//
// Everything here is pure: no I/O besides reading a scrape body, no clock
// (callers pass now), and hostile input is clamped or rejected, never allowed
// to panic.
package normalize

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
)

// Limits clamps hostile input. The zero value (or any non-positive field)
// means the defaults: 256 attributes per span, values truncated to 16 KiB,
// keys to 256 bytes. Span, metric and event names are always cut to 1 KiB.
type Limits struct{ MaxAttributes, MaxValueBytes, MaxKeyBytes int }

const (
	defaultMaxAttributes = 256
	defaultMaxValueBytes = 16 << 10
	defaultMaxKeyBytes   = 256
	maxNameBytes         = 1 << 10
	// maxErrors bounds the reasons kept for partial_success.error_message:
	// a client needs an example of what is wrong, not ten thousand copies.
	maxErrors = 5
	// maxJSONDepth stops recursion on nested arrays/kvlists; protobuf
	// allows thousands of levels, no real attribute needs more than a few.
	maxJSONDepth = 16
)

// withDefaults fills non-positive fields with the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxAttributes <= 0 {
		l.MaxAttributes = defaultMaxAttributes
	}
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = defaultMaxValueBytes
	}
	if l.MaxKeyBytes <= 0 {
		l.MaxKeyBytes = defaultMaxKeyBytes
	}
	return l
}

// oldest is the earliest timestamp accepted: anything before is a clock that
// was never set (1970) or a unit mistake (seconds sent as nanoseconds).
var oldest = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// maxFuture is how far past the receiver's clock a timestamp may be: clock
// skew is real, a year-2300 span is not.
const maxFuture = 24 * time.Hour

// unixNanos converts an OTLP fixed64 timestamp; values past int64 are
// clamped to the largest time so that validation rejects them as future.
func unixNanos(ns uint64) time.Time {
	if ns > math.MaxInt64 {
		ns = math.MaxInt64
	}
	return time.Unix(0, int64(ns)).UTC()
}

// checkTime returns why t is not a plausible telemetry timestamp, or "".
func checkTime(what string, t, now time.Time) string {
	if t.Before(oldest) {
		return fmt.Sprintf("%s %s is before 2000-01-01", what, t.Format(time.RFC3339))
	}
	if t.After(now.Add(maxFuture)) {
		return fmt.Sprintf("%s %s is more than 24h in the future", what, t.Format(time.RFC3339))
	}
	return ""
}

// errorLog counts rejects and keeps the first few reasons.
type errorLog struct {
	rejected int64
	reasons  []string
}

func (e *errorLog) reject(reason string) {
	e.rejected++
	if len(e.reasons) < maxErrors {
		e.reasons = append(e.reasons, reason)
	}
}

// flattenAttributes turns OTLP attributes into the string map stored in
// ClickHouse: at most lim.MaxAttributes keys (wire order, later duplicates
// overwrite earlier ones), keys and values clamped.
func flattenAttributes(kvs []*commonpb.KeyValue, lim Limits) map[string]string {
	out := make(map[string]string, min(len(kvs), lim.MaxAttributes))
	for _, kv := range kvs {
		if kv == nil {
			continue
		}
		key := cleanString(kv.Key, lim.MaxKeyBytes)
		if _, seen := out[key]; !seen && len(out) >= lim.MaxAttributes {
			continue
		}
		out[key] = valueString(kv.Value, lim.MaxValueBytes)
	}
	return out
}

func resourceAttributes(r *resourcepb.Resource, lim Limits) map[string]string {
	return flattenAttributes(r.GetAttributes(), lim)
}

// valueString formats one AnyValue as stored: strings as sent, numbers and
// bools canonically, bytes as base64 (as OTLP/JSON does), arrays and kvlists
// as compact JSON. The result is valid UTF-8 of at most max bytes.
func valueString(v *commonpb.AnyValue, max int) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return cleanString(x.StringValue, max)
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return formatFloat(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_BytesValue:
		return cleanString(base64.StdEncoding.EncodeToString(x.BytesValue), max)
	case *commonpb.AnyValue_ArrayValue, *commonpb.AnyValue_KvlistValue:
		w := jsonWriter{max: max}
		w.value(v, 0)
		return cleanString(w.b.String(), max)
	}
	// Unset, or string_value_strindex, which only means something in the
	// profiling signal: the spec says to treat it as absent.
	return ""
}

// formatFloat is the shortest representation that round-trips, the same
// text JavaScript and Python print for the common cases (0.5, 3, 1e+21).
func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// jsonWriter renders arrays and kvlists as compact JSON and stops writing
// once max bytes are out, so a hostile 10^6-element array costs one pass.
type jsonWriter struct {
	b   strings.Builder
	max int
}

func (w *jsonWriter) full() bool { return w.b.Len() > w.max }

func (w *jsonWriter) value(v *commonpb.AnyValue, depth int) {
	if w.full() {
		return
	}
	if depth > maxJSONDepth {
		w.b.WriteString("null")
		return
	}
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		w.str(x.StringValue)
	case *commonpb.AnyValue_IntValue:
		w.b.WriteString(strconv.FormatInt(x.IntValue, 10))
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			// JSON has no NaN/Inf literal; a string keeps the fact.
			w.str(formatFloat(x.DoubleValue))
		} else {
			w.b.WriteString(formatFloat(x.DoubleValue))
		}
	case *commonpb.AnyValue_BoolValue:
		w.b.WriteString(strconv.FormatBool(x.BoolValue))
	case *commonpb.AnyValue_BytesValue:
		w.str(base64.StdEncoding.EncodeToString(x.BytesValue))
	case *commonpb.AnyValue_ArrayValue:
		w.b.WriteByte('[')
		for i, e := range x.ArrayValue.GetValues() {
			if w.full() {
				return
			}
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.value(e, depth+1)
		}
		w.b.WriteByte(']')
	case *commonpb.AnyValue_KvlistValue:
		w.b.WriteByte('{')
		for i, kv := range x.KvlistValue.GetValues() {
			if w.full() {
				return
			}
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.str(kv.GetKey())
			w.b.WriteByte(':')
			w.value(kv.GetValue(), depth+1)
		}
		w.b.WriteByte('}')
	default:
		w.b.WriteString("null")
	}
}

// str writes a JSON string literal; invalid UTF-8 becomes U+FFFD.
func (w *jsonWriter) str(s string) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	w.b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			w.b.WriteByte('\\')
			w.b.WriteByte(c)
		case c == '\n':
			w.b.WriteString(`\n`)
		case c == '\r':
			w.b.WriteString(`\r`)
		case c == '\t':
			w.b.WriteString(`\t`)
		case c < 0x20:
			fmt.Fprintf(&w.b, `\u%04x`, c)
		default:
			w.b.WriteByte(c)
		}
		if w.full() {
			return
		}
	}
	w.b.WriteByte('"')
}

// stringAttr returns the string form of the first attribute named key in
// kvs, cleaned and clamped; used for identity attributes (service.name …).
func stringAttr(kvs []*commonpb.KeyValue, key string, max int) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return valueString(kv.GetValue(), max)
		}
	}
	return ""
}

// serviceOf is resource service.name, or the OTel SDK default when unset.
func serviceOf(r *resourcepb.Resource) string {
	if s := stringAttr(r.GetAttributes(), "service.name", maxNameBytes); s != "" {
		return s
	}
	return "unknown_service"
}

// instanceKeys are the resource attributes that name one running replica,
// best first: the SDK's own id, the pod, the host.
var instanceKeys = []string{"service.instance.id", "k8s.pod.name", "host.name"}

func instanceOf(r *resourcepb.Resource) string {
	for _, k := range instanceKeys {
		if s := stringAttr(r.GetAttributes(), k, maxNameBytes); s != "" {
			return s
		}
	}
	return ""
}

// idHex renders an id for an error message, short enough to read.
func idHex(id []byte) string {
	if len(id) > 16 {
		id = id[:16]
	}
	if len(id) == 0 {
		return "<empty>"
	}
	return hex.EncodeToString(id)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
func clip(s string) string {
	if len(s) > 64 {
		return cleanString(s, 64) + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
