package clickhouse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TestQueryRollupMinutes: the per-minute rollup's rows come back through
// the typed reader as the generic path reads them, a re-assembly's
// retraction included as a row of its own, and summing a minute's rows
// gives its live requests and histogram counts; a recorded read runs
// again through the same reader (Recorded.Rerun).
func TestQueryRollupMinutes(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	var reqs []telemetry.LLMRequest
	for i := range 120 {
		r := telemetry.LLMRequest{ProjectID: 7, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: "chat", ServerService: "vllm", Model: "m", Provider: "vllm", Start: t0.Add(time.Duration(i) * 2 * time.Second),
			TTFT: telemetry.Ptr(float64(100 + i)), ITL: telemetry.Ptr(float64(10 + i%7)), Error: i%10 == 0}
		reqs = append(reqs, r)
	}
	if err := s.Insert(ctx, RequestsBatch(reqs, nil, 1)); err != nil {
		t.Fatal(err)
	}
	// Re-assembly of the first request: the old version is retracted.
	again := reqs[0]
	again.TTFT = telemetry.Ptr(5000.0)
	if err := s.Insert(ctx, RequestsRewriteBatch([]telemetry.LLMRequest{again}, nil, reqs[:1], 2)); err != nil {
		t.Fatal(err)
	}
	q := "SELECT " + RollupMinutesColumns + " FROM " + EpisodeRollup + " WHERE project_id = ? ORDER BY minute, requests"
	rows, err := s.QueryRollupMinutes(ctx, q, 7)
	if err != nil {
		t.Fatal(err)
	}
	typedMatchesScan(t, s, s.QueryRollupMinutes, scanRollupMinutes, len(rows), q)
	if len(rows) < 5 { // 4 minutes, and the re-assembly's row
		t.Fatalf("%d rows, want the 4 minutes' and the re-assembly's", len(rows))
	}
	requests, errs := map[time.Time]int64{}, int64(0)
	ttft := map[int16]int64{}
	for _, r := range rows {
		if r.Service != "chat" || r.ServerService != "vllm" {
			t.Fatalf("row of %q → %q", r.Service, r.ServerService)
		}
		requests[r.Minute] += r.Requests
		errs += r.Errors
		for i, b := range r.TTFT {
			if i > 0 && r.TTFT[i-1].Key >= b.Key {
				t.Fatalf("TTFT keys out of order: %v", r.TTFT)
			}
			ttft[b.Key] += b.Count
		}
	}
	for m := range 4 {
		if n := requests[t0.Add(time.Duration(m)*time.Minute)]; n != 30 {
			t.Errorf("minute %d sums to %d requests, want 30", m, n)
		}
	}
	if errs != 12 {
		t.Errorf("%d errors, want 12", errs)
	}
	shared := int64(0) // the requests in the retracted one's bucket
	for i := range 120 {
		if HistKey(float64(100+i)) == HistKey(100) {
			shared++
		}
	}
	if got := ttft[int16(HistKey(100))]; got != shared-1 || ttft[int16(HistKey(5000))] != 1 {
		t.Errorf("the retracted TTFT's bucket counts %d (want %d), its successor's %d (want 1)", got, shared-1, ttft[int16(HistKey(5000))])
	}

	rec := &Recorder{}
	if _, err := s.QueryRollupMinutes(WithRecorder(ctx, rec), q, 7); err != nil {
		t.Fatal(err)
	}
	st := rec.Statements()
	if len(st) != 1 {
		t.Fatalf("recorded %d statements, want 1", len(st))
	}
	if n, err := st[0].Rerun(ctx); err != nil || n != len(rows) {
		t.Errorf("rerun read %d rows (%v), want %d", n, err, len(rows))
	}
}
