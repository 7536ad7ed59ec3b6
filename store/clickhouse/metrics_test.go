package clickhouse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// The parts gauge counts each table's active parts as system.parts does,
// and follows inserts (one part each while merges are stopped); the
// memory gauge is the engine's tracked memory, within the process's RSS.
func TestEngineCollector(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	// The process collector (as on /metrics) gives this process's RSS.
	reg.MustRegister(NewEngineCollector(s, quietLog), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var tracked, rss float64
	var alloc, uses, merges, merging map[string]float64
	gauge := func() map[string]float64 {
		g := gatherGauges(t, reg)
		tracked, rss = g["tokenpath_clickhouse_memory_tracked_bytes"][""], g["process_resident_memory_bytes"][""]
		alloc, uses = g["tokenpath_clickhouse_allocator_bytes"], g["tokenpath_clickhouse_memory_bytes"]
		merges, merging = g["tokenpath_clickhouse_merges"], g["tokenpath_clickhouse_merging_parts"]
		return g["tokenpath_clickhouse_active_parts"]
	}
	if err := s.Exec(ctx, "SYSTEM STOP MERGES spans"); err != nil {
		t.Fatal(err)
	}
	before := gauge()["spans"]
	for i := range 3 {
		spans := sampleSpans()
		for j := range spans {
			spans[j].TraceID = strings.Repeat(string(rune('c'+i)), 32)
		}
		if err := s.Insert(ctx, SpansBatch(spans)); err != nil {
			t.Fatal(err)
		}
	}
	// A read of spans loads the marks of its parts into the mark cache.
	if _, err := s.Query(ctx, "SELECT count() FROM spans WHERE trace_id != ''"); err != nil {
		t.Fatal(err)
	}
	got := gauge()
	if got["spans"] != before+3 {
		t.Errorf("spans parts %v after 3 inserts with merges stopped, want %v", got["spans"], before+3)
	}
	r, err := s.Query(ctx, "SELECT table, count() AS n FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table")
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Len() {
		w := r.Row(i)
		if g := got[w.String("table")]; g != float64(w.Int("n")) {
			t.Errorf("%s: gauge %v, system.parts %d", w.String("table"), g, w.Int("n"))
		}
	}
	if len(got) != r.Len() {
		t.Errorf("gauge has %d tables, system.parts %d: %v", len(got), r.Len(), got)
	}
	// Every table has its merge gauges; spans' are 0 while its merges are
	// stopped.
	for table := range got {
		m, okm := merges[table]
		p, okp := merging[table]
		if !okm || !okp || (table == "spans" && (m != 0 || p != 0)) {
			t.Errorf("%s: merges %v (%v), merging parts %v (%v); want both, 0 for spans", table, m, okm, p, okp)
		}
	}
	// The engine holds at least its caches and this test's parts' marks;
	// all of it is in this process's memory.
	if tracked <= 0 || tracked > rss {
		t.Errorf("tracked engine memory %.0f bytes, want > 0 and within the process's RSS (%.0f)", tracked, rss)
	}
	// The allocator's live bytes are within its resident pages, its dirty
	// pages too, and all of them within the process's RSS.
	if a, r, d := alloc["allocated"], alloc["resident"], alloc["dirty"]; len(alloc) != 3 || a <= 0 || a > r || d > r || r > rss {
		t.Errorf("allocator gauges %v, want 0 < allocated ≤ resident, dirty ≤ resident, resident ≤ RSS (%.0f)", alloc, rss)
	}
	// Every use is reported; the parts' keys and the marks just read are
	// held; none is more than the process holds.
	if len(uses) != len(memoryUses) || uses["primary_keys"] <= 0 || uses["mark_cache"] <= 0 {
		t.Errorf("memory by use %v: want all %d uses, primary_keys and mark_cache > 0", uses, len(memoryUses))
	}
	for use, v := range uses {
		if v < 0 || v > rss {
			t.Errorf("memory use %s = %.0f bytes, want within the process's RSS (%.0f)", use, v, rss)
		}
	}
}

// The parser reads the totals, the page size and the merged arenas' dirty
// pages (not a single arena's, which follow) of jemalloc's report; this is
// an excerpt of the embedded engine's own.
func TestParseJemallocStats(t *testing.T) {
	report := `Arenas: 5
Quantum size: 16
Page size: 4096
Hugepage size: 2097152
Allocated: 33090824, active: 35000320, metadata: 8011952 (n_thp 0, edata 240256, rtree 6291456), resident: 58253312, mapped: 69746688, retained: 10469376
Background threads: 0, num_runs: 0, run_interval: 0 ns
Merged arenas stats:
assigned threads: 18
decaying:  time       npages       sweeps     madvises       purged
   dirty:   N/A         3875            2            8          203
   muzzy:   N/A            0            0            0            0
arenas[0]:
decaying:  time       npages       sweeps     madvises       purged
   dirty:  5000          645            2            8          203
`
	got, ok := parseJemallocStats(report)
	want := jemallocStats{Allocated: 33090824, Resident: 58253312, Dirty: 3875 * 4096}
	if !ok || got != want {
		t.Errorf("parse: %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := parseJemallocStats("Allocated: 1, active: 2"); ok {
		t.Error("a report without the totals' fields parsed")
	}
}

// gatherGauges scrapes reg: each family's gauges by the value of their
// one label ("" for a family without labels).
func gatherGauges(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range families {
		byLabel := map[string]float64{}
		for _, m := range f.GetMetric() {
			label := ""
			if l := m.GetLabel(); len(l) > 0 {
				label = l[0].GetValue()
			}
			byLabel[label] = m.GetGauge().GetValue()
		}
		out[f.GetName()] = byLabel
	}
	return out
}

// The merge gauges count a running merge and the parts it reads. The
// table merges one row a block (merge_max_block_size 1), so the merge of
// its three parts runs long enough (~1 s here) to be seen.
func TestEngineCollectorCountsMerges(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE slow_merge (x UInt64) ENGINE = MergeTree ORDER BY x SETTINGS merge_max_block_size = 1",
		"SYSTEM STOP MERGES slow_merge",
		"INSERT INTO slow_merge SELECT number FROM numbers(200000)",
		"INSERT INTO slow_merge SELECT number FROM numbers(200000)",
		"INSERT INTO slow_merge SELECT number FROM numbers(200000)",
		"SYSTEM START MERGES slow_merge",
	} {
		if err := s.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewEngineCollector(s, quietLog))
	gauges := func() (merges, parts float64) {
		g := gatherGauges(t, reg)
		return g["tokenpath_clickhouse_merges"]["slow_merge"], g["tokenpath_clickhouse_merging_parts"]["slow_merge"]
	}
	if m, p := gauges(); m != 0 || p != 0 {
		t.Fatalf("before the merge: %v merges over %v parts, want 0 and 0", m, p)
	}
	done := make(chan error, 1)
	go func() { done <- s.Exec(ctx, "OPTIMIZE TABLE slow_merge FINAL") }()
	for {
		select {
		case err := <-done:
			t.Fatalf("the merge ended (err %v) and the gauges never showed it running over 3 parts", err)
		default:
		}
		if m, p := gauges(); m == 1 && p == 3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
