package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// Merge shape of spans at full ingest: the pipeline inserts segments of
// ~63k bench spans (40 MiB of Native, ingest.PipelineConfig.InsertBytes),
// and with merge_selector_base 25 the engine merges ~21 of them at once
// (system.merges sampled during bench ingest).
const (
	mergeParts        = 21
	mergeSpansPerPart = 63_000
)

// BenchmarkMergeSpans measures the embedded engine's CPU for merging the
// bench's spans, the largest cost of ingest at full rate (a third of the
// server's CPU in perf): mergeParts inserts of mergeSpansPerPart spans with
// merges stopped, then one merge of them all (OPTIMIZE … FINAL, the merge
// a background thread runs, on the calling thread). Reported per span, as
// process CPU: insert-cpu-µs/span and merge-cpu-µs/span (measured: the
// merge 7.7–12.4 µs a span, the inserts 4.2–6.4).
//
//	go test ./cmd/bench -run '^$' -bench BenchmarkMergeSpans
func BenchmarkMergeSpans(b *testing.B) {
	ctx := context.Background()
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: b.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	// Only spans' own merge: its views write other tables on every insert.
	if err := ch.Exec(ctx, "DROP VIEW trace_bounds_mv"); err != nil {
		b.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	templates, err := buildTemplates(16, 1000, 1, base)
	if err != nil {
		b.Fatal(err)
	}
	parts := make([][][]byte, mergeParts) // each part's exports, encoded as the pipeline stages them
	seq := uint64(0)
	var buf []byte
	for p := range parts {
		for n := 0; n < mergeSpansPerPart; n += 1000 {
			seq++
			buf = templates[seq%uint64(len(templates))].patch(buf, seq, base.Add(time.Duration(seq)*time.Millisecond))
			res, ok := normalize.TracesWire(1, buf, time.Now(), normalize.Limits{})
			if !ok {
				b.Fatal("the wire reader did not take a bench export")
			}
			blk, err := clickhouse.EncodeSpans(res.Spans)
			if err != nil {
				b.Fatal(err)
			}
			parts[p] = append(parts[p], blk)
		}
	}
	const spans = mergeParts * mergeSpansPerPart
	var insertCPU, mergeCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, q := range []string{"TRUNCATE TABLE spans", "SYSTEM STOP MERGES spans"} {
			if err := ch.Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		c0 := processCPU()
		for _, blocks := range parts {
			if err := ch.Insert(ctx, clickhouse.SpanBlocksBatch(blocks, mergeSpansPerPart)); err != nil {
				b.Fatal(err)
			}
		}
		c1 := processCPU()
		insertCPU += c1 - c0
		for _, q := range []string{"SYSTEM START MERGES spans", "OPTIMIZE TABLE spans FINAL"} {
			if err := ch.Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		mergeCPU += processCPU() - c1
		r, err := ch.Query(ctx, "SELECT count() AS parts, sum(rows) AS rows FROM system.parts WHERE database = currentDatabase() AND table = 'spans' AND active")
		if err != nil {
			b.Fatal(err)
		}
		if got := r.Row(0); got.Int("parts") != 1 || got.Int("rows") != spans {
			b.Fatalf("after the merge spans has %d parts of %d rows in all, want 1 of %d", got.Int("parts"), got.Int("rows"), spans)
		}
	}
	perSpan := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(spans*b.N) }
	b.ReportMetric(perSpan(insertCPU), "insert-cpu-µs/span")
	b.ReportMetric(perSpan(mergeCPU), "merge-cpu-µs/span")
}
