package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// BenchmarkQueryRequests reads 30k llm_requests rows through the embedded
// engine: the shape a diagnosis loads for a 1 h window and its baseline.
func BenchmarkQueryRequests(b *testing.B) {
	s := migratedStore(b)
	rows := storeRequests(b, s, 30_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := s.Query(context.Background(), "SELECT "+RequestColumns+" FROM llm_requests FINAL WHERE project_id = ?", uint32(1))
		if err != nil || r.Len() != len(rows) {
			b.Fatal(err, r.Len())
		}
		_ = ScanRequests(r)
	}
}

// migratedStore opens an embedded store in a fresh directory with the
// schema applied; it closes when the benchmark ends.
func migratedStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), Config{DataDir: b.TempDir()}, quietLog)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkDecodeRequests decodes 30k rows of the engine's RowBinary
// answer into requests (what QueryRequests does after the engine ran).
func BenchmarkDecodeRequests(b *testing.B) {
	s := migratedStore(b)
	rows := storeRequests(b, s, 30_000)
	e, ok := s.b.(*embedded)
	if !ok {
		b.Fatal("not the embedded engine")
	}
	out, err := e.run(context.Background(), "SELECT "+RequestColumns+" FROM llm_requests FINAL WHERE project_id = 1", rowBinaryFormat)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		reqs, err := decodeRequests(out)
		if err != nil || len(reqs) != len(rows) {
			b.Fatal(err, len(reqs))
		}
	}
}

// storeRequests stores n requests of the last hour, 100 ms apart, and
// returns them.
func storeRequests(b *testing.B, s *Store, n int) []telemetry.LLMRequest {
	b.Helper()
	t0 := time.Now().Add(-time.Hour)
	rows := make([]telemetry.LLMRequest, n)
	for i := range rows {
		rows[i] = telemetry.LLMRequest{ProjectID: 1, TraceID: time.Duration(i).String(), SpanID: "s", Service: "chat", Model: "m",
			Instance: "i", Start: t0.Add(time.Duration(i) * time.Millisecond * 100), TTFT: telemetry.Ptr(float64(i % 1000)),
			Queue: telemetry.Ptr(1.5), Prefill: telemetry.Ptr(2.5), Decode: telemetry.Ptr(3.5), E2E: telemetry.Ptr(9.5),
			InputTokens: telemetry.Ptr[int64](100), OutputTokens: telemetry.Ptr[int64](10), Tenant: "acme", Route: "/v1/chat"}
	}
	if err := s.Insert(context.Background(), RequestsBatch(rows, nil, 1)); err != nil {
		b.Fatal(err)
	}
	return rows
}
