package analysis

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Trace returns a trace's spans and its decomposed requests. The spans are
// read within the trace's starts from trace_bounds, so the primary key
// prunes the read to the granules of each service around the trace's
// seconds (spans has no index on trace_id), and PREWHERE reads the other
// columns only where the trace id matches: a service's granule can cover
// hours of a quiet service (4M spans over 7 days, 20 services: 39 granules
// for a one-second trace; median 49 ms a trace page, against 62 ms with the
// bloom filter and 104 ms without PREWHERE). PREWHERE before FINAL is
// sound here: every version of a span has its trace id. A trace without
// bounds has no spans: the view fills them on every insert into spans, and
// migration 0009 filled them for the spans before it.
func (q *Queries) Trace(ctx context.Context, project uint32, traceID string) ([]telemetry.Span, []telemetry.LLMRequest, error) {
	b, err := q.CH.TraceBounds(ctx, project, []string{traceID}, time.Unix(0, 0), "")
	if err != nil || b.Bounded == 0 {
		return nil, nil, err
	}
	r, err := q.CH.Query(ctx, "SELECT "+clickhouse.SpanColumns+" FROM spans FINAL PREWHERE trace_id = ? WHERE project_id = ? AND start >= ? AND start <= ? ORDER BY start",
		traceID, project, b.Lo, b.Hi)
	if err != nil {
		return nil, nil, fmt.Errorf("load trace: %w", err)
	}
	spans := clickhouse.ScanSpans(r)
	if err := q.CH.AttachResources(ctx, project, spans); err != nil {
		return nil, nil, fmt.Errorf("load trace: %w", err)
	}
	reqs, _, err := q.Requests(ctx, RequestFilter{Project: project, TraceID: traceID, Sort: "start", Limit: 1000, NoTotal: true})
	if err != nil {
		return nil, nil, err
	}
	return spans, reqs, nil
}
