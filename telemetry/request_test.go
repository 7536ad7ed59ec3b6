package telemetry

import (
	"reflect"
	"testing"
	"time"
)

// Every field of LLMRequest must take part in Equal: changing any one of
// them (found by reflection, so a new field is covered) makes two requests
// differ.
func TestLLMRequestEqualCoversEveryField(t *testing.T) {
	base := LLMRequest{ProjectID: 1, TraceID: "t", SpanID: "s", Service: "a", ServerService: "b", Model: "m",
		Provider: "p", Instance: "i", Start: time.Unix(100, 5).UTC(), TTFT: Ptr(1.0), PreInference: Ptr(2.0),
		Queue: Ptr(3.0), Prefill: Ptr(4.0), Network: Ptr(5.0), Decode: Ptr(6.0), E2E: Ptr(7.0), ITL: Ptr(8.0),
		ColdStartWait: Ptr(9.0), InputTokens: Ptr(int64(10)), OutputTokens: Ptr(int64(11)), CallIndex: 1,
		Route: "r", Tenant: "x", Preemptions: Ptr(int64(2))}
	same := base
	same.TTFT = Ptr(1.0) // another pointer to the same value
	same.Start = base.Start.In(time.FixedZone("x", 3600))
	if !base.Equal(&same) {
		t.Fatal("equal requests reported different")
	}
	v := reflect.TypeOf(base)
	for i := range v.NumField() {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "?")
		case reflect.Uint32, reflect.Uint64:
			f.SetUint(f.Uint() + 1)
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Pointer:
			f.Set(reflect.Zero(f.Type())) // nil against a value
		case reflect.Struct: // time.Time
			changed.Start = base.Start.Add(time.Nanosecond)
		default:
			t.Fatalf("field %s: kind %s not covered by this test", v.Field(i).Name, f.Kind())
		}
		if base.Equal(&changed) {
			t.Errorf("changing %s leaves the requests equal", v.Field(i).Name)
		}
	}
}
