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
// series comes from the loaded sample: the engine's stored sample would
// give sharper buckets, but measured at 1M rows it made a 7-day diagnosis
// ~50 % slower (bench query), more than sharper buckets of a
// week are worth.
const SeriesExactMax = 300_000

// seriesSelect computes one row per bucket: the figures diagnose.series
// derives from rows, with the same definitions (type-7 quantiles over the
// known values; counts and token sums).
var seriesSelect = func() string {
	var b strings.Builder
	b.WriteString("SELECT toStartOfInterval(start, toIntervalSecond(?)) AS bucket, count() AS n, ")
	for _, c := range diagnose.Components {
		fmt.Fprintf(&b, "quantilesExactInclusiveIf(%[2]s)(%[1]s_ms, isFinite(%[1]s_ms)) AS q_%[1]s, ", c, strings.Join(seriesLevels(c), ", "))
	}
	b.WriteString("sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, countIf(cold_start = 1) AS cold, countIf(error = 1) AS errors FROM ")
	return b.String()
}()

// seriesSQL is the statement computing the series of the requests matching
// where, over every one of them.
func seriesSQL(where string, args []any, width time.Duration) (sql string, sqlArgs []any) {
	return seriesSelect + "llm_requests FINAL WHERE " + where + " GROUP BY bucket ORDER BY bucket" + FinalSettings,
		append([]any{max(int64(width/time.Second), 1)}, args...)
}

// requestBuckets computes the request figures of every width-wide bucket
// of a window (where, args) in the engine, over every request: see
// diagnose.Input.RequestBuckets and seriesSQL.
func (q *Queries) requestBuckets(ctx context.Context, where string, args []any, width time.Duration) ([]diagnose.Bucket, error) {
	sql, sqlArgs := seriesSQL(where, args, width)
	r, err := q.CH.Query(ctx, sql, sqlArgs...)
	if err != nil {
		return nil, fmt.Errorf("series: %w", err)
	}
	// Empty, not nil: computed, with no request in any bucket.
	out := make([]diagnose.Bucket, 0, r.Len())
	for i := range r.Len() {
		row := r.Row(i)
		levels := map[string][]float64{}
		for _, c := range diagnose.Components {
			qs := row.Floats("q_" + c)
			if want := len(seriesLevels(c)); len(qs) != want {
				return nil, fmt.Errorf("series: %d quantiles of %s, want %d", len(qs), c, want)
			}
			if len(qs) == 1 { // p95 alone
				qs = []float64{math.NaN(), qs[0], math.NaN()}
			}
			levels[c] = qs
		}
		out = append(out, newBucket(row.Time("bucket"), row.Int("n"), width, row.Int("input_tokens"), row.Int("output_tokens"),
			row.Int("cold"), row.Int("errors"), func(c string) []float64 { return levels[c] }))
	}
	return out, nil
}

// newBucket is a chart bucket of n requests of a series of the given
// width; levels gives each component's p50, p95 and p99 (NaN where not
// computed, or with no value).
func newBucket(start time.Time, n int64, width time.Duration, inTokens, outTokens, cold, errors int64, levels func(component string) []float64) diagnose.Bucket {
	b := diagnose.Bucket{
		Start: start, Requests: int(n), RatePerSec: float64(n) / width.Seconds(),
		InputTokens: inTokens, OutputTokens: outTokens, ColdStarts: int(cold), Errors: int(errors),
		P95: map[string]float64{},
	}
	for _, c := range diagnose.Components {
		qs := levels(c)
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
	return b
}

// seriesLevels are the quantiles a bucket keeps of a component: p50, p95
// and p99 of TTFT and ITL, p95 alone of the others (a fifth less work for
// the whole statement than three levels of each).
func seriesLevels(c string) []string {
	if c == diagnose.ComponentTTFT || c == diagnose.ComponentITL {
		return []string{"0.5", "0.95", "0.99"}
	}
	return []string{"0.95"}
}
