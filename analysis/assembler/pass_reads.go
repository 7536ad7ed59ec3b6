package assembler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// spansPerBatch is about how many spans a pass decodes and derives at a
// time (QuerySpanCores): 25k spans of structs and strings are ~14 MiB.
const spansPerBatch = 25_000

// passEvents loads the scaling and instance events a pass's batches of
// spans need: those of the services their LLM server spans ran on, within
// twice the cold-start window of the spans' starts. A batch the loaded
// history covers reuses it; one reaching past it reloads for the union.
// Which events are loaded beyond that does not change a derived row: a
// cold start is judged within the window of its own span.
type passEvents struct {
	a        *Assembler
	project  uint32
	services map[string]bool
	lo, hi   time.Time // the span starts the loaded history covers
	hist     *assemble.InstanceHistory
}

func (e *passEvents) cover(ctx context.Context, spans []telemetry.Span) (*assemble.InstanceHistory, error) {
	lo, hi := spans[0].Start, spans[0].Start
	added := false
	for i := range spans {
		s := &spans[i]
		if s.Start.Before(lo) {
			lo = s.Start
		}
		if s.Start.After(hi) {
			hi = s.Start
		}
		if s.LLM.Role == telemetry.LLMServer && !e.services[s.Service] {
			if e.services == nil {
				e.services = map[string]bool{}
			}
			e.services[s.Service], added = true, true
		}
	}
	if e.hist != nil && !added && !lo.Before(e.lo) && !hi.After(e.hi) {
		return e.hist, nil
	}
	window := e.a.Options.WithDefaults().ColdStartWindow
	if e.hist != nil {
		lo, hi = telemetry.MinTime(lo, e.lo), telemetry.MaxTime(hi, e.hi)
	} else {
		// The pass's other batches start about where this one does: a
		// window's slack spares them a reload.
		lo, hi = lo.Add(-window), hi.Add(window)
	}
	e.lo, e.hi = lo, hi
	e.hist = &assemble.InstanceHistory{FirstSeen: map[string]time.Time{}}
	if len(e.services) == 0 {
		return e.hist, nil
	}
	names := make([]string, 0, len(e.services))
	for s := range e.services {
		names = append(names, s)
	}
	er, err := e.a.CH.Query(ctx, "SELECT "+clickhouse.EventColumns+` FROM events FINAL
		WHERE project_id = ? AND service IN ? AND time >= ? AND time <= ?`+assemblyReadSettings, e.project, names, lo.Add(-2*window), hi.Add(2*window))
	if err != nil {
		return nil, fmt.Errorf("load events: %w", err)
	}
	e.hist.Events = clickhouse.ScanEvents(er)
	for _, ev := range e.hist.Events {
		if ev.Kind == telemetry.EventInstanceStarted {
			k := assemble.InstanceKey(ev.Service, ev.Instance)
			if t, ok := e.hist.FirstSeen[k]; !ok || ev.Time.Before(t) {
				e.hist.FirstSeen[k] = ev.Time
			}
		}
	}
	return e.hist, nil
}

// traceWindow returns the condition (and its arguments) that bounds a read
// of spans or llm_requests to the given traces (distinct ids) of a pass
// taking the inserts in (after, upper]: every span of those traces,
// whatever its age, since the bounds come from all their stored spans, not
// from the new ones. One long-lived trace widens the pass's read to the
// days it spans. fresh says every one of the traces was first stored after
// after: their spans are all in the pass's inserts, and freshSpans narrows
// a read of spans to those. When a trace has no bounds (spans stored while
// the view was missing), it returns no condition: an unbounded pass is
// slow, a missed span is wrong.
func (a *Assembler) traceWindow(ctx context.Context, project uint32, traceIDs []string, after time.Time) (within string, args []any, fresh bool, err error) {
	if len(traceIDs) == 0 {
		return "", nil, false, nil
	}
	b, err := a.CH.TraceBounds(ctx, project, traceIDs, after, assemblyReadSettings)
	if err != nil {
		return "", nil, false, err
	}
	if traces := len(traceIDs); b.Bounded < traces {
		if a.Log != nil {
			a.Log.Warn("traces without bounds; reading spans unbounded", "project", project, "traces", traces, "bounded", b.Bounded)
		}
		return "", nil, false, nil
	}
	return " AND start >= ? AND start <= ?", []any{b.Lo, b.Hi}, b.Older == 0, nil
}

// freshSpans narrows a read of spans to the inserts in (after, upper],
// which hold every span of fresh traces (traceWindow): idx_inserted skips
// the granules of earlier inserts, which a read by start and trace id
// alone decompresses and searches (several times the pass's spans when
// traces' starts spread over the seconds it takes them to arrive).
// A retry of an export stored after upper can replace a fresh trace's
// spans in a merge before the pass reads them (spans keeps the latest
// inserted_at of a duplicate), so the pass may see part of the trace: the
// retry puts the trace in the next pass too, which reads it the long way
// (its first span is then older than the watermark) and rewrites its rows.
const freshSpans = " AND inserted_at > ? AND inserted_at <= ?"

// liveRequests reduces rows selected with RequestColumns, row_version and
// is_deleted to what FINAL returns: per key the row of the highest version
// (a pass writes all its rows at one version), dropped when it is a
// tombstone.
func liveRequests(r *clickhouse.Result) []telemetry.LLMRequest {
	rows := clickhouse.ScanRequests(r)
	clickhouse.ScanDetails(r, rows)
	type best struct {
		i       int
		version int64
	}
	latest := map[string]best{}
	var order []string
	for i := range rows {
		k := rowKey(rows[i])
		v := r.Row(i).Int("row_version")
		b, ok := latest[k]
		if !ok {
			order = append(order, k)
		}
		if !ok || v >= b.version {
			latest[k] = best{i, v}
		}
	}
	out := make([]telemetry.LLMRequest, 0, len(order))
	for _, k := range order {
		b := latest[k]
		if !r.Row(b.i).Bool("is_deleted") {
			out = append(out, rows[b.i])
		}
	}
	return out
}

// rowKey is llm_requests' sorting key: rows with equal keys replace each other.
func rowKey(r telemetry.LLMRequest) string {
	return strings.Join([]string{r.Service, r.Start.UTC().Format(time.RFC3339Nano), r.TraceID, r.SpanID}, "\x00")
}
