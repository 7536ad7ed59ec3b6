package analysis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// topPageMax bounds offset+limit of a sorted page read by topRequests: it
// reads every version of 1.2–2×(offset+limit) requests, a granule of every
// column each, so past a few hundred it reads as much as sorting under
// FINAL.
const topPageMax = 500

// topMinWindow is the shortest window whose sorted pages topRequests
// reads. Its cost is mostly fixed (a granule per top row, ~150 ms at 10M
// rows) where FINAL's grows with the window (an hour at 10M: ~40 ms; a
// day: ~2× topRequests).
const topMinWindow = 2 * time.Hour

// topListWindow reports whether a sorted page of a window this long is
// read by topRequests rather than sorted under FINAL.
func topListWindow(d time.Duration) bool { return d > topMinWindow }

// requestKey is an llm_requests sorting key within a project: every
// version of a request has the same one.
type requestKey struct {
	service     string
	start       int64 // Unix nanoseconds
	trace, span string
}

// topRequests reads a page sorted by col (not start) without sorting the
// window under FINAL; found is false when it cannot prove the page.
//
// Why it is exact: FINAL keeps a request's highest version (none if that
// is a tombstone) and filters it, and that version is one of the stored
// rows. Let c be the K-th stored row passing the filter in the page's
// order (col dir NULLS LAST, start DESC), read without FINAL. Every
// request whose final row ranks strictly above c has that row among the
// first K, so its (service, start) is among theirs; and all its versions
// share those. Reading every row with one of those keys therefore shows each
// such request's final row, and the final rows strictly above c that pass
// the filter are exactly the requests FINAL ranks above c, in its order.
// If they number offset+limit or more they hold the page. Otherwise
// (later versions moved rows down or deleted them, or NULLs, which sort
// last, reach c) it tries a larger K, then the caller falls back to FINAL.
//
// Slowest first by TTFT or E2E, it reads the rows from llm_request_top
// first (topFromStates), where they lie together.
func (q *Queries) topRequests(ctx context.Context, project uint32, from, to time.Time, where string, args []any, col string, desc bool, offset, limit int) ([]telemetry.LLMRequest, bool, error) {
	if page, found, err := q.topFromStates(ctx, project, from, to, where, args, col, desc, offset, limit); found || err != nil {
		return page, found, err
	}
	// Every top row costs a granule read of every column (~3 ms of CPU
	// at 10M rows), so the first try leaves room for a few stale
	// versions and tombstones only; where more of them crowd the top, a
	// second try reads twice the page before the caller falls back to
	// FINAL (seconds over a week).
	n := offset + limit
	for _, k := range []int{topFirstK(n), max(2*n, 100)} {
		bound, err := q.topBound(ctx, where, args, col, desc, k)
		if err != nil {
			return nil, false, err
		}
		page, found, err := q.topPage(ctx, project, where, args, col, desc, offset, limit, k, bound)
		if errors.Is(err, errFewTop) {
			return nil, false, nil // a small window, cheap under FINAL
		}
		if found || err != nil {
			return page, found, err
		}
	}
	return nil, false, nil
}

// errFewTop says the window holds fewer than the top rows asked for: no
// larger try can prove a page.
var errFewTop = errors.New("fewer rows than the top rows asked for")

// topFirstK is how many top rows topRequests reads first for a page
// ending at row n.
func topFirstK(n int) int { return n + max(10, n/5) }

// topPage is topRequests once the bound (nil for none) is chosen.
func (q *Queries) topPage(ctx context.Context, project uint32, where string, args []any, col string, desc bool, offset, limit, k int, bound *float64) ([]telemetry.LLMRequest, bool, error) {
	kr, err := q.CH.Query(ctx, topKeysSQL(where, col, desc, bound != nil), topKeysArgs(args, k, bound)...)
	if err != nil {
		return nil, false, fmt.Errorf("list top requests: %w", err)
	}
	keys := make([]topKey, kr.Len())
	for i := range keys {
		keys[i] = topKey{Service: kr.Row(i).String("service"), Start: kr.Row(i).Time("start")}
	}
	if len(keys) < k {
		if bound != nil {
			// The sample overestimated the bound: fewer than k rows reach
			// it. Read the window's top rows without one.
			return q.topPage(ctx, project, where, args, col, desc, offset, limit, k, nil)
		}
		return nil, false, errFewTop
	}
	r, err := q.CH.Query(ctx, topRequestsSQL(where, len(keys)), topRequestsArgs(project, args, keys)...)
	if err != nil {
		return nil, false, fmt.Errorf("list top requests: %w", err)
	}
	stored := scanTopRows(r)
	before := topBefore(col, desc)
	var passing []*telemetry.LLMRequest // every stored row passing the filter, the top K among them
	for i := range stored {
		if stored[i].passes {
			passing = append(passing, &stored[i].row)
		}
	}
	if len(passing) < k {
		return nil, false, nil // rows gone since the keys were read
	}
	sort.Slice(passing, func(i, j int) bool { return before(passing[i], passing[j]) })
	page, found := topFinalPage(stored, before, passing[k-1], col, offset, limit)
	return page, found, nil
}

// topRow is a stored (or, in llm_request_top, once stored) row of
// llm_requests as the sorted-page reads see it: passes is the page's filter
// applied to it.
type topRow struct {
	row             telemetry.LLMRequest
	version         uint64
	deleted, passes bool
}

// scanTopRows reads rows selected with RequestColumns, version, is_deleted
// and passes.
func scanTopRows(r *clickhouse.Result) []topRow {
	out := make([]topRow, r.Len())
	for i, row := range clickhouse.ScanRequests(r) {
		w := r.Row(i)
		out[i] = topRow{row: row, version: uint64(w.Int("version")), deleted: w.Bool("is_deleted"), passes: w.Bool("passes")}
	}
	return out
}

// topBefore is the page's order: col dir NULLS LAST, start DESC.
func topBefore(col string, desc bool) func(a, b *telemetry.LLMRequest) bool {
	return func(a, b *telemetry.LLMRequest) bool {
		va, vb := requestValue(a, col), requestValue(b, col)
		switch {
		case va == nil || vb == nil:
			if (va == nil) != (vb == nil) {
				return vb == nil
			}
		case *va != *vb:
			return *va > *vb == desc
		}
		return a.Start.After(b.Start)
	}
}

// topFinalPage is the page FINAL lists, from every stored row of some
// requests: the final rows (per request the highest version, none when that
// is a tombstone) that pass the filter and rank strictly above c, provided
// every request whose final row does so is among them (see topRequests).
// found is false when they are fewer than offset+limit, when NULLs reach c,
// or when FINAL's pick is unknown (two different rows of a request with
// the same version).
func topFinalPage(stored []topRow, before func(a, b *telemetry.LLMRequest) bool, c *telemetry.LLMRequest, col string, offset, limit int) ([]telemetry.LLMRequest, bool) {
	if requestValue(c, col) == nil {
		return nil, false // NULLs within reach
	}
	type version struct {
		topRow
		ambiguous bool // another row has the same version and differs: FINAL's pick is unknown
	}
	finals := make(map[requestKey]version, len(stored))
	for _, this := range stored {
		key := requestKey{this.row.Service, this.row.Start.UnixNano(), this.row.TraceID, this.row.SpanID}
		switch f, seen := finals[key]; {
		case !seen || this.version > f.version:
			finals[key] = version{topRow: this}
		case this.version == f.version && (this.deleted != f.deleted || !reflect.DeepEqual(this.row, f.row)):
			f.ambiguous = true
			finals[key] = f
		}
	}
	var page []telemetry.LLMRequest
	for _, f := range finals {
		switch {
		case f.ambiguous:
			return nil, false
		case f.deleted || !f.passes || !before(&f.row, c):
		default:
			page = append(page, f.row)
		}
	}
	if len(page) < offset+limit {
		return nil, false
	}
	sort.Slice(page, func(i, j int) bool { return before(&page[i], &page[j]) })
	return page[offset : offset+limit], true
}

// topBoundAhead is how many stored rows, on average, reach the bound
// topBound guesses, per row topRequests needs. The count is about
// Gamma(j, 256) for the j-th sampled row; with j ≥ 3 it falls short of k
// (and topRequests reads again without a bound) less than once in 100.
// Rows past the bound are nearly free where a projection orders the
// column, and cost a granule each where a minmax index skips by it.
const topBoundAhead = 3

// topBound guesses a value of col that at least k stored rows of the
// window reach in the page's order (at least it for DESC, at most for
// ASC). With it the engine reads the top rows from the column's
// projection as a key range, or skips by its minmax index the granules
// holding none (migration 0010). The guess is the j-th row of the stored
// sample's first level (1/256 of the requests, a few ms to read where the
// window's column costs ~350 ms), j chosen so that about topBoundAhead × k
// rows reach it. nil when that level holds fewer than j rows of the
// window: a window that small reads cheaply without a bound.
func (q *Queries) topBound(ctx context.Context, where string, args []any, col string, desc bool, k int) (*float64, error) {
	r, err := q.CH.Query(ctx, topBoundSQL(where, col, desc), append(slices.Clone(args), topBoundOffset(k))...)
	if err != nil {
		return nil, fmt.Errorf("list top requests: bound: %w", err)
	}
	if r.Len() == 0 {
		return nil, nil
	}
	return r.Row(0).FloatPtr("bound"), nil
}

// topBoundOffset is the offset (j-1) of topBound's row for k top rows.
func topBoundOffset(k int) int {
	return max(3, (topBoundAhead*k*sampleLevel0Keep+SampleBuckets-1)/SampleBuckets) - 1
}

// topBoundSQL reads the j-th (OFFSET j-1, its one argument after the
// where clause's) value of col in the page's order from the stored
// sample's first level, without FINAL: only a guess, which topRequests
// checks. NULLs sort last and never bound.
func topBoundSQL(where, col string, desc bool) string {
	return "SELECT toFloat64(" + col + ") AS bound FROM llm_requests_sample WHERE " + where + " AND sample_level = 0 AND " + col +
		" IS NOT NULL ORDER BY " + col + " " + direction(desc) + " LIMIT 1 OFFSET ?"
}

// topKey is what topKeysSQL reads of a top row: a prefix of its sorting
// key, which every version of its request shares.
type topKey struct {
	Service string
	Start   time.Time
}

// topRequestsSQL reads, without FINAL, every stored row (all versions,
// tombstones too) of the requests with the n given keys (topKeysSQL's):
// the rows topRequests decides a sorted page from. passes is the filter
// applied to each row. Its arguments are topRequestsArgs.
//
// The keys come as literals, not a subquery: a set of keys prunes to a
// granule or two a request, and without projections (which hold service
// and start too) the engine does not weigh reading them instead, an
// index analysis that cost more than the read (7 days at 10M: ~200 → ~50
// ms of CPU).
func topRequestsSQL(where string, n int) string {
	return "SELECT " + clickhouse.RequestColumns + ", version, is_deleted, (" + where + ") AS passes FROM llm_requests" +
		" WHERE project_id = ? AND (service, start) IN (" + strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ") + ")" +
		" SETTINGS optimize_use_projections = 0"
}

// topRequestsArgs are the arguments of topRequestsSQL.
func topRequestsArgs(project uint32, whereArgs []any, keys []topKey) []any {
	out := append(slices.Clone(whereArgs), project)
	for _, k := range keys {
		out = append(out, k.Service, k.Start)
	}
	return out
}

// topKeysSQL reads the service and start (topKey: what the TTFT and E2E
// projections hold of the sorting key) of the top k rows of a filtered
// window by col. bounded restricts them to rows reaching a bound
// (topBound), which lets the engine read the column's projection as a key
// range or skip granules by its minmax index; the top k are the same as
// long as k rows reach it. Its arguments are topKeysArgs.
func topKeysSQL(where, col string, desc, bounded bool) string {
	if bounded {
		cmp := " <= ?"
		if desc {
			cmp = " >= ?"
		}
		where += " AND " + col + cmp
	}
	return "SELECT service, start FROM llm_requests WHERE " + where +
		" ORDER BY " + col + " " + direction(desc) + " NULLS LAST, start DESC LIMIT ?"
}

// topKeysArgs are the arguments of topKeysSQL; bound is nil when it is
// not bounded.
func topKeysArgs(whereArgs []any, k int, bound *float64) []any {
	out := slices.Clone(whereArgs)
	if bound != nil {
		out = append(out, *bound)
	}
	return append(out, k)
}

func direction(desc bool) string {
	if desc {
		return "DESC"
	}
	return "ASC"
}

// requestValue is a request's value of a SortColumns column other than
// start, as the engine sorts it.
func requestValue(r *telemetry.LLMRequest, col string) *float64 {
	switch col {
	case "ttft_ms":
		return r.TTFT
	case "e2e_ms":
		return r.E2E
	case "queue_ms":
		return r.Queue
	case "prefill_ms":
		return r.Prefill
	case "network_ms":
		return r.Network
	case "decode_ms":
		return r.Decode
	case "pre_inference_ms":
		return r.PreInference
	case "itl_ms":
		return r.ITL
	case "cold_start_wait_ms":
		return r.ColdStartWait
	case "input_tokens", "output_tokens":
		n := r.InputTokens
		if col == "output_tokens" {
			n = r.OutputTokens
		}
		if n == nil {
			return nil
		}
		f := float64(*n)
		return &f
	}
	panic("analysis: no request value for sort column " + col)
}
