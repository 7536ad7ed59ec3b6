package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

func TestParseEvents(t *testing.T) {
	now := time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)
	many := "[" + strings.Repeat(`{"service":"s","to_replicas":1},`, MaxEventsPerRequest) + `{"service":"s","to_replicas":1}]`
	tests := []struct {
		name, body string
		want       []string // kind/service/instance/time/from→to per event
		err        string
	}{
		{name: "single object",
			body: `{"time":"2026-12-02T14:02:10Z","kind":"scale","service":"vllm","from_replicas":0,"to_replicas":2,"reason":"KEDA","source":"keda"}`,
			want: []string{"scale/vllm//2026-12-02T14:02:10Z/0→2"}},
		{name: "array, defaults and fractional time",
			body: ` [{"service":"vllm","to_replicas":3,"time":"2026-12-02T16:02:10.5+02:00"},
			        {"kind":"k8s","service":" sglang ","instance":"sglang-7f9c","attributes":{"reason":"Pulled"}}] `,
			want: []string{"scale/vllm//2026-12-02T14:02:10.5Z/nil→3", "k8s/sglang/sglang-7f9c/2026-12-02T14:30:00Z/nil→nil"}},
		{name: "hidden characters stripped",
			body: `{"service":"\u202e vllm\u0000","instance":"i\u2066","kind":"k8s\u001b","attributes":{"r\u200b":"x\u0085"}}`,
			want: []string{"k8s/vllm/i/2026-12-02T14:30:00Z/nil→nil"}},
		{name: "only hidden characters", body: `{"service":"\u202e","to_replicas":1}`, err: "event 0: service is required"},
		{name: "missing service", body: `[{"service":"a","to_replicas":1},{"to_replicas":1}]`, err: "event 1: service is required"},
		{name: "blank service", body: `{"service":"  ","to_replicas":1}`, err: "event 0: service is required"},
		{name: "bad time", body: `{"service":"a","to_replicas":1,"time":"02/12/2026 14:02"}`, err: "not RFC 3339"},
		{name: "time before 2000", body: `{"service":"a","to_replicas":1,"time":"1970-01-01T00:00:00Z"}`, err: "out of range"},
		{name: "time far in the future", body: `{"service":"a","to_replicas":1,"time":"2300-01-01T00:00:00Z"}`, err: "out of range"},
		{name: "too many events", body: many, err: fmt.Sprintf("%d events in one request; the limit is %d", MaxEventsPerRequest+1, MaxEventsPerRequest)},
		{name: "unknown field", body: `{"service":"a","to_replicas":1,"replicas":3}`, err: `unknown field "replicas"`},
		{name: "unknown field in array", body: `[{"service":"a","to_replicas":1,"extra":true}]`, err: `unknown field "extra"`},
		{name: "scale without to_replicas", body: `{"service":"a"}`, err: "needs to_replicas"},
		{name: "negative replicas", body: `{"service":"a","to_replicas":-1}`, err: "between 0 and 100000"},
		{name: "replicas not a number", body: `{"service":"a","to_replicas":"3"}`, err: "invalid event JSON"},
		{name: "long service", body: `{"service":"` + strings.Repeat("s", 257) + `","to_replicas":1}`, err: "too long"},
		{name: "empty body", body: " \n", err: "empty body"},
		{name: "not JSON", body: `kind=scale`, err: "invalid event JSON"},
		{name: "truncated array", body: `[{"service":"a","to_replicas":1}`, err: "invalid events JSON"},
		// Newline-delimited objects would otherwise store the first and drop
		// the rest while answering 2xx.
		{name: "two concatenated objects", body: `{"service":"a","to_replicas":1}` + "\n" + `{"service":"b","to_replicas":1}`, err: "after the JSON value"},
		{name: "trailing garbage after array", body: `[{"service":"a","to_replicas":1}] x`, err: "after the JSON value"},
		{name: "null", body: `null`, err: "service is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := ParseEvents([]byte(tt.body), 7, now)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				if evs != nil {
					t.Errorf("events returned with an error: %d", len(evs))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				if e.ProjectID != 7 {
					t.Errorf("project = %d", e.ProjectID)
				}
				got = append(got, fmt.Sprintf("%s/%s/%s/%s/%s→%s", e.Kind, e.Service, e.Instance, e.Time.Format(time.RFC3339Nano), replicas(e.FromReplicas), replicas(e.ToReplicas)))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("events\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func replicas(p *int32) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// FuzzParseEvents: no input panics, and whatever is accepted is valid.
func FuzzParseEvents(f *testing.F) {
	for _, seed := range []string{
		`{"time":"2026-12-02T14:02:10Z","kind":"scale","service":"vllm","from_replicas":0,"to_replicas":2}`,
		`[{"service":"a","to_replicas":1},{"kind":"k8s","service":"b","attributes":{"x":"y"}}]`,
		`[]`, `null`, `{}`, `[{"service":"a","to_replicas":1}] x`, `{"service":"\u0000","to_replicas":100001}`,
	} {
		f.Add([]byte(seed))
	}
	now := time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := ParseEvents(body, 1, now)
		if err != nil {
			if evs != nil {
				t.Fatalf("events with an error: %v", err)
			}
			return
		}
		if len(evs) > MaxEventsPerRequest {
			t.Fatalf("%d events accepted", len(evs))
		}
		for i, e := range evs {
			if e.Service == "" || e.Kind == "" || e.ProjectID != 1 {
				t.Fatalf("event %d accepted without service/kind/project: %+v", i, e)
			}
			if e.Time.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) || e.Time.After(now.Add(24*time.Hour)) {
				t.Fatalf("event %d time %s accepted", i, e.Time)
			}
			if e.Kind == telemetry.EventScale && e.ToReplicas == nil {
				t.Fatalf("scale event %d without to_replicas", i)
			}
		}
	})
}
