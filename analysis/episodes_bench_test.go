package analysis

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/episode"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// BenchmarkEpisodePassGo times the Go half of an episode pass over a day
// and its warm-up (26 h): summing the per-minute rollup's rows into each
// service's minutes (sumMinutes), then DetectEpisodes. The rows are shaped
// like bench query's at 1M requests a day: seven (app, server) pairs a
// minute, ~35 TTFT and ~18 ITL buckets a row. The engine's half is timed
// by `bench query --ops episodes`.
func BenchmarkEpisodePassGo(b *testing.B) {
	rows := rollupRows(26*60, 35, 18)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		byService := sumMinutes(rows)
		DetectEpisodes(byService, func(string) episode.Config { return episode.Config{TTFTObjective: DefaultTTFTObjectiveMs} })
	}
}

// rollupRows draws minutes of rollup rows: each pair's TTFT and ITL
// buckets around 400 ms and 25 ms.
func rollupRows(minutes, ttftKeys, itlKeys int) []clickhouse.RollupMinute {
	pairs := [][2]string{{"chat", "vllm-a"}, {"chat", "vllm-b"}, {"rag", "vllm-a"}, {"agent", "vllm-b"}, {"agent", ""}, {"summarize", ""}, {"", "vllm-c"}}
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hist := func(center float64, n int) []clickhouse.HistCount {
		k0 := clickhouse.HistKey(center) - n/2
		out := make([]clickhouse.HistCount, n)
		for i := range out {
			out[i] = clickhouse.HistCount{Key: int16(k0 + i), Count: int64(1 + r.IntN(4))}
		}
		return out
	}
	var rows []clickhouse.RollupMinute
	for m := range minutes {
		for _, p := range pairs {
			rows = append(rows, clickhouse.RollupMinute{Minute: t0.Add(time.Duration(m) * time.Minute), Service: p[0], ServerService: p[1],
				Requests: int64(60 + r.IntN(40)), Errors: int64(r.IntN(2)),
				TTFT: hist(400*math.Exp(0.1*r.NormFloat64()), ttftKeys), ITL: hist(25, itlKeys)})
		}
	}
	return rows
}
