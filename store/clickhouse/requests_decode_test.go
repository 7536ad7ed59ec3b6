package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TestQueryRequestsMatchesScan: the typed decoder yields exactly what the
// generic path (Result, then ScanRequests) yields from the same rows (NULLs
// included), and a statement with other columns falls
// back to the generic path.
func TestQueryRequestsMatchesScan(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	base := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	var rows []telemetry.LLMRequest
	for i := 0; i < 300; i++ {
		r := telemetry.LLMRequest{ProjectID: 7, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: []string{"chat", "rag"}[i%2], ServerService: "vllm", Model: "m", Provider: "vllm", Instance: fmt.Sprintf("pod-%d", i%3),
			Start: base.Add(time.Duration(i) * time.Millisecond), CallIndex: i % 4, ColdStart: i%5 == 0, Error: i%7 == 0,
			Route: "/v1/chat", Tenant: fmt.Sprintf("t%d", i%11)}
		if i%3 != 0 { // every third leaves the optional figures NULL
			r.TTFT, r.Queue, r.Prefill = telemetry.Ptr(float64(i)+0.25), telemetry.Ptr(1.5), telemetry.Ptr(0.0)
			r.PreInference, r.Network, r.Decode, r.E2E = telemetry.Ptr(2.0), telemetry.Ptr(3.0), telemetry.Ptr(4.0), telemetry.Ptr(5.0)
			r.ITL, r.ColdStartWait = telemetry.Ptr(6.0), telemetry.Ptr(7.0)
			r.InputTokens, r.OutputTokens = telemetry.Ptr(int64(i*10)), telemetry.Ptr(int64(-1))
		}
		rows = append(rows, r)
	}
	if err := s.Insert(ctx, RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"SELECT " + RequestColumns + " FROM llm_requests FINAL WHERE project_id = ? ORDER BY start",
		"SELECT " + RequestColumns + ", version FROM llm_requests WHERE project_id = ? ORDER BY start", // version: generic path
	} {
		got, err := s.QueryRequests(ctx, q, 7)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Query(ctx, q, 7)
		if err != nil {
			t.Fatal(err)
		}
		if want := ScanRequests(r); !reflect.DeepEqual(got, want) {
			for i := range want {
				if i < len(got) && !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("%.60s: row %d\n got  %+v\n want %+v", q, i, got[i], want[i])
				}
			}
			t.Fatalf("%.60s: %d rows, want %d", q, len(got), len(want))
		}
		if len(got) != len(rows) {
			t.Fatalf("%d rows, want %d", len(got), len(rows))
		}
	}
	// The typed path really is taken for RequestColumns.
	out, err := s.b.(*embedded).run(ctx, "SELECT "+RequestColumns+" FROM llm_requests", rowBinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeRequests(out); err != nil {
		t.Fatalf("RequestColumns do not decode on the typed path: %v", err)
	}
	if _, err := decodeRequests(out[:len(out)-3]); err == nil || errors.Is(err, errUnsupportedType) {
		t.Errorf("truncated output: %v, want a decode error", err)
	}
}
