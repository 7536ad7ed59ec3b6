package analysis

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// TraceJoins says how the requests of one trace were paired and which
// requests of other traces took a server span of it.
type TraceJoins struct {
	// TakenBy lists the requests (of other traces) whose server span is a
	// span of this trace: their trace and client span ids.
	TakenBy []TakenSpan
}

// TakenSpan is a server span of a trace that a client call of another
// trace took (joined by id or by match).
type TakenSpan struct {
	ServerSpanID string
	TraceID      string
	SpanID       string
	Join         string
}

// FillJoins sets the join fields of reqs, the requests of one trace as
// Trace returns them (the samples and rollups do not keep these columns,
// so they are read from llm_requests), and finds the requests of other
// traces that took a server span of spans, the trace's spans.
func (q *Queries) FillJoins(ctx context.Context, project uint32, traceID string, spans []telemetry.Span, reqs []telemetry.LLMRequest) (TraceJoins, error) {
	if len(spans) == 0 && len(reqs) == 0 {
		return TraceJoins{}, nil
	}
	var lo, hi time.Time
	first := true
	widen := func(a, b time.Time) {
		if first || a.Before(lo) {
			lo = a
		}
		if first || b.After(hi) {
			hi = b
		}
		first = false
	}
	for i := range spans {
		widen(spans[i].Start, spans[i].End)
	}
	for i := range reqs {
		widen(reqs[i].Start, reqs[i].Start)
	}
	// A request starts when its client span does: within its trace's
	// spans, and within assemble.IDSlack of a server span it took.
	r, err := q.CH.Query(ctx, `SELECT trace_id, span_id, server_span_id, `+clickhouse.DetailColumns+` FROM llm_requests FINAL
		WHERE project_id = ? AND start >= ? AND start <= ? AND (trace_id = ? OR server_trace_id = ?) AND is_deleted = 0`+FinalSettings,
		project, lo.Add(-assemble.IDSlack), hi.Add(assemble.IDSlack), traceID, traceID)
	if err != nil {
		return TraceJoins{}, fmt.Errorf("load request joins: %w", err)
	}
	var out TraceJoins
	for i := range r.Len() {
		w := r.Row(i)
		trace, span := w.String("trace_id"), w.String("span_id")
		if trace != traceID {
			out.TakenBy = append(out.TakenBy, TakenSpan{ServerSpanID: w.String("server_span_id"), TraceID: trace, SpanID: span, Join: w.String("join_method")})
			continue
		}
		for k := range reqs {
			if reqs[k].SpanID == span {
				clickhouse.ScanDetail(w, &reqs[k])
			}
		}
	}
	return out, nil
}

// FillDetails sets the DetailColumns fields (join method, TTFT and token
// sources, preemptions) of reqs, a page of a list: the samples and top-K
// views a list may come from do not keep them. One read of the page's keys
// within its time range.
func (q *Queries) FillDetails(ctx context.Context, project uint32, reqs []telemetry.LLMRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	lo, hi := reqs[0].Start, reqs[0].Start
	traces := make([]string, 0, len(reqs))
	at := make(map[[2]string]int, len(reqs))
	for i := range reqs {
		lo, hi = telemetry.MinTime(lo, reqs[i].Start), telemetry.MaxTime(hi, reqs[i].Start)
		traces = append(traces, reqs[i].TraceID)
		at[[2]string{reqs[i].TraceID, reqs[i].SpanID}] = i
	}
	r, err := q.CH.Query(ctx, `SELECT trace_id, span_id, `+clickhouse.DetailColumns+` FROM llm_requests FINAL
		WHERE project_id = ? AND start >= ? AND start <= ? AND trace_id IN ? AND is_deleted = 0`+FinalSettings,
		project, lo, hi, clickhouse.StringSet(traces))
	if err != nil {
		return fmt.Errorf("load request details: %w", err)
	}
	for i := range r.Len() {
		w := r.Row(i)
		if k, ok := at[[2]string{w.String("trace_id"), w.String("span_id")}]; ok {
			clickhouse.ScanDetail(w, &reqs[k])
		}
	}
	return nil
}
