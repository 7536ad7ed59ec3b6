package clickhouse

import (
	"context"
	"strings"
	"testing"

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
	gauge := func() map[string]float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range families {
			switch f.GetName() {
			case "tokenpath_clickhouse_memory_tracked_bytes":
				tracked = f.GetMetric()[0].GetGauge().GetValue()
			case "process_resident_memory_bytes":
				rss = f.GetMetric()[0].GetGauge().GetValue()
			}
			if f.GetName() != "tokenpath_clickhouse_active_parts" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "table" {
						out[l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			}
		}
		return out
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
	// The engine holds at least its caches and this test's parts' marks;
	// all of it is in this process's memory.
	if tracked <= 0 || tracked > rss {
		t.Errorf("tracked engine memory %.0f bytes, want > 0 and within the process's RSS (%.0f)", tracked, rss)
	}
}
