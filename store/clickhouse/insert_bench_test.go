package clickhouse

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// BenchmarkInsertSpans measures the embedded engine's insert rate for
// span-shaped rows with ~42 attributes (22 span, 20 resource), 10k rows per
// INSERT: resource maps inline in every row (as before the resources table)
// against a resource_hash per row, and the latter without the trace_bounds
// materialized view (what the view adds to every span insert).
func BenchmarkInsertSpans(b *testing.B) {
	const n = 10_000
	t0 := time.Now().Add(-time.Hour)
	res := map[string]string{}
	for a := 0; a < 20; a++ {
		res[fmt.Sprintf("resource.key.%d", a)] = fmt.Sprintf("resource-value-%d", a)
	}
	spans := make([]telemetry.Span, n)
	for i := range spans {
		attrs := map[string]string{}
		for a := 0; a < 22; a++ {
			attrs[fmt.Sprintf("attr.key.%d", a)] = fmt.Sprintf("value-%d-%d", a, i%97)
		}
		spans[i] = telemetry.Span{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i/4), SpanID: fmt.Sprintf("%016x", i), Service: "chat",
			Name: "span", Start: t0.Add(time.Duration(i) * time.Millisecond), End: t0.Add(time.Duration(i)*time.Millisecond + time.Second),
			Attributes: attrs, Resource: res}
	}
	for _, mode := range []string{"resource_inline", "resource_hash", "resource_hash_without_trace_bounds"} {
		b.Run(mode, func(b *testing.B) {
			// A store per mode, so no mode inserts into another's rows.
			s := migratedStore(b)
			h := uint64(0)
			if mode != "resource_inline" {
				h = telemetry.ResourceHash(1, res)
			}
			if mode == "resource_hash_without_trace_bounds" {
				if err := s.Exec(context.Background(), "DROP VIEW trace_bounds_mv"); err != nil {
					b.Fatal(err)
				}
			}
			for i := range spans {
				spans[i].ResourceHash = h
			}
			batch := SpansBatch(spans)
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				if err := s.Insert(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			// CPU, not wall: the machine is shared. Background merges count too.
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(n*b.N), "cpu-ns/row")
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncodeSpans is the receiver's per-export work for the embedded
// engine: 1000 spans of ~40 attributes to one Native block (the bytes the
// pipeline holds until the insert), against SpansBatch + encodeNative.
func BenchmarkEncodeSpans(b *testing.B) {
	t0 := time.Now().Add(-time.Hour)
	res := map[string]string{}
	for a := 0; a < 20; a++ {
		res[fmt.Sprintf("resource.key.%d", a)] = fmt.Sprintf("resource-value-%d", a)
	}
	spans := make([]telemetry.Span, 1000)
	for i := range spans {
		attrs := map[string]string{}
		for a := 0; a < 22; a++ {
			attrs[fmt.Sprintf("attr.key.%d", a)] = fmt.Sprintf("value-%d-%d", a, i%97)
		}
		spans[i] = telemetry.Span{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i/4), SpanID: fmt.Sprintf("%016x", i), Service: "chat",
			Name: "span", Start: t0.Add(time.Duration(i) * time.Millisecond), End: t0.Add(time.Duration(i)*time.Millisecond + time.Second),
			Attributes: attrs, Resource: res}
	}
	b.Run("EncodeSpans", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := EncodeSpans(spans); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
	})
	b.Run("SpansBatch+encodeNative", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := SpansBatch(spans).encodeNative(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
	})
}

// BenchmarkInsertRequests is the assembler's write: one pass's llm_requests
// rows (2000, as a pass of 8000 spans yields), with the materialized views
// on the table (the samples, name counts, rollups and top rows) and without.
func BenchmarkInsertRequests(b *testing.B) {
	t0 := time.Now().Add(-time.Hour)
	reqs := make([]telemetry.LLMRequest, 2000)
	for i := range reqs {
		ms := float64(i % 900)
		reqs[i] = telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i), Service: "chat",
			ServerService: "vllm", Model: "llama", Provider: "vllm", Instance: fmt.Sprintf("vllm-%d", i%4), Start: t0.Add(time.Duration(i) * time.Millisecond),
			TTFT: &ms, Queue: &ms, Prefill: &ms, Network: &ms, Decode: &ms, E2E: &ms, ITL: &ms, InputTokens: telemetry.Ptr(int64(900)), OutputTokens: telemetry.Ptr(int64(120))}
	}
	for _, mode := range []string{"with_views", "without_views"} {
		b.Run(mode, func(b *testing.B) {
			s := migratedStore(b)
			if mode == "without_views" {
				r, err := s.Query(context.Background(), "SELECT arrayJoin(dependencies_table) AS v FROM system.tables WHERE database = currentDatabase() AND name = 'llm_requests'")
				if err != nil || r.Len() == 0 {
					b.Fatalf("views on llm_requests: %d, %v", r.Len(), err)
				}
				for i := range r.Len() {
					if err := s.Exec(context.Background(), "DROP VIEW "+r.Row(i).String("v")); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				if err := s.Insert(context.Background(), RequestsBatch(reqs, nil, uint64(i+1))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(len(reqs)*b.N), "cpu-ns/row")
		})
	}
}
