package clickhouse

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// engineCollector serves the engine's own state on Tokenpath's /metrics,
// read at scrape time:
//   - tokenpath_clickhouse_active_parts{table}: parts per table. Merges run
//     behind inserts, and parts piling up is ClickHouse's classic failure
//     ("too many parts"): the gauge to watch and alert on.
//   - tokenpath_clickhouse_memory_tracked_bytes: what the engine's memory
//     tracker counts (queries, inserts, merges, caches); with the embedded
//     engine it shares the process's RSS with the Go heap.
type engineCollector struct {
	store       *Store
	log         *slog.Logger
	parts, memo *prometheus.Desc
}

// NewEngineCollector reads s's engine (the server Tokenpath talks to, for
// a cluster) each time /metrics is scraped.
func NewEngineCollector(s *Store, log *slog.Logger) prometheus.Collector {
	return &engineCollector{store: s, log: log,
		parts: prometheus.NewDesc("tokenpath_clickhouse_active_parts",
			"Active data parts per ClickHouse table (merges fold them; inserts slow down when too many pile up).", []string{"table"}, nil),
		memo: prometheus.NewDesc("tokenpath_clickhouse_memory_tracked_bytes",
			"Memory ClickHouse's tracker counts (system.metrics MemoryTracking): queries, inserts, merges, caches.", nil, nil)}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.parts; ch <- c.memo }

// Collect leaves out what it cannot read in time rather than failing the
// whole scrape.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := c.store.Query(ctx, "SELECT table, count() AS n FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table ORDER BY table")
	if err != nil {
		c.log.Warn("read active parts for /metrics", "err", err)
		return
	}
	for i := range r.Len() {
		w := r.Row(i)
		ch <- prometheus.MustNewConstMetric(c.parts, prometheus.GaugeValue, float64(w.Int("n")), w.String("table"))
	}
	r, err = c.store.Query(ctx, "SELECT value AS v FROM system.metrics WHERE metric = 'MemoryTracking'")
	if err != nil || r.Len() != 1 {
		c.log.Warn("read tracked memory for /metrics", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.memo, prometheus.GaugeValue, float64(r.Row(0).Int("v")))
}
