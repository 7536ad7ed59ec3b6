// Package assembler is the write side of analysis: a worker that turns
// the spans stored since its watermark into decomposed llm_requests rows,
// one node of a cluster at a time. The decomposition itself is the pure
// analysis/assemble package; the read side is analysis.
package assembler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Assembler rebuilds the llm_requests rows of every trace that received
// spans since its watermark. The watermark (spans.inserted_at, in
// PostgreSQL) makes a restart resume with no gap; row versions make a
// re-assembly replace earlier rows instead of duplicating them.
type Assembler struct {
	CH  *clickhouse.Store
	PG  *postgres.Store
	Log *slog.Logger
	// Lag keeps the assembler behind inserts that may still be committing:
	// those of other writers, and the engine's clock against this one's.
	Lag time.Duration
	// Writing, when set, says since when this process's oldest insert
	// still under way runs (ingest.Pipeline.WritingSince). Its spans carry
	// an inserted_at from its start but are visible only once it commits,
	// which under load takes longer than Lag: a pass reading past that
	// start would miss them for good.
	Writing func() (since time.Time, ok bool)
	// Interval between passes.
	Interval time.Duration
	// MaxSpans bounds one pass by the new spans it takes (whole inserts:
	// the first one is taken whatever its size).
	MaxSpans int
	Options  assemble.Options
	// Now is the clock (tests).
	Now func() time.Time
	// Acks, when set, counts the receivers' acknowledgements so far and
	// the slow ones among them (ingest.Metrics.Acks): Run rests longer
	// between chained passes while they are slow.
	Acks func() (all, slow uint64)
	// restRatio is how long Run rests after a chained pass, per unit of
	// the pass's time (nextRestRatio).
	restRatio float64
	// rest waits between chained passes (tests record it); nil sleeps.
	rest  func(ctx context.Context, d time.Duration)
	times passTimes
	// findWindow is how far past the watermark a pass looks for inserts
	// (step adapts it; zero is firstFindWindow).
	findWindow time.Duration
	// batchSpans is about how many spans a pass derives at a time
	// (spansPerBatch; tests make it small).
	batchSpans int
}

// A pass looks for its inserts within a window after the watermark,
// adapted to hold about a pass's budget (step).
const (
	firstFindWindow = 10 * time.Second
	minFindWindow   = time.Second
	maxFindWindow   = time.Hour
)

func (a *Assembler) defaults() {
	if a.Lag <= 0 {
		a.Lag = 2 * time.Second
	}
	if a.Interval <= 0 {
		a.Interval = time.Second
	}
	if a.MaxSpans <= 0 {
		// ~50k traces of the bench's 4 spans.
		a.MaxSpans = 200_000
	}
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.batchSpans <= 0 {
		a.batchSpans = spansPerBatch
	}
	if a.rest == nil {
		a.rest = func(ctx context.Context, d time.Duration) {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}
}

// Run assembles until ctx is done. Only one node in a cluster works at a
// time (advisory lock per pass).
func (a *Assembler) Run(ctx context.Context) {
	a.defaults()
	a.PG.RunLocked(ctx, postgres.LockAssembler, a.Interval, a.Log, "assembling llm requests",
		func(ctx context.Context) (bool, error) {
			all0, slow0 := a.acks()
			t0 := time.Now()
			_, more, err := a.step(ctx)
			if more && err == nil {
				all1, slow1 := a.acks()
				a.restRatio = nextRestRatio(a.restRatio, all1-all0, slow1-slow0)
				a.rest(ctx, time.Duration(a.restRatio*float64(time.Since(t0))))
			}
			return more, err
		})
}

// Step runs one pass and returns how many traces it assembled.
func (a *Assembler) Step(ctx context.Context) (int, error) {
	n, _, err := a.step(ctx)
	return n, err
}

// step runs one pass; more says it left new traces for the next pass (it
// was bounded by MaxSpans or by its window), which then runs at once
// instead of on the next tick.
func (a *Assembler) step(ctx context.Context) (n int, more bool, err error) {
	a.defaults()
	t := time.Now()
	wm, unfinished, err := a.progress(ctx)
	if err != nil {
		return 0, false, err
	}
	upper := a.Now().Add(-a.Lag)
	if a.Writing != nil {
		if since, ok := a.Writing(); ok {
			upper = telemetry.MinTime(upper, since.Add(-a.Lag))
		}
	}
	if !upper.After(wm) {
		return 0, false, nil
	}
	// Look for the pass's inserts in a window after the watermark, not in
	// everything since it: counting grows with the backlog (2M spans waiting:
	// 14–55 ms against 9–33 ms for one insert's window in a probe), and at
	// full rate the assembler falls minutes (tens of millions of spans)
	// behind.
	window := a.findWindow
	if window <= 0 {
		window = firstFindWindow
	}
	end := upper
	if w := wm.Add(window); w.Before(upper) {
		end = w
	}
	r, err := a.newInserts(ctx, wm, end)
	if err == nil && r.Len() == 0 && end.Before(upper) {
		// Nothing in the window (an idle stretch): the rest, at once.
		end = upper
		r, err = a.newInserts(ctx, wm, end)
	}
	if err != nil {
		return 0, false, err
	}
	if r.Len() == 0 {
		t = a.times.since("find", t)
		defer a.times.since("watermark", t)
		return 0, false, a.setWatermark(ctx, upper)
	}
	more = end.Before(upper)
	upper = end
	// Take inserts while they fit the budget, and the first one whatever
	// its size (one large insert, a replayed log segment, is taken whole
	// or the pass would not advance). Every insert holds at least one
	// span, so the LIMIT always reaches past the budget.
	found, full := 0, false
	for i := range r.Len() {
		if found += int(r.Row(i).Int("spans")); !full && found > a.MaxSpans && i > 0 {
			upper, more, full = r.Row(i-1).Time("ins"), true, true
		}
	}
	// Aim the next window at about a pass's budget: wider while windows
	// come back short of it with more after them, narrower once one holds
	// several budgets.
	switch {
	case more && !full:
		a.findWindow = min(2*window, maxFindWindow)
	case found > 4*a.MaxSpans || r.Len() > a.MaxSpans:
		a.findWindow = max(window/2, minFindWindow)
	}
	t = a.times.since("find", t)
	r, err = a.CH.Query(ctx, `SELECT DISTINCT project_id, trace_id FROM spans
		WHERE inserted_at > ? AND inserted_at <= ?`+assemblyReadSettings, wm, upper)
	if err != nil {
		return 0, false, fmt.Errorf("find new traces: %w", err)
	}
	// The pass's traces, per project: the reads below select them by these
	// ids, so the new traces are found in spans once a pass.
	traces := map[uint32][]string{}
	for i := 0; i < r.Len(); i++ {
		w := r.Row(i)
		project := uint32(w.Int("project_id"))
		traces[project] = append(traces[project], w.String("trace_id"))
		n++
	}
	t = a.times.since("traces", t)
	if err := a.markWriting(ctx, upper); err != nil {
		return 0, false, err
	}
	a.times.since("watermark", t)
	p := pass{after: wm, upper: upper, unfinished: unfinished, joined: map[string]bool{}}
	if unfinished && a.Log != nil {
		a.Log.Info("an earlier pass was cut short after it began writing; this pass reads the existing rows of fresh traces too",
			"watermark", wm, "traces", n)
	}
	for project, ids := range traces {
		// One large insert can bring any number of traces at once: its ids
		// are taken in chunks, so no statement outgrows the store's
		// max_query_size.
		whole := len(ids) <= tracesPerStatement
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), tracesPerStatement)]
			ids = ids[len(chunk):]
			if err := a.assemble(ctx, p, project, chunk, whole); err != nil {
				return 0, false, err
			}
		}
	}
	defer a.times.since("watermark", time.Now())
	return n, more, a.setWatermark(ctx, upper)
}

// newInserts counts the spans of each insert in (after, upper], in insert
// order, up to one more insert than a pass can take.
//
// Grouping by inserted_at (one value per insert, its DEFAULT now64) counts
// inserts: a few hundred rows however many spans. Grouping the new spans by
// trace instead held ~100 bytes per trace (most of a GiB once minutes
// behind at full rate) and hashed every waiting span again on each pass.
func (a *Assembler) newInserts(ctx context.Context, after, upper time.Time) (*clickhouse.Result, error) {
	r, err := a.CH.Query(ctx, `SELECT inserted_at AS ins, count() AS spans
		FROM spans WHERE inserted_at > ? AND inserted_at <= ?
		GROUP BY ins ORDER BY ins LIMIT ?`+assemblyReadSettings, after, upper, a.MaxSpans+1)
	if err != nil {
		return nil, fmt.Errorf("find new inserts: %w", err)
	}
	return r, nil
}

// tracesPerStatement bounds the trace ids one statement of a pass lists
// (a clickhouse.StringSet): ~35 bytes each, 60k make ~2.1 MB of SQL
// (clickhouse.MaxQuerySize allows 4 MiB), so a pass of MaxSpans (~50k
// traces of four spans) looks its traces up once, not once per chunk.
const tracesPerStatement = 60_000

// assemblySpanColumns is what assembly needs of a span: the typed columns
// and the route and tenant columns, not the attribute and resource maps,
// which cost far more to read and decode (a map is read whole even for one
// key). The route and tenant come back as the attributes assembly reads
// them from (clickhouse.ScanSpanCores).
var assemblySpanColumns = clickhouse.SpanCoreColumns + ", route, tenant"

// assemblyReadSettings keeps the assembler's reads to one thread, and that
// thread at nice 10: a read using every core, or competing at the
// receivers' priority, would starve the receivers decoding exports (and
// the inserts running beside it) while the assembler catches up after a
// burst. At a fixed 50k spans/s (bench ingest, gRPC, 2 cores) the nice
// took export p99 from 0.5–3.7 s to 0.15–0.21 s, and the assembler fell
// no further behind. The engine applies the nice only with CAP_SYS_NICE
// (root, or a container given it); without it the setting does nothing.
const assemblyReadSettings = " SETTINGS max_threads = 1, os_thread_priority = 10"

// pass is what one pass takes: the spans inserted in (after, upper].
type pass struct {
	after, upper time.Time
	// unfinished says an earlier pass began writing rows past after and
	// did not save its watermark (markWriting): traces first stored since
	// after may have rows already.
	unfinished bool
	// joined holds the traces a join rewrote beyond its own statement's
	// (assembler_join.go): a later statement of the pass reads their rows.
	joined map[string]bool
}

// assemble rebuilds the rows of the given traces of one project (those
// that received spans in the pass's inserts; distinct ids); whole says
// they are all the project's traces in the pass.
func (a *Assembler) assemble(ctx context.Context, p pass, project uint32, traceIDs []string, whole bool) error {
	// Both reads below select by trace_id, which neither table's key or
	// partition can prune: bounded by the new traces' starts they read the
	// days those traces span instead of the whole retention.
	t := time.Now()
	within, args, fresh, err := a.traceWindow(ctx, project, traceIDs, p.after)
	if err != nil {
		return err
	}
	t = a.times.since("bounds", t)
	// No FINAL: a span stored twice (a retried export) is the same span,
	// and assemble.Traces keeps one copy of each (trace_id, span_id).
	// PREWHERE reads trace_id first and the other columns only where it matches.
	query := "SELECT " + assemblySpanColumns + " FROM spans PREWHERE project_id = ?" + within
	spansArgs := append([]any{project}, args...)
	switch {
	case fresh && whole:
		// Every span the pass inserted for the project belongs to one of
		// these traces and every span of theirs is among them: the
		// inserts alone select them, with no set of ids to build and probe.
		query += freshSpans
		spansArgs = append(spansArgs, p.after, p.upper)
	case fresh:
		query += freshSpans + " AND trace_id IN ?"
		spansArgs = append(spansArgs, p.after, p.upper, clickhouse.StringSet(traceIDs))
	default:
		query += " AND trace_id IN ?"
		spansArgs = append(spansArgs, clickhouse.StringSet(traceIDs))
	}
	// The spans come in batches of whole traces, each derived and let go
	// before the next is decoded (QuerySpanCores).
	events := passEvents{a: a, project: project}
	reqs := make([]telemetry.LLMRequest, 0, len(traceIDs)) // about a request a trace
	var halves []assemble.Half                             // calls the traces leave unpaired
	var batchErr error
	spans := 0
	err = a.CH.QuerySpanCores(ctx, a.batchSpans, func(batch []telemetry.Span) error {
		t = a.times.since("spans", t)
		spans += len(batch)
		hist, err := events.cover(ctx, batch)
		if err != nil {
			batchErr = err
			return err
		}
		t = a.times.since("events", t)
		r, h := assemble.TracesJoined(batch, hist, a.Options, nil)
		reqs, halves = append(reqs, r...), append(halves, h...)
		t = a.times.since("derive", t)
		return nil
	}, query+assemblyReadSettings, spansArgs...)
	if batchErr != nil {
		return batchErr
	}
	if err != nil {
		return fmt.Errorf("load spans: %w", err)
	}
	t = a.times.since("spans", t)
	if spans == 0 {
		return nil
	}
	var j joined
	if len(halves) > 0 {
		if j, err = a.join(ctx, project, traceIDs, halves); err != nil {
			return err
		}
		reqs = j.apply(reqs)
		for _, id := range j.touched {
			p.joined[id] = true
		}
		t = a.times.since("join", t)
	}
	if err := a.fillServedModels(ctx, project, reqs); err != nil {
		return err
	}

	// Rows an earlier pass wrote that this one no longer produces (e.g. a
	// server-only row replaced once the client span arrived) get tombstones.
	// The live rows are resolved here as FINAL would (the highest version
	// of each key, unless deleted): FINAL merges the key columns of the
	// whole table before the trace filter applies.
	// A request starts when its LLM span does, so within its trace's bounds.
	// Traces first stored since the pass's start have no rows unless a
	// pass over them was cut short after writing some.
	live := map[string]*telemetry.LLMRequest{}
	if !fresh || p.unfinished || len(p.joined) > 0 && slices.ContainsFunc(traceIDs, func(id string) bool { return p.joined[id] }) {
		er, err := a.CH.Query(ctx, "SELECT "+existingRowColumns+" FROM llm_requests PREWHERE project_id = ?"+within+" AND trace_id IN ?"+assemblyReadSettings,
			append(append([]any{project}, args...), clickhouse.StringSet(traceIDs))...)
		if err != nil {
			return fmt.Errorf("load existing requests: %w", err)
		}
		// A live row the pass derives again unchanged is not rewritten; one
		// it changes is retracted beside its new version (the rollups
		// subtract it), one it no longer derives gets a tombstone.
		for _, old := range liveRequests(er) {
			live[rowKey(old)] = &old
		}
	}
	// Traces a pairing reached beyond the pass have rows of their own.
	touched, err := a.storedRows(ctx, project, j.touched)
	if err != nil {
		return err
	}
	for _, old := range touched {
		live[rowKey(old)] = &old
	}
	t = a.times.since("existing", t)
	var changed, replaced []telemetry.LLMRequest
	if len(live) == 0 {
		changed = reqs // nothing to compare with (fresh traces): no keys to build
	} else {
		for i := range reqs {
			k := rowKey(reqs[i])
			old, ok := live[k]
			delete(live, k)
			switch {
			case !ok:
				changed = append(changed, reqs[i])
			case !old.Equal(&reqs[i]):
				changed, replaced = append(changed, reqs[i]), append(replaced, *old)
			}
		}
	}
	gone := make([]telemetry.LLMRequest, 0, len(live))
	for _, old := range live {
		gone = append(gone, *old)
	}
	t = a.times.since("derive", t)
	if len(changed)+len(gone) == 0 {
		return nil
	}
	defer a.times.since("write", t)
	return a.CH.Insert(ctx, clickhouse.RequestsRewriteBatch(changed, gone, replaced, uint64(a.Now().UnixNano())))
}
