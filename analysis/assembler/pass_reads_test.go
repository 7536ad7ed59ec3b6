package assembler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// TestLiveRequests: the assembler resolves row versions as FINAL would.
func TestLiveRequests(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// The columns the assembler reads existing rows with (existingRowColumns).
	cols := append(strings.Fields(strings.NewReplacer(",", " ").Replace(clickhouse.RequestColumns+", "+clickhouse.DetailColumns)), "row_version", "is_deleted")
	row := func(span string, version int64, deleted bool) []any {
		vals := map[string]any{"project_id": int64(1), "trace_id": "t", "span_id": span, "service": "chat", "start": t0,
			"row_version": version, "is_deleted": deleted}
		out := make([]any, len(cols))
		for i, c := range cols {
			out[i] = vals[c]
		}
		return out
	}
	r := &clickhouse.Result{Columns: cols, Rows: [][]any{
		row("a", 1, false), row("a", 2, false), // replaced by a later version: one row
		row("b", 3, true), row("b", 1, false), // deleted by a later tombstone: none
		row("c", 1, true), row("c", 2, false), // re-created after a tombstone: one row
		row("d", 5, false),
	}}
	var got []string
	for _, q := range liveRequests(r) {
		got = append(got, q.SpanID)
	}
	if strings.Join(got, ",") != "a,c,d" {
		t.Errorf("live rows %v, want a, c, d", got)
	}
}

// An agent trace that calls a model again three days after it started is
// re-assembled from all its spans: the pass's read is bounded by the
// trace's stored bounds, not by the starts of the span that just arrived,
// so the late call still finds its root (route, pre-inference time) and
// its earlier call (call index), and the earlier row stays.
func TestAssemblerReadsWholeTraceAcrossDays(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	old := now.Add(-72 * time.Hour)
	late := now.Add(-time.Minute)
	a.mustInsert(t, agentSpan("long", "root", "", old, false), agentSpan("long", "c1", "root", old.Add(100*time.Millisecond), true),
		// A short trace of today in the same pass.
		agentSpan("short", "root", "", now.Add(-2*time.Minute), false), agentSpan("short", "c1", "root", now.Add(-2*time.Minute+50*time.Millisecond), true))
	a.mustStep(t)
	if rows := liveRows(t, a, "long"); len(rows) != 1 || rows["c1"].Route != "agent.run" {
		t.Fatalf("first pass: rows %+v, want c1 of route agent.run", rows)
	}

	a.mustInsert(t, agentSpan("long", "c2", "root", late, true))
	wm, err := a.watermark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	within, args, fresh, err := a.traceWindow(ctx, 1, []string{"long"}, wm)
	if err != nil {
		t.Fatal(err)
	}
	if fresh {
		t.Error("the late trace has spans from before the watermark, yet it reads as fresh")
	}
	if within == "" || !args[0].(time.Time).Equal(old) || !args[1].(time.Time).Equal(late) {
		t.Fatalf("bounds of the late trace: %q %v, want [%s, %s]", within, args, old, late)
	}
	a.mustStep(t)
	rows := liveRows(t, a, "long")
	if len(rows) != 2 {
		t.Fatalf("second pass: %d rows %+v, want c1 and c2", len(rows), rows)
	}
	c1, c2 := rows["c1"], rows["c2"]
	if c1.CallIndex != 0 || !c1.Start.Equal(old.Add(100*time.Millisecond)) {
		t.Errorf("earlier call: %+v", c1)
	}
	// Pre-inference leaves out c1's second (the app's own time, agent loop).
	wantPre := float64(late.Sub(old).Milliseconds() - 1000)
	if c2.CallIndex != 1 || c2.Route != "agent.run" || c2.PreInference == nil || *c2.PreInference != wantPre {
		t.Errorf("late call: index %d route %q pre-inference %v, want 1, agent.run, %.0f ms", c2.CallIndex, c2.Route, c2.PreInference, wantPre)
	}
	if rows := liveRows(t, a, "short"); len(rows) != 1 {
		t.Errorf("short trace: %+v", rows)
	}
}

// A trace with no bounds (its spans stored while the view was missing)
// makes the pass read unbounded instead of missing its spans, even when
// the other traces of the pass have narrow bounds.
func TestAssemblerWithoutBoundsReadsUnbounded(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	old := now.Add(-48 * time.Hour)
	if err := a.CH.Exec(ctx, "DROP VIEW trace_bounds_mv"); err != nil {
		t.Fatal(err)
	}
	a.mustInsert(t, agentSpan("unbounded", "root", "", old, false), agentSpan("unbounded", "c1", "root", old.Add(time.Second), true))
	if err := a.CH.Exec(ctx, "CREATE MATERIALIZED VIEW trace_bounds_mv TO trace_bounds AS SELECT project_id, trace_id, min(start) AS first_start, max(start) AS last_start, min(inserted_at) AS first_inserted FROM spans GROUP BY project_id, trace_id"); err != nil {
		t.Fatal(err)
	}
	a.mustInsert(t, agentSpan("bounded", "root", "", now.Add(-time.Minute), false), agentSpan("bounded", "c1", "root", now.Add(-time.Minute+time.Second), true))
	within, _, _, err := a.traceWindow(ctx, 1, []string{"unbounded", "bounded"}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if within != "" {
		t.Errorf("a trace has no bounds, yet the pass is bounded by %q", within)
	}
	a.mustStep(t)
	for _, trace := range []string{"unbounded", "bounded"} {
		if rows := liveRows(t, a, trace); len(rows) != 1 || rows["c1"].Route != "agent.run" {
			t.Errorf("trace %s: rows %+v, want c1 of route agent.run", trace, rows)
		}
	}
}

// The migration's INSERT gives bounds to the spans stored before it, so
// the first pass after an upgrade is bounded too.
func TestTraceBoundsBackfill(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	// As before migration 0009: no table, no view (and so no 0015 or 0016 either).
	for _, st := range []string{"DROP VIEW trace_bounds_mv", "DROP TABLE trace_bounds",
		"DELETE FROM schema_migrations WHERE version IN ('0009_trace_bounds', '0015_trace_bounds_first_inserted', '0016_trace_bounds_lz4')"} {
		if err := a.CH.Exec(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	var spans []telemetry.Span
	for i := range 3 {
		first := now.Add(-time.Duration(i*30) * time.Hour) // over several days
		spans = append(spans, agentSpan(fmt.Sprint("t", i), "root", "", first, false),
			agentSpan(fmt.Sprint("t", i), "c1", "root", first.Add(time.Duration(i+1)*time.Hour), true))
	}
	a.mustInsert(t, spans...)
	if err := a.CH.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// 0016: the ids the assembler looks up are stored in LZ4 (0009 made them ZSTD).
	r, err := a.CH.Query(ctx, "SELECT compression_codec FROM system.columns WHERE database = currentDatabase() AND table = 'trace_bounds' AND name = 'trace_id'")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 || r.Row(0).String("compression_codec") != "CODEC(LZ4)" {
		t.Errorf("trace_bounds.trace_id codec after the migrations: %v, want CODEC(LZ4)", r.Rows)
	}
	r, err = a.CH.Query(ctx, "SELECT trace_id, CAST(min(first_start) AS DateTime64(9, 'UTC')) AS lo, CAST(max(last_start) AS DateTime64(9, 'UTC')) AS hi FROM trace_bounds GROUP BY trace_id ORDER BY trace_id")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 3 {
		t.Fatalf("%d traces with bounds, want 3", r.Len())
	}
	for i := range 3 {
		w := r.Row(i)
		first := now.Add(-time.Duration(i*30) * time.Hour)
		if w.String("trace_id") != fmt.Sprint("t", i) || !w.Time("lo").Equal(first) || !w.Time("hi").Equal(first.Add(time.Duration(i+1)*time.Hour)) {
			t.Errorf("bounds %s [%s, %s], want t%d [%s, %s]", w.String("trace_id"), w.Time("lo"), w.Time("hi"), i, first, first.Add(time.Duration(i+1)*time.Hour))
		}
	}
	// Back-filled bounds do not know when the spans were stored: never fresh.
	within, _, fresh, err := a.traceWindow(ctx, 1, []string{"t0", "t1", "t2"}, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if within == "" {
		t.Error("the back-filled traces are read unbounded")
	}
	if fresh {
		t.Error("back-filled traces read as fresh: a pass would read only its own inserts of them")
	}
}

// TestAssemblerFreshTraces: a pass reads the traces first stored since the
// watermark from its own inserts only (every span they have is there), even
// when they span several inserts, and the others the long way, with the
// spans of earlier inserts.
func TestAssemblerFreshTraces(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	a.mustInsert(t, agentSpan("old", "root", "", now, false))
	a.mustStep(t)
	wm, err := a.watermark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Since the watermark: the old trace's call, and a new trace in two inserts.
	a.mustInsert(t, agentSpan("old", "c1", "root", now.Add(time.Millisecond), true), agentSpan("new", "root", "", now, false))
	a.mustInsert(t, agentSpan("new", "c1", "root", now.Add(2*time.Millisecond), true))
	for _, c := range []struct {
		traces []string
		fresh  bool
	}{{[]string{"new"}, true}, {[]string{"old"}, false}, {[]string{"new", "old"}, false}} {
		if _, _, fresh, err := a.traceWindow(ctx, 1, c.traces, wm); err != nil || fresh != c.fresh {
			t.Errorf("traces %v: fresh %v (%v), want %v", c.traces, fresh, err, c.fresh)
		}
	}
	// Each trace alone, as a pass with only it would take it.
	for _, trace := range []string{"new", "old"} {
		if err := a.assemble(ctx, pass{after: wm, upper: time.Now()}, 1, []string{trace}, false); err != nil {
			t.Fatal(err)
		}
		if rows := liveRows(t, a, trace); len(rows) != 1 || rows["c1"].Route != "agent.run" || rows["c1"].PreInference == nil {
			t.Errorf("trace %s: rows %+v, want c1 of route agent.run with its root's pre-inference time", trace, rows)
		}
	}
}
