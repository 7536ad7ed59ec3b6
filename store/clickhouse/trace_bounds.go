package clickhouse

import (
	"context"
	"fmt"
	"time"
)

// TraceBounds is what trace_bounds says of a set of a project's traces
// (distinct ids).
type TraceBounds struct {
	Lo, Hi  time.Time // the first and last start of their spans
	Bounded int       // traces with bounds
	// Older counts the traces with a span stored at or before the time
	// TraceBounds was asked about.
	Older int
}

// TraceBounds reads the bounds of a project's traces from trace_bounds
// (ordered by trace id in small granules: at most one granule per trace is
// read), and counts those with a span inserted at or before storedBy.
func (s *Store) TraceBounds(ctx context.Context, project uint32, traceIDs []string, storedBy time.Time, settings string) (TraceBounds, error) {
	r, err := s.Query(ctx, `SELECT uniqExact(trace_id) AS bounded, uniqExactIf(trace_id, first_inserted <= ?) AS older,
		CAST(min(first_start) AS DateTime64(9, 'UTC')) AS lo, CAST(max(last_start) AS DateTime64(9, 'UTC')) AS hi
		FROM trace_bounds WHERE project_id = ? AND trace_id IN ?`+settings, storedBy, project, StringSet(traceIDs))
	if err != nil {
		return TraceBounds{}, fmt.Errorf("load trace bounds: %w", err)
	}
	w := r.Row(0)
	return TraceBounds{Lo: w.Time("lo"), Hi: w.Time("hi"), Bounded: int(w.Int("bounded")), Older: int(w.Int("older"))}, nil
}
