package clickhouse

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// engineCollector serves the engine's own state on Tokenpath's /metrics,
// read at scrape time:
//   - tokenpath_clickhouse_active_parts{table}: parts per table. Merges run
//     behind inserts, and parts piling up is ClickHouse's classic failure
//     ("too many parts"): the gauge to watch and alert on.
//   - tokenpath_clickhouse_merges{table} and
//     tokenpath_clickhouse_merging_parts{table}: the merges running and
//     the parts they read. A merge's memory grows with the parts it reads
//     at once, so these tell whether a high merges figure below is one
//     wide merge or several.
//   - tokenpath_clickhouse_memory_tracked_bytes: what the engine's memory
//     tracker counts (queries, inserts, merges, caches); with the embedded
//     engine it shares the process's RSS with the Go heap.
//   - tokenpath_clickhouse_allocator_bytes{state}: the engine's allocator
//     (jemalloc): live allocations, resident pages, and the dirty pages it
//     keeps for reuse. Under load dirty pages are hundreds of MiB of RSS
//     that neither the tracker nor the Go heap shows.
//   - tokenpath_clickhouse_memory_bytes{use}: where the tracked memory is,
//     as far as the engine says: running inserts, running reads, merges,
//     and its caches. Under load these tell which of them to bound
//     when the RSS is too high.
type engineCollector struct {
	store                   *Store
	log                     *slog.Logger
	parts, memo, alloc, use *prometheus.Desc
	merges, merging         *prometheus.Desc
}

// memoryUses names the engine's figures behind
// tokenpath_clickhouse_memory_bytes{use}, as memoryUsesSQL reads them.
var memoryUses = []string{"inserts", "reads", "merges", "primary_keys",
	"mark_cache", "primary_index_cache", "uncompressed_cache", "query_condition_cache"}

// memoryUsesSQL reads every use in one statement, one row each, and the
// engine's tracked total as use "tracked", each system table once, on one
// thread (scrapeSettings). The reads' figure leaves out the collector's
// own read.
const memoryUsesSQL = `SELECT u.1 AS use, u.2 AS v FROM (SELECT arrayJoin([
	('inserts', toInt64(sumIf(memory_usage, query_kind = 'Insert'))),
	('reads', toInt64(sumIf(memory_usage, query_kind != 'Insert' AND query_id != queryID())))]) AS u FROM system.processes)
UNION ALL SELECT 'merges', toInt64(sum(memory_usage)) FROM system.merges
UNION ALL SELECT 'primary_keys', toInt64(sum(primary_key_bytes_in_memory_allocated)) FROM system.parts WHERE active
UNION ALL SELECT u.1, u.2 FROM (SELECT arrayJoin([
	('mark_cache', toInt64(sumIf(value, metric = 'MarkCacheBytes'))),
	('primary_index_cache', toInt64(sumIf(value, metric = 'PrimaryIndexCacheBytes'))),
	('uncompressed_cache', toInt64(sumIf(value, metric = 'UncompressedCacheBytes'))),
	('query_condition_cache', toInt64(sumIf(value, metric = 'QueryConditionCacheBytes'))),
	('tracked', toInt64(sumIf(value, metric = 'MemoryTracking')))]) AS u FROM system.metrics)` + scrapeSettings

// partsSQL reads each table's active parts and its running merges, 0
// for a table with none (also where a profile sets join_use_nulls), so
// the merge gauges are there before the first merge.
const partsSQL = `SELECT p.table AS table, p.n AS n, toInt64(ifNull(m.merges, 0)) AS merges, toInt64(ifNull(m.merging, 0)) AS merging
FROM (SELECT table, count() AS n FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table) AS p
LEFT JOIN (SELECT table, count() AS merges, sum(num_parts) AS merging FROM system.merges WHERE database = currentDatabase() GROUP BY table) AS m
ON p.table = m.table ORDER BY table` + scrapeSettings

// scrapeSettings run a scrape's statements on one thread: the system
// tables hold a few hundred rows, and spreading them over the engine's
// threads costs more than it saves. With the uses read in one statement,
// a scrape costs ~25 ms of CPU against ~33 (bench ingest scrapes every
// second; there the engine gauges were 1.7 % of the server's CPU).
const scrapeSettings = " SETTINGS max_threads = 1"

// NewEngineCollector reads s's engine (the server Tokenpath talks to, for
// a cluster) each time /metrics is scraped.
func NewEngineCollector(s *Store, log *slog.Logger) prometheus.Collector {
	return &engineCollector{store: s, log: log,
		parts: prometheus.NewDesc("tokenpath_clickhouse_active_parts",
			"Active data parts per ClickHouse table (merges fold them; inserts slow down when too many pile up).", []string{"table"}, nil),
		merges: prometheus.NewDesc("tokenpath_clickhouse_merges",
			"Background merges running per ClickHouse table.", []string{"table"}, nil),
		merging: prometheus.NewDesc("tokenpath_clickhouse_merging_parts",
			"Parts the running merges of each ClickHouse table read (a merge's memory grows with the parts it reads at once).", []string{"table"}, nil),
		memo: prometheus.NewDesc("tokenpath_clickhouse_memory_tracked_bytes",
			"Memory ClickHouse's tracker counts (system.metrics MemoryTracking): queries, inserts, merges, caches.", nil, nil),
		alloc: prometheus.NewDesc("tokenpath_clickhouse_allocator_bytes",
			"ClickHouse's allocator (jemalloc, system.jemalloc_stats): allocated = live allocations, resident = pages it holds in RAM, dirty = freed pages kept for reuse (part of resident).", []string{"state"}, nil),
		use: prometheus.NewDesc("tokenpath_clickhouse_memory_bytes",
			"Memory ClickHouse holds, by use: inserts and reads (running statements), merges, primary_keys (of active parts), and its caches (mark_cache, primary_index_cache, uncompressed_cache, query_condition_cache).", []string{"use"}, nil)}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.parts
	ch <- c.merges
	ch <- c.merging
	ch <- c.memo
	ch <- c.alloc
	ch <- c.use
}

// Collect leaves out what it cannot read in time rather than failing the
// whole scrape. A scrape is Interactive: its reads are small, and under
// full ingest they would otherwise wait behind inserts and time out,
// just when the gauges matter.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(Interactive(context.Background()), 2*time.Second)
	defer cancel()
	r, err := c.store.Query(ctx, partsSQL)
	if err != nil {
		c.log.Warn("read active parts and merges for /metrics", "err", err)
		return
	}
	for i := range r.Len() {
		w := r.Row(i)
		table := w.String("table")
		ch <- prometheus.MustNewConstMetric(c.parts, prometheus.GaugeValue, float64(w.Int("n")), table)
		ch <- prometheus.MustNewConstMetric(c.merges, prometheus.GaugeValue, float64(w.Int("merges")), table)
		ch <- prometheus.MustNewConstMetric(c.merging, prometheus.GaugeValue, float64(w.Int("merging")), table)
	}
	if r, err = c.store.Query(ctx, memoryUsesSQL); err != nil {
		c.log.Warn("read memory by use for /metrics", "err", err)
		return
	}
	for i := range r.Len() {
		w := r.Row(i)
		if w.String("use") == "tracked" {
			ch <- prometheus.MustNewConstMetric(c.memo, prometheus.GaugeValue, float64(w.Int("v")))
		} else {
			ch <- prometheus.MustNewConstMetric(c.use, prometheus.GaugeValue, float64(w.Int("v")), w.String("use"))
		}
	}
	// A server built without jemalloc (or older than the table) has no
	// stats: the gauge is left out, quietly.
	r, err = c.store.Query(ctx, "SELECT stats FROM system.jemalloc_stats"+scrapeSettings)
	if err != nil || r.Len() != 1 {
		c.log.Debug("read allocator stats for /metrics", "err", err)
		return
	}
	st, ok := parseJemallocStats(r.Row(0).String("stats"))
	if !ok {
		c.log.Debug("allocator stats not in jemalloc's format")
		return
	}
	for state, v := range map[string]uint64{"allocated": st.Allocated, "resident": st.Resident, "dirty": st.Dirty} {
		ch <- prometheus.MustNewConstMetric(c.alloc, prometheus.GaugeValue, float64(v), state)
	}
}

// jemallocStats is what the collector takes from jemalloc's stats report.
type jemallocStats struct {
	Allocated, Resident, Dirty uint64 // bytes
}

var (
	jemallocTotals   = regexp.MustCompile(`(?m)^Allocated: (\d+), active: \d+, metadata: \d+.*, resident: (\d+), mapped`)
	jemallocPageSize = regexp.MustCompile(`(?m)^Page size: (\d+)$`)
	// The first "dirty:" row after the merged arenas' header: its second
	// field is the pages waiting to be purged (the first is the decay time).
	jemallocDirty = regexp.MustCompile(`(?m)^\s+dirty:\s+\S+\s+(\d+)\s`)
)

// parseJemallocStats reads malloc_stats_print's text report (jemalloc 5):
// the totals line, the page size, and the dirty pages of all arenas merged.
func parseJemallocStats(text string) (jemallocStats, bool) {
	var st jemallocStats
	totals, page := jemallocTotals.FindStringSubmatch(text), jemallocPageSize.FindStringSubmatch(text)
	i := strings.Index(text, "Merged arenas stats:")
	if totals == nil || page == nil || i < 0 {
		return st, false
	}
	dirty := jemallocDirty.FindStringSubmatch(text[i:])
	if dirty == nil {
		return st, false
	}
	num := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	st.Allocated, st.Resident = num(totals[1]), num(totals[2])
	st.Dirty = num(dirty[1]) * num(page[1])
	return st, true
}
