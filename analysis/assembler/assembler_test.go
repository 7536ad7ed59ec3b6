package assembler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/clickhouse/chtest"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// TestLiveRequests: the assembler resolves row versions as FINAL would.
func TestLiveRequests(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// The columns the assembler reads existing rows with (existingRowColumns).
	cols := append(strings.Fields(strings.NewReplacer(",", " ").Replace(clickhouse.RequestColumns+", "+clickhouse.JoinColumns+", "+clickhouse.ErrorTypeColumn)), "row_version", "is_deleted")
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

// openAssembler gives a test its own stores and an assembler whose passes
// see every span inserted before them (no lag) and none after.
func openAssembler(t testing.TB) *Assembler {
	t.Helper()
	st := storetest.Open(t)
	return &Assembler{CH: st.CH, PG: st.PG, Log: st.Log, Lag: time.Nanosecond}
}

// agentSpan is a span of an agent trace of project 1: the root when parent
// is empty, an LLM client call when llm is set.
func agentSpan(trace, id, parent string, start time.Time, llm bool) telemetry.Span {
	s := telemetry.Span{ProjectID: 1, TraceID: trace, SpanID: id, ParentSpanID: parent, Service: "agent", Instance: "agent-0",
		Name: "agent.run", Start: start, End: start.Add(time.Second), StatusCode: "ok"}
	if llm {
		s.Name = "chat"
		s.LLM = telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", Model: "gpt", ClientTTFT: telemetry.Ptr(200 * time.Millisecond)}
	}
	return s
}

// liveRows returns the assembled rows of a trace as readers see them.
func liveRows(t *testing.T, a *Assembler, trace string) map[string]telemetry.LLMRequest {
	t.Helper()
	r, err := a.CH.Query(context.Background(), "SELECT "+clickhouse.RequestColumns+" FROM llm_requests FINAL WHERE trace_id = ? AND is_deleted = 0", trace)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]telemetry.LLMRequest{}
	for _, q := range clickhouse.ScanRequests(r) {
		out[q.SpanID] = q
	}
	return out
}

func (a *Assembler) mustStep(t *testing.T) {
	t.Helper()
	if _, err := a.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (a *Assembler) mustInsert(t *testing.T, spans ...telemetry.Span) {
	t.Helper()
	if err := a.CH.Insert(context.Background(), clickhouse.SpansBatch(spans)); err != nil {
		t.Fatal(err)
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

// One insert bringing more traces than a statement may list (a replayed
// write-ahead log segment: every span shares one inserted_at, so the pass
// cannot stop inside it) is assembled in chunks of trace ids, each
// statement longer than ClickHouse's default max_query_size, and every
// trace exactly once; spans of another project in the same pass too.
func TestAssemblerLargeInsertInChunks(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 1000
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	n := tracesPerStatement + tracesPerStatement/2
	spans := make([]telemetry.Span, 0, 2*n+2)
	for i := range n {
		trace := fmt.Sprintf("%032x", i)
		start := now.Add(-time.Duration(i) * time.Millisecond)
		spans = append(spans, agentSpan(trace, "root", "", start, false), agentSpan(trace, "c1", "root", start.Add(time.Millisecond), true))
	}
	other := agentSpan("other-project", "c1", "", now, true)
	other.ProjectID = 2
	spans = append(spans, other)
	a.mustInsert(t, spans...)
	got, err := a.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != n+1 {
		t.Errorf("the pass took %d traces, want %d (one insert is taken whole)", got, n+1)
	}
	r, err := a.CH.Query(ctx, `SELECT project_id, count() AS rows, uniqExact(trace_id) AS traces, countIf(route = 'agent.run') AS routed
		FROM llm_requests GROUP BY project_id ORDER BY project_id`)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 2 {
		t.Fatalf("requests of %d projects, want 2", r.Len())
	}
	if w := r.Row(0); w.Int("rows") != int64(n) || w.Int("traces") != int64(n) || w.Int("routed") != int64(n) {
		t.Errorf("project 1: %d rows of %d traces (%d with their root's route), want %d of each", w.Int("rows"), w.Int("traces"), w.Int("routed"), n)
	}
	if w := r.Row(1); w.Int("rows") != 1 {
		t.Errorf("project 2: %d rows, want 1", w.Int("rows"))
	}
	if more, err := a.Step(ctx); err != nil || more != 0 {
		t.Errorf("a second pass took %d traces (err %v), want none", more, err)
	}
}

// TestAssemblerRouteAndTenant: the assembler takes the route of the root
// span and the tenant (the LLM span's before the root's) from the columns
// the store derives from the attributes, whichever key names the tenant.
func TestAssemblerRouteAndTenant(t *testing.T) {
	a := openAssembler(t)
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	with := func(s telemetry.Span, attrs map[string]string) telemetry.Span {
		s.Attributes = attrs
		return s
	}
	a.mustInsert(t,
		// The LLM span names the tenant (its second key), the root another.
		with(agentSpan("t1", "root", "", now, false), map[string]string{"http.route": "/v1/agent", "tenant": "root-tenant"}),
		with(agentSpan("t1", "c1", "root", now.Add(time.Millisecond), true), map[string]string{"tenant": "", "tenant.id": "acme", "user.id": "u-9"}),
		// Only the root names one, by the last key; no http.route.
		with(agentSpan("t2", "root", "", now, false), map[string]string{"langfuse.user.id": "lf-1"}),
		agentSpan("t2", "c1", "root", now.Add(time.Millisecond), true),
		// Neither.
		agentSpan("t3", "root", "", now, false), agentSpan("t3", "c1", "root", now.Add(time.Millisecond), true))
	a.mustStep(t)
	for trace, want := range map[string][2]string{"t1": {"/v1/agent", "acme"}, "t2": {"agent.run", "lf-1"}, "t3": {"agent.run", ""}} {
		rows := liveRows(t, a, trace)
		if c1, ok := rows["c1"]; !ok || c1.Route != want[0] || c1.Tenant != want[1] {
			t.Errorf("trace %s: row %+v, want route %q tenant %q", trace, rows["c1"], want[0], want[1])
		}
	}
}

// TestAssemblerTimesStages: /metrics shows the time passes spent per stage;
// a pass that writes rows ran every stage but events (no server span).
func TestAssemblerTimesStages(t *testing.T) {
	a := openAssembler(t)
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	a.mustInsert(t, agentSpan("s1", "root", "", now, false), agentSpan("s1", "c1", "root", now.Add(time.Millisecond), true))
	a.mustStep(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "tokenpath_assembler_seconds_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if len(got) != len(passStages) {
		t.Errorf("stages %v, want one series for each of %v", got, passStages)
	}
	for _, stage := range []string{"find", "traces", "bounds", "spans", "existing", "derive", "write", "watermark"} {
		if got[stage] <= 0 {
			t.Errorf("stage %s: %v s after a pass that wrote rows", stage, got[stage])
		}
	}
}

// TestAssemblerPassSaysMore: a pass bounded by MaxSpans says more traces
// wait (Run starts the next pass at once instead of on the next tick); the
// pass that takes the rest says none do.
func TestAssemblerPassSaysMore(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 4 // two of the inserts below
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	for _, trace := range []string{"m1", "m2", "m3"} { // three inserts, three inserted_at
		a.mustInsert(t, agentSpan(trace, "root", "", now, false), agentSpan(trace, "c1", "root", now.Add(time.Millisecond), true))
	}
	ctx := context.Background()
	for i, want := range []struct {
		n    int
		more bool
	}{{2, true}, {1, false}, {0, false}} {
		n, more, err := a.step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != want.n || more != want.more {
			t.Errorf("pass %d: %d traces, more %v; want %d, %v", i+1, n, more, want.n, want.more)
		}
	}
}

// TestAssemblerRestsBetweenChainedPasses: Run rests after a pass that left
// more for the next, as long as the pass took, and not after one that
// caught up.
func TestAssemblerRestsBetweenChainedPasses(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 4 // two of the three inserts below
	a.Interval = 20 * time.Millisecond
	var mu sync.Mutex
	var rests []time.Duration
	a.rest = func(_ context.Context, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		rests = append(rests, d)
	}
	runUntilAssembled(t, a, []string{"r1", "r2", "r3"}, 10*a.Interval) // then passes that find nothing: no rest
	mu.Lock()
	defer mu.Unlock()
	if len(rests) != 1 || rests[0] <= 0 || rests[0] > 10*time.Second {
		t.Errorf("rests %v, want one after the first pass, as long as it took", rests)
	}
}

// TestAssemblerReadsRunNiced: the engine runs the assembler's reads at nice
// 10 while they run and restores its threads after, when the process may
// change priorities (root in CI); without CAP_SYS_NICE the setting is
// ignored and the read still runs.
func TestAssemblerReadsRunNiced(t *testing.T) {
	a := openAssembler(t)
	// The engine's merge threads run at nice 10 too (mergeNice), whenever
	// a merge of the tables the test made happens to run: they are not
	// the read's.
	niced := func() (n int) {
		for _, th := range chtest.Threads() {
			if th.Nice == 10 && !strings.HasPrefix(th.Comm, "MergeMutate") {
				n++
			}
		}
		return n
	}
	done := make(chan error, 1)
	go func() {
		// Two seconds of sleeping, not a CPU-bound scan: a billion-row
		// scan at nice 10 starved behind the other packages' tests in CI
		// (the package took 344–394 s instead of ~95, then the engine
		// crashed).
		_, err := a.CH.Query(context.Background(), "SELECT count() AS n FROM numbers(8) WHERE sleepEachRow(0.25) = 0"+assemblyReadSettings)
		done <- err
	}()
	during := 0
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(50 * time.Millisecond):
			during = max(during, niced())
		}
	}
	capable := chtest.CanNice()
	if capable && during == 0 {
		t.Errorf("no engine thread ran at nice 10 during the read")
	}
	if !capable && during != 0 {
		t.Errorf("%d threads at nice 10 without CAP_SYS_NICE", during)
	}
	if after := niced(); after != 0 {
		t.Errorf("%d threads still at nice 10 after the read", after)
	}
}

// A pass looks for inserts within a window after the watermark: a backlog
// longer than the window takes several passes, each taking only what its
// window holds, and a window with nothing in it makes the pass look at the
// rest at once.
func TestAssemblerFindsInsertsInAWindow(t *testing.T) {
	a := openAssembler(t)
	a.defaults()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	a.mustInsert(t, agentSpan("first", "root", "", now, false), agentSpan("first", "c1", "root", now.Add(time.Millisecond), true))
	time.Sleep(50 * time.Millisecond)
	a.mustInsert(t, agentSpan("second", "root", "", now, false), agentSpan("second", "c1", "root", now.Add(time.Millisecond), true))
	r, err := a.CH.Query(ctx, "SELECT min(inserted_at) AS first, max(inserted_at) AS last FROM spans")
	if err != nil {
		t.Fatal(err)
	}
	first, last := r.Row(0).Time("first"), r.Row(0).Time("last")
	if last.Sub(first) < 40*time.Millisecond {
		t.Fatalf("inserts %s apart, want two inserts 50 ms apart", last.Sub(first))
	}
	if err := a.setWatermark(ctx, first.Add(-time.Nanosecond)); err != nil {
		t.Fatal(err)
	}
	a.findWindow = 10 * time.Millisecond
	n, more, err := a.step(ctx)
	if err != nil || n != 1 || !more {
		t.Fatalf("first pass: %d traces, more %v (%v); want the first insert's trace and more to come", n, more, err)
	}
	if a.findWindow != 20*time.Millisecond {
		t.Errorf("window after a pass short of its budget: %s, want it doubled to 20ms", a.findWindow)
	}
	if rows := liveRows(t, a, "second"); len(rows) != 0 {
		t.Errorf("the second insert's trace is assembled after the first pass: %+v", rows)
	}
	// The window after the first insert is empty; the pass looks further.
	n, more, err = a.step(ctx)
	if err != nil || n != 1 || more {
		t.Fatalf("second pass: %d traces, more %v (%v); want the second insert's trace and nothing left", n, more, err)
	}
	for _, trace := range []string{"first", "second"} {
		if rows := liveRows(t, a, trace); len(rows) != 1 {
			t.Errorf("trace %s: rows %+v, want one", trace, rows)
		}
	}
	if wm, err := a.watermark(ctx); err != nil || wm.Before(last) {
		t.Errorf("watermark %s (%v), want past the last insert %s", wm, err, last)
	}
}

// watermark is the assembler's watermark, the epoch before the first pass.
func (a *Assembler) watermark(ctx context.Context) (time.Time, error) {
	wm, _, err := a.progress(ctx)
	return wm, err
}

// A pass derives its spans a few traces at a time: batches far apart in
// time or on other services load the events they need, so every cold
// start is judged as it would be with all events at hand, and none is
// missed or invented because its batch came first or last.
func TestAssemblerColdStartsAcrossBatches(t *testing.T) {
	a := openAssembler(t)
	a.batchSpans = 2 // a trace or two per batch
	// A short window: batches minutes apart need events the first did not.
	a.Options.ColdStartWindow = 20 * time.Second
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	var spans []telemetry.Span
	for i := range 40 {
		trace := fmt.Sprintf("cold-%02d", i)
		start := base.Add(time.Duration(i) * 5 * time.Second)
		server := []string{"vllm-a", "vllm-b"}[i%2]
		client := agentSpan(trace, "c1", "", start, true)
		spans = append(spans, client, telemetry.Span{ProjectID: 1, TraceID: trace, SpanID: "s1", ParentSpanID: "c1", Service: server,
			Instance: fmt.Sprintf("pod-%d", i%3), Name: "llm_request", Start: start.Add(time.Second), End: start.Add(3 * time.Second),
			StatusCode: "ok", LLM: telemetry.LLMCall{Role: telemetry.LLMServer, Provider: "vllm", Model: "llama"}})
	}
	scale := func(at time.Duration, service string) telemetry.Event {
		return telemetry.Event{ProjectID: 1, Time: base.Add(at), Kind: telemetry.EventScale, Service: service,
			FromReplicas: telemetry.Ptr(int32(1)), ToReplicas: telemetry.Ptr(int32(2))}
	}
	events := []telemetry.Event{scale(20*time.Second, "vllm-b"), scale(150*time.Second, "vllm-a"),
		{ProjectID: 1, Time: base.Add(100 * time.Second), Kind: telemetry.EventInstanceStarted, Service: "vllm-a", Instance: "pod-1"}}
	if err := a.CH.Insert(ctx, clickhouse.EventsBatch(events)); err != nil {
		t.Fatal(err)
	}
	a.mustInsert(t, spans...)
	a.mustStep(t)
	// The same spans derived at once, with every event.
	hist := &assemble.InstanceHistory{FirstSeen: map[string]time.Time{assemble.InstanceKey("vllm-a", "pod-1"): events[2].Time}, Events: events}
	want := map[string]bool{}
	cold := 0
	for _, r := range assemble.Traces(spans, hist, a.Options) {
		want[r.TraceID] = r.ColdStart
		if r.ColdStart {
			cold++
		}
	}
	if cold < 2 || cold > len(want)-2 {
		t.Fatalf("the scenario has %d cold starts of %d requests; want some of each", cold, len(want))
	}
	for trace, w := range want {
		rows := liveRows(t, a, trace)
		if len(rows) != 1 || rows["c1"].ColdStart != w {
			t.Errorf("trace %s: rows %+v, want one cold start %v", trace, rows, w)
		}
	}
}

// TestNextRestRatio: the rest after a chained pass doubles while more than
// 1 % of the acknowledgements during it were slow, up to 4× the pass's
// time, and halves back to 1× once they are not. Once hardly any exports
// arrive (a burst is over) it drops to a quarter.
func TestNextRestRatio(t *testing.T) {
	for _, c := range []struct {
		ratio     float64
		all, slow uint64
		want      float64
	}{
		{0, 0, 0, 0.25},     // the first pass, no exports
		{1, 1000, 5, 1},     // 0.5 % slow
		{1, 1000, 11, 2},    // 1.1 % slow
		{2, 1000, 200, 4},   // 20 % slow
		{4, 1000, 1000, 4},  // at most 4
		{4, 1000, 0, 2},     // receivers fast again
		{1, 1000, 0, 1},     // at least 1 while exports arrive
		{0.25, 1000, 0, 1},  // exports again after an idle stretch
		{0.25, 1000, 20, 2}, // slow ones at once: twice 1
		{4, 10, 10, 0.25},   // too few to protect: catch up
		{9, 1000, 1000, 4},  // never above 4
	} {
		if got := nextRestRatio(c.ratio, c.all, c.slow); got != c.want {
			t.Errorf("nextRestRatio(%v, %d, %d) = %v, want %v", c.ratio, c.all, c.slow, got, c.want)
		}
	}
}

// While the receivers' acknowledgements are slow, Run rests longer after
// each chained pass: twice the pass's time, then four times.
func TestAssemblerRestsLongerWhileAcksAreSlow(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 2 // one insert a pass
	a.Interval = 20 * time.Millisecond
	var acks, slow uint64
	a.Acks = func() (uint64, uint64) {
		acks, slow = acks+100, slow+50 // half of every pass's exports slow
		return acks, slow
	}
	var ratios []float64
	a.rest = func(context.Context, time.Duration) { ratios = append(ratios, a.restRatio) }
	runUntilAssembled(t, a, []string{"s1", "s2", "s3", "s4"}, 0)
	if want := []float64{2, 4, 4}; !slices.Equal(ratios, want) {
		t.Errorf("rest ratios %v, want %v (one rest after each pass that left more)", ratios, want)
	}
}

// With no exports arriving, Run rests only a quarter of each chained
// pass's time: nothing competes with it but the pages.
func TestAssemblerCatchesUpWhileIdle(t *testing.T) {
	a := openAssembler(t)
	a.MaxSpans = 2 // one insert a pass
	a.Interval = 20 * time.Millisecond
	a.Acks = func() (uint64, uint64) { return 1000, 500 } // none since the start
	var ratios []float64
	a.rest = func(context.Context, time.Duration) { ratios = append(ratios, a.restRatio) }
	runUntilAssembled(t, a, []string{"s1", "s2", "s3"}, 0)
	if want := []float64{restWhenIdle, restWhenIdle}; !slices.Equal(ratios, want) {
		t.Errorf("rest ratios %v, want %v (one rest after each pass that left more)", ratios, want)
	}
}

// runUntilAssembled inserts an agent trace of each id, one insert each,
// runs the assembler until the last is assembled and settle more, and
// stops it.
func runUntilAssembled(t *testing.T, a *Assembler, traces []string, settle time.Duration) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	for _, trace := range traces {
		a.mustInsert(t, agentSpan(trace, "root", "", now, false), agentSpan(trace, "c1", "root", now.Add(time.Millisecond), true))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		a.Run(ctx)
		close(done)
	}()
	last := traces[len(traces)-1]
	for deadline := time.Now().Add(30 * time.Second); len(liveRows(t, a, last)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("%s not assembled within 30 s", last)
		}
	}
	time.Sleep(settle)
	cancel()
	<-done
}
