package clickhouse

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// requestFieldOf is the LLMRequest field each public column holds.
var requestFieldOf = map[string]string{
	"trace_id": "TraceID", "span_id": "SpanID", "service": "Service", "server_service": "ServerService",
	"model": "Model", "provider": "Provider", "instance": "Instance", "start": "Start", "ttft_ms": "TTFT",
	"pre_inference_ms": "PreInference", "queue_ms": "Queue", "prefill_ms": "Prefill", "network_ms": "Network",
	"decode_ms": "Decode", "e2e_ms": "E2E", "itl_ms": "ITL", "cold_start_wait_ms": "ColdStartWait",
	"input_tokens": "InputTokens", "output_tokens": "OutputTokens", "cold_start": "ColdStart", "error": "Error",
	"error_type": "ErrorType", "call_index": "CallIndex", "route": "Route", "tenant": "Tenant", "join_method": "Join",
	"server_trace_id": "ServerTraceID", "server_span_id": "ServerSpanID", "ttft_source": "TTFTSource",
	"token_source": "TokenSource", "preemptions": "Preemptions",
}

// TestRequestFieldsEncodeAsJSON: each public column writes its field's
// value byte for byte as encoding/json writes the Go value, for plain
// values and those encoding/json escapes or writes with an exponent; the
// keys are unique plain names, left out when empty only for strings, and
// the internal columns (project, row versions) have none.
func TestRequestFieldsEncodeAsJSON(t *testing.T) {
	// Zeros and an exponent where the full request has plain values.
	plain := fullRequest()
	plain.PreInference, plain.Queue, plain.Prefill, plain.OutputTokens = telemetry.Ptr(0.0), telemetry.Ptr(3.25), telemetry.Ptr(4e6), telemetry.Ptr(int64(0))
	odd := plain
	odd.Service, odd.Route, odd.Tenant, odd.Model = "<b>&amp;\"q\"\\", "a\u2028b\u2029\x7f\n", "bad\xff\xfe", "日本語"
	odd.TTFT, odd.Queue, odd.Prefill, odd.Decode = telemetry.Ptr(1e-7), telemetry.Ptr(1e21), telemetry.Ptr(-2.5e-9), telemetry.Ptr(math.SmallestNonzeroFloat64)
	odd.E2E, odd.ITL, odd.Network = telemetry.Ptr(math.MaxFloat64), telemetry.Ptr(0.000001), telemetry.Ptr(123456789012345678.0)
	odd.InputTokens, odd.Preemptions, odd.CallIndex = telemetry.Ptr(int64(math.MinInt64)), telemetry.Ptr(int64(math.MaxInt64)), 65535
	odd.Start = time.Date(1999, 1, 2, 3, 4, 5, 6, time.FixedZone("x", -5400))
	keys := map[string]bool{}
	for _, f := range RequestFields {
		if keys[f.Key] || strings.Trim(f.Key, "abcdefghijklmnopqrstuvwxyz_0123456789") != "" {
			t.Errorf("key %q of %s: not a unique plain name", f.Key, f.Column)
		}
		keys[f.Key] = true
		name, ok := requestFieldOf[f.Column]
		if !ok {
			t.Errorf("public column %s: add its LLMRequest field to requestFieldOf", f.Column)
			continue
		}
		for _, r := range []telemetry.LLMRequest{plain, odd, {}} {
			v := reflect.ValueOf(r).FieldByName(name)
			if f.OmitEmpty && v.Kind() != reflect.String {
				t.Errorf("%s leaves out empty values but holds a %s", f.Column, v.Kind())
			}
			want, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.AppendValue([]byte("x"), &r)
			if err != nil || string(got) != "x"+string(want) {
				t.Errorf("%s: wrote %s (%v), encoding/json writes %s", f.Column, got, err, want)
			}
		}
	}
	for _, internal := range []string{"project_id", "version", "is_deleted"} {
		for _, f := range RequestFields {
			if f.Column == internal {
				t.Errorf("internal column %s is public as %s", internal, f.Key)
			}
		}
	}
	nan := plain
	nan.Queue = telemetry.Ptr(math.NaN())
	for _, f := range RequestFields {
		if f.Column == "queue_ms" {
			if _, err := f.AppendValue(nil, &nan); err == nil {
				t.Error("a NaN duration encoded without an error (encoding/json refuses it)")
			}
		}
	}
}
