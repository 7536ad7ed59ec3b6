package analysis

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// FinalSettings go with every FINAL read of llm_requests: a request's
// versions share its start, so they always sit in the same day partition
// and FINAL may merge each partition on its own (in parallel, and not at
// all for a partition with one part).
const FinalSettings = " SETTINGS do_not_merge_across_partitions_select_final = 1"

// estimateMaxError is the largest relative standard error of a window's
// size scaled up from a hash sample of llm_requests; a sample that would
// miss by more has its window counted under FINAL instead (a second read
// of the window, ~15 ms of engine time for 3 hours at 1M requests).
const estimateMaxError = 0.01

// estimateError is the relative standard error of n sampled rows scaled up
// to their window, each row kept with probability keep/SampleBuckets.
func estimateError(n, keep int) float64 {
	p := float64(keep) / SampleBuckets
	return math.Sqrt((1 - p) / float64(max(n, 1)))
}

// countWhere is the exact number of requests matching a where clause.
func (q *Queries) countWhere(ctx context.Context, where string, args []any) (int, error) {
	r, err := q.CH.Query(ctx, countPlan{table: "llm_requests", scale: 1}.countSQL(where), args...)
	if err != nil {
		return 0, fmt.Errorf("count requests: %w", err)
	}
	return int(r.Row(0).Int("n")), nil
}

// roughCount is the number of stored rows matching a where clause without
// FINAL: versions not merged yet count twice, so it overcounts a little.
// Cheap (no merging), it sizes the reads that follow.
func (q *Queries) roughCount(ctx context.Context, where string, args []any) (int, error) {
	r, err := q.CH.Query(ctx, "SELECT count() AS n FROM llm_requests WHERE "+where, args...)
	if err != nil {
		return 0, fmt.Errorf("count requests: %w", err)
	}
	return int(r.Row(0).Int("n")), nil
}

// roughCounts is roughCount of a filter's project, service and model over
// each of several windows, in one statement (a diagnosis sizes its window
// and baseline, a comparison its two windows, before reading either).
func (q *Queries) roughCounts(ctx context.Context, f RequestFilter, ranges ...diagnose.Range) ([]int, error) {
	scope, args := f.scope()
	var counts, within []string
	var countArgs, withinArgs []any
	for i, r := range ranges {
		counts, countArgs = append(counts, fmt.Sprintf("countIf(start >= ? AND start < ?) AS n%d", i)), append(countArgs, r.From, r.To)
		within, withinArgs = append(within, "start >= ? AND start < ?"), append(withinArgs, r.From, r.To)
	}
	res, err := q.CH.Query(ctx, "SELECT "+strings.Join(counts, ", ")+" FROM llm_requests WHERE "+scope+" AND ("+strings.Join(within, " OR ")+")",
		append(append(countArgs, args...), withinArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("count requests: %w", err)
	}
	out := make([]int, len(ranges))
	for i := range out {
		out[i] = int(res.Row(0).Int(fmt.Sprintf("n%d", i)))
	}
	return out, nil
}

// namesRoughMin is the shortest window whose list total is planned from
// the hourly name counts: its partial first and last hours overcount by a
// sixth at most.
const namesRoughMin = 12 * time.Hour

// listRoughCount is roughCount for a list's total (where, args is f's
// condition): a window of namesRoughMin or more filtered by what
// llm_request_names holds sums its hourly counts (row versions included,
// like roughCount) instead of counting llm_requests, whose start column the
// window's first and last day partitions are read for (7 days at 10M
// requests: ~24 ms, a quarter of a sorted page).
func (q *Queries) listRoughCount(ctx context.Context, f RequestFilter, where string, args []any) (int, error) {
	if f.From.IsZero() || f.To.Sub(f.From) < namesRoughMin || !f.byNames() {
		return q.roughCount(ctx, where, args)
	}
	nwhere, nargs := f.scope()
	r, err := q.CH.Query(ctx, "SELECT sum(rows) AS n FROM llm_request_names WHERE "+nwhere+" AND hour >= toStartOfHour(?) AND hour < ?",
		append(nargs, f.From, f.To)...)
	if err != nil {
		return 0, fmt.Errorf("count requests: %w", err)
	}
	return int(r.Row(0).Int("n")), nil
}

// exactCountMax is the most stored rows a list counts exactly. Counting
// under FINAL costs ~220 ms of CPU per million rows of a week (it merges
// every version; 1M rows over 7 days), more than the rest of the page;
// beyond, the stored sample's count scaled up is within about one percent
// (≥ 15k sampled rows) for a tenth of the cost.
const exactCountMax = 250_000

// countPlan says where a count over rough stored rows reads, and how much
// each row it counts stands for.
type countPlan struct {
	table, where string
	scale        float64
}

// planCount reads the stored samples above exactMax rows: the sparsest
// that still holds a sixteenth of exactMax rows (≥ 15k at the default,
// within ~1 %). The 1/16 sample up to 4× exactMax, the 1/64 one up to 16×,
// then the first level (1/256): 7 days at 10M read 27 ms where the 1/16
// sample took 64.
func planCount(rough, exactMax int) countPlan {
	switch {
	case rough <= exactMax:
		return countPlan{table: "llm_requests", scale: 1}
	case rough < exactMax*sampleTableKeep/sample64Keep:
		return countPlan{table: "llm_requests_sample", scale: SampleBuckets / sampleTableKeep}
	case rough < exactMax*sampleTableKeep/sampleLevel0Keep:
		return countPlan{table: "llm_requests_sample64", scale: SampleBuckets / sample64Keep}
	}
	return countPlan{table: "llm_requests_sample", where: " AND sample_level = 0", scale: SampleBuckets / sampleLevel0Keep}
}

func (p countPlan) countSQL(where string) string {
	return "SELECT count() AS n FROM " + p.table + " FINAL WHERE " + where + p.where + FinalSettings
}

// count is the number of requests matching a where clause: exact up to
// exactCountMax stored rows, else estimated from the stored sample.
func (q *Queries) count(ctx context.Context, f RequestFilter, where string, args []any) (Count, error) {
	rough, err := q.listRoughCount(ctx, f, where, args)
	if err != nil {
		return Count{}, err
	}
	p := planCount(rough, q.exactCountMax())
	r, err := q.CH.Query(ctx, p.countSQL(where), args...)
	if err != nil {
		return Count{}, fmt.Errorf("count requests: %w", err)
	}
	n := int(r.Row(0).Int("n"))
	if p.scale == 1 {
		return Count{N: n}, nil
	}
	return Count{N: int(math.Round(float64(n) * p.scale)), Estimated: true}, nil
}
