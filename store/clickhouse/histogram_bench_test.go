package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// vllmLayouts are vLLM's six request histograms' bounds
// (vllm/v1/metrics/loggers.py): four request phases, TTFT, ITL.
var vllmLayouts = func() map[string][]float64 {
	latency := []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	return map[string][]float64{
		"queue_seconds": latency, "prefill_seconds": latency, "decode_seconds": latency, "e2e_seconds": latency,
		"ttft_seconds": {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
		"itl_seconds":  {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0},
	}
}()

// histogramDay is one day of one vLLM instance's histogram intervals,
// one per series every 15 s (the scrape interval), ~20 requests each.
func histogramDay(day time.Time, instance string) []telemetry.HistogramPoint {
	r := rand.New(rand.NewPCG(19, 41))
	names := make([]string, 0, len(vllmLayouts))
	for n := range vllmLayouts {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []telemetry.HistogramPoint
	for t := day; t.Before(day.Add(24 * time.Hour)); t = t.Add(15 * time.Second) {
		for _, name := range names {
			bounds := vllmLayouts[name]
			counts := make([]uint64, len(bounds)+1)
			var n uint64
			for range 20 {
				counts[min(int(r.ExpFloat64()*3), len(bounds))]++
				n++
			}
			out = append(out, telemetry.HistogramPoint{ProjectID: 1, Start: t.Add(-15 * time.Second), Time: t, Service: "vllm-llama",
				Instance: instance, Name: name, Labels: map[string]string{"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"},
				Bounds: bounds, Counts: counts, Count: n, Sum: float64(n) * 0.4})
		}
	}
	return out
}

// BenchmarkHistogramRows is what server histograms cost: inserting a day
// of one instance's six vLLM series (34,560 rows, 1,000 a batch), the
// bytes a series takes per day once merged, and the diagnosis's read
// (sum per chart bucket, name and layout) over 1 hour and 24 hours.
func BenchmarkHistogramRows(b *testing.B) {
	ctx := context.Background()
	day := time.Now().Add(-48 * time.Hour).Truncate(24 * time.Hour)
	rows := histogramDay(day, "10.0.0.5:8000")
	const batch = 1000
	b.Run("insert", func(b *testing.B) {
		s := migratedStore(b)
		b.ResetTimer()
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			for j := 0; j < len(rows); j += batch {
				if err := s.Insert(ctx, HistogramsBatch(rows[j:min(j+batch, len(rows))])); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(len(rows)*b.N), "cpu-ns/row")
		b.ReportMetric(float64(len(rows)*b.N)/b.Elapsed().Seconds(), "rows/s")
		b.StopTimer()
		if err := s.Exec(ctx, "OPTIMIZE TABLE histogram_points FINAL"); err != nil {
			b.Fatal(err)
		}
		r, err := s.Query(ctx, "SELECT toString(sum(data_compressed_bytes)) AS c, toString(sum(data_uncompressed_bytes)) AS u FROM system.parts WHERE database = currentDatabase() AND table = 'histogram_points' AND active")
		if err != nil || r.Len() != 1 {
			b.Fatal(err)
		}
		var compressed, raw float64
		if _, err := fmt.Sscan(r.Row(0).String("c"), &compressed); err != nil {
			b.Fatal(err)
		}
		if _, err := fmt.Sscan(r.Row(0).String("u"), &raw); err != nil {
			b.Fatal(err)
		}
		// Every iteration inserts the same keys: the merge keeps one day.
		series := float64(len(vllmLayouts))
		b.ReportMetric(compressed/series, "bytes/series/day")
		b.ReportMetric(raw/series, "raw-bytes/series/day")
	})
	s := migratedStore(b)
	for j := 0; j < len(rows); j += batch {
		if err := s.Insert(ctx, HistogramsBatch(rows[j:min(j+batch, len(rows))])); err != nil {
			b.Fatal(err)
		}
	}
	// The read of analysis/server_metrics.go (serverHistograms) without
	// its settings, which the variants below add.
	const read = `SELECT toStartOfInterval(time, toIntervalSecond(?)) AS b, name, bounds,
		arrayMap(x -> toFloat64(x), sumForEach(counts)) AS c
		FROM histogram_points FINAL WHERE project_id = ? AND service IN ? AND name IN ? AND time >= ? AND time < ?
		GROUP BY b, name, bounds ORDER BY b, name`
	names := []string{"decode_seconds", "e2e_seconds", "itl_seconds", "prefill_seconds", "queue_seconds", "ttft_seconds"}
	for _, w := range []struct {
		name   string
		window time.Duration
		bucket int
		sql    string
	}{{"read_1h", time.Hour, 60, read}, {"read_24h", 24 * time.Hour, 1800, read},
		// Without FINAL: what folding a replayed log's duplicates costs.
		{"read_24h_no_final", 24 * time.Hour, 1800, strings.Replace(read, " FINAL", "", 1)},
		// FINAL within each day's partition (a series' duplicates share
		// their time, hence their day), as analysis reads it: a day merged
		// into one part needs no folding at all.
		{"read_24h_final_by_partition", 24 * time.Hour, 1800, read + " SETTINGS do_not_merge_across_partitions_select_final = 1"},
		// The same two once the day is merged into one part, as the
		// engine's merges leave a day that no longer takes inserts.
		{"read_24h_merged", 24 * time.Hour, 1800, read},
		{"read_24h_merged_final_by_partition", 24 * time.Hour, 1800, read + " SETTINGS do_not_merge_across_partitions_select_final = 1"}} {
		if w.name == "read_24h_merged" {
			if err := s.Exec(ctx, "OPTIMIZE TABLE histogram_points FINAL"); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(w.name, func(b *testing.B) {
			from := day.Add(24*time.Hour - w.window)
			for i := 0; i < b.N; i++ {
				r, err := s.Query(ctx, w.sql, w.bucket, 1, []string{"vllm-llama"}, names, from, day.Add(24*time.Hour))
				if err != nil || r.Len() == 0 {
					b.Fatal(err, r.Len())
				}
			}
		})
	}
}
