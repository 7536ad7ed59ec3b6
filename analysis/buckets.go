package analysis

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// SeriesExactMax is the most stored rows of a window whose series the
// engine computes over every request when the diagnosis loads only a
// sample of them (~25 ms per 60k rows on two cores). A bigger window's
// series reads the stored sample (1/16), or its first level (1/256) past
// 16× that: never more than ~SeriesExactMax rows, and never fewer than
// the sample the diagnosis loads, so the chart's buckets stay sharp at any
// window size for a bounded cost.
const SeriesExactMax = 300_000

// seriesSelect computes one row per bucket: the figures diagnose.series
// derives from rows, with the same definitions (type-7 quantiles over the
// known values; counts and token sums).
var seriesSelect = func() string {
	var b strings.Builder
	b.WriteString("SELECT toStartOfInterval(start, toIntervalSecond(?)) AS bucket, count() AS n, ")
	for _, c := range diagnose.Components {
		fmt.Fprintf(&b, "quantilesExactInclusiveIf(0.5, 0.95, 0.99)(%[1]s_ms, isFinite(%[1]s_ms)) AS q_%[1]s, ", c)
	}
	b.WriteString("sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, countIf(cold_start = 1) AS cold, countIf(error = 1) AS errors FROM ")
	return b.String()
}()

// SeriesSQL is the statement computing the series of the requests matching
// where, rough of them stored: over every request up to exactMax, else over
// the stored sample or its first level, each row standing for scale
// requests.
func SeriesSQL(where string, args []any, width time.Duration, rough, exactMax int) (sql string, sqlArgs []any, scale float64) {
	p := planCount(rough, exactMax)
	return seriesSelect + p.table + " FINAL WHERE " + where + p.where + " GROUP BY bucket ORDER BY bucket" + FinalSettings,
		append([]any{max(int64(width/time.Second), 1)}, args...), p.scale
}

// requestBuckets computes the request figures of every width-wide bucket
// of a window (where, args; rough rows stored) in the engine: see
// diagnose.Input.RequestBuckets and SeriesSQL. exact says every request
// was read (the counts are the window's, not scaled up).
func (q *Queries) requestBuckets(ctx context.Context, where string, args []any, width time.Duration, rough int) (buckets []diagnose.Bucket, exact bool, err error) {
	sql, sqlArgs, scale := SeriesSQL(where, args, width, rough, q.seriesExactMax())
	r, err := q.CH.Query(ctx, sql, sqlArgs...)
	if err != nil {
		return nil, false, fmt.Errorf("series: %w", err)
	}
	// Empty, not nil: computed, with no request in any bucket.
	out := make([]diagnose.Bucket, 0, r.Len())
	for i := range r.Len() {
		row := r.Row(i)
		// Counts scale and round per bucket as the series of a loaded
		// sample does in Go.
		scaled := func(col string) float64 { return math.Round(float64(row.Int(col)) * scale) }
		b := diagnose.Bucket{
			Start: row.Time("bucket"), Requests: int(scaled("n")), RatePerSec: float64(row.Int("n")) * scale / width.Seconds(),
			InputTokens: int64(scaled("input_tokens")), OutputTokens: int64(scaled("output_tokens")),
			ColdStarts: int(scaled("cold")), Errors: int(scaled("errors")),
			P95: map[string]float64{},
		}
		for _, c := range diagnose.Components {
			qs := row.Floats("q_" + c)
			if len(qs) != 3 {
				return nil, false, fmt.Errorf("series: %d quantiles of %s, want 3", len(qs), c)
			}
			if !math.IsNaN(qs[1]) {
				b.P95[c] = qs[1]
			}
			switch c {
			case diagnose.ComponentTTFT:
				b.TTFT = diagnose.PercentilesOf(qs[0], qs[1], qs[2])
			case diagnose.ComponentITL:
				b.ITL = diagnose.PercentilesOf(qs[0], qs[1], qs[2])
			}
		}
		out = append(out, b)
	}
	return out, scale == 1, nil
}
