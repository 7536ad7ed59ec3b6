package assembler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/clickhouse/chtest"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

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

// TestAssemblerReadsRunNiced: the engine runs the assembler's reads at nice
// 10 while they run and restores its threads after, when the process may
// change priorities (root in CI); without CAP_SYS_NICE the setting is
// ignored and the read still runs.
func TestAssemblerReadsRunNiced(t *testing.T) {
	a := openAssembler(t)
	// The engine's merge threads run at nice 10 too (mergeNice), whenever
	// a merge of the tables the test made happens to run, and so may a
	// pool thread ("ThreadPool") doing a merge's work: threads niced
	// before the read starts are not the read's.
	nicedThreads := func() map[int]string {
		out := map[int]string{}
		for _, th := range chtest.Threads() {
			if th.Nice == 10 && !strings.HasPrefix(th.Comm, "MergeMutate") {
				out[th.TID] = th.Comm
			}
		}
		return out
	}
	before := nicedThreads()
	niced := func() (n int) {
		for tid := range nicedThreads() {
			if _, ok := before[tid]; !ok {
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
	// A pipeline thread puts its nice back as it finishes, which can land
	// just after the query returns: allow it a moment.
	after := niced()
	for deadline := time.Now().Add(2 * time.Second); after != 0 && time.Now().Before(deadline); after = niced() {
		time.Sleep(50 * time.Millisecond)
	}
	if after != 0 {
		t.Errorf("%d threads still at nice 10 after the read: %v (niced before it: %v)", after, nicedThreads(), before)
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
