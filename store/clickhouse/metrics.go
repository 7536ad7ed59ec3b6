package clickhouse

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// partsCollector serves tokenpath_clickhouse_active_parts: how many parts
// each table holds, read from system.parts at scrape time. Merges run
// behind inserts, and parts piling up
// is ClickHouse's classic failure ("too many parts"): this is the gauge to
// watch and alert on.
type partsCollector struct {
	store *Store
	log   *slog.Logger
	desc  *prometheus.Desc
}

// NewPartsCollector reads the parts of s's tables (on the server
// Tokenpath talks to, for a cluster) each time /metrics is scraped.
func NewPartsCollector(s *Store, log *slog.Logger) prometheus.Collector {
	return &partsCollector{store: s, log: log, desc: prometheus.NewDesc("tokenpath_clickhouse_active_parts",
		"Active data parts per ClickHouse table (merges fold them; inserts slow down when too many pile up).", []string{"table"}, nil)}
}

func (c *partsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect leaves the gauge out of a scrape it cannot answer in time
// rather than failing the whole scrape.
func (c *partsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := c.store.Query(ctx, "SELECT table, count() AS n FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table ORDER BY table")
	if err != nil {
		c.log.Warn("read active parts for /metrics", "err", err)
		return
	}
	for i := range r.Len() {
		w := r.Row(i)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(w.Int("n")), w.String("table"))
	}
}
