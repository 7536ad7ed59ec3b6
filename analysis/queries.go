package analysis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Queries reads what pages and the API show. Every query is scoped to one
// project and parameterized.
type Queries struct {
	CH *clickhouse.Store
	// MaxRows bounds how many requests one diagnosis loads per window.
	MaxRows int
	// OverviewExactRows and OverviewSampleMin override the overview's
	// sampling thresholds (tests lower them); zero takes the defaults.
	OverviewExactRows, OverviewSampleMin int
	// ExactCountRows and SeriesExactRows override exactCountMax and
	// SeriesExactMax (tests lower them).
	ExactCountRows, SeriesExactRows int
}

// MaxWindow is the longest window a query may ask for.
const MaxWindow = 31 * 24 * time.Hour

// RequestFilter selects llm_requests rows.
type RequestFilter struct {
	Project   uint32
	From, To  time.Time
	Service   string // calling service or inference service
	Model     string
	Instance  string
	TraceID   string
	ColdStart bool // only cold starts
	Slow      bool // only requests above the TTFT p90 of the window's requests of Service and Model
	Sort      string
	Desc      bool
	Limit     int
	Offset    int
	// NoTotal skips counting every match (the count is returned as -1):
	// a "slowest requests" panel does not page.
	NoTotal bool
	// Tenant, Route and PromptLength (a diagnose.PromptLengths label) are
	// what bubble-up ranks beside instance and model: a diagnosis links
	// each value it names to its requests.
	Tenant, Route, PromptLength string
}

// SortColumns are the columns requests can be sorted by.
var SortColumns = map[string]string{
	"start": "start", "ttft": "ttft_ms", "e2e": "e2e_ms", "queue": "queue_ms", "prefill": "prefill_ms",
	"network": "network_ms", "decode": "decode_ms", "pre_inference": "pre_inference_ms", "itl": "itl_ms",
	"input_tokens": "input_tokens", "output_tokens": "output_tokens",
}

func (f RequestFilter) where() (string, []any) {
	conds := []string{"project_id = ?"}
	args := []any{f.Project}
	add := func(cond string, arg ...any) {
		conds, args = append(conds, cond), append(args, arg...)
	}
	if !f.From.IsZero() {
		add("start >= ?", f.From)
	}
	if !f.To.IsZero() {
		add("start < ?", f.To)
	}
	if f.Service != "" {
		add("(service = ? OR server_service = ?)", f.Service, f.Service)
	}
	for _, eq := range []struct{ col, v string }{
		{"model", f.Model}, {"instance", f.Instance}, {"trace_id", f.TraceID}, {"tenant", f.Tenant}, {"route", f.Route},
	} {
		if eq.v != "" {
			add(eq.col+" = ?", eq.v)
		}
	}
	if f.ColdStart {
		add("cold_start = 1")
	}
	if b, ok := diagnose.PromptLengthNamed(f.PromptLength); ok {
		// As diagnose buckets them: the first bucket has no lower bound.
		if b.From > 0 {
			add("input_tokens >= ?", b.From)
		}
		if b.To > 0 {
			add("input_tokens < ?", b.To)
		}
	}
	return strings.Join(conds, " AND "), args
}

// byNames reports whether the hourly name counts (llm_request_names) hold
// f's matches: they keep project, service, model and instance only.
func (f RequestFilter) byNames() bool {
	return f.TraceID == "" && !f.ColdStart && !f.Slow && f.Tenant == "" && f.Route == "" && f.PromptLength == ""
}

// scope is the filter's condition without its window: what the tables
// kept per hour or bucket (llm_request_names, the rollups) hold of it too,
// for filters by project, service, model and instance.
func (f RequestFilter) scope() (string, []any) {
	f.From, f.To = time.Time{}, time.Time{}
	return f.where()
}

// Count is how many requests match a filter: counted, or estimated from the
// stored sample when the window is too big to count under FINAL at a
// page's pace.
type Count struct {
	N         int // -1 when not asked for
	Estimated bool
}

// Requests lists requests, newest first unless sorted otherwise, and the
// total count matching the filter (for pagination).
func (q *Queries) Requests(ctx context.Context, f RequestFilter) ([]telemetry.LLMRequest, Count, error) {
	where, args := f.where()
	if f.Slow {
		// Slow is judged against the window's requests of the service and
		// model, as a diagnosis judges them, whatever else filters the
		// list: the slow requests of one instance or tenant are those
		// above the window's p90, not above its own. The p90 of a big
		// window is read from the stored sample (as its total is
		// counted): a sixteenth of the reading or less, and p90 of
		// thousands of rows is as good a line between slow and the rest.
		lwhere, largs := RequestFilter{Project: f.Project, From: f.From, To: f.To, Service: f.Service, Model: f.Model}.where()
		rough, err := q.roughCount(ctx, lwhere, largs)
		if err != nil {
			return nil, Count{}, err
		}
		c := planCount(rough, q.exactCountMax())
		p90, err := q.CH.Query(ctx, "SELECT quantile(0.9)(coalesce(ttft_ms, e2e_ms)) AS p FROM "+c.table+" FINAL WHERE "+lwhere+c.where+FinalSettings, largs...)
		if err != nil {
			return nil, Count{}, fmt.Errorf("slow threshold: %w", err)
		}
		if p := p90.Row(0).FloatPtr("p"); p != nil {
			where += " AND coalesce(ttft_ms, e2e_ms) > ?"
			args = append(args, *p)
		}
	}
	col, ok := SortColumns[f.Sort]
	if !ok {
		col, f.Desc = "start", true
	}
	dir := direction(f.Desc)
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 100
	}
	page := func(where string, args []any) (*clickhouse.Result, error) {
		r, err := q.CH.Query(ctx, "SELECT "+clickhouse.RequestColumns+" FROM llm_requests FINAL WHERE "+where+
			" ORDER BY "+col+" "+dir+" NULLS LAST, start DESC LIMIT ? OFFSET ?"+FinalSettings, append(args, f.Limit, f.Offset)...)
		if err != nil {
			return nil, fmt.Errorf("list requests: %w", err)
		}
		return r, nil
	}
	// The total is counted while the page is read.
	total := Count{N: -1}
	var counting errgroup.Group
	if !f.NoTotal {
		where, args := where, slices.Clone(args)
		counting.Go(func() (err error) {
			total, err = q.count(ctx, f, where, args)
			return err
		})
	}
	var reqs []telemetry.LLMRequest
	found := false
	var err error
	switch {
	// Newest first (the list as it opens): only the window's newest rows.
	case col == "start" && f.Desc && !f.From.IsZero() && !f.To.IsZero():
		if reqs, found, err = q.newestPage(ctx, f, where, args, page); err != nil {
			return nil, Count{}, err
		}
	// Slowest (or fastest) first over a long window: the top rows read
	// without FINAL prove the page unless later versions moved too many of
	// them (see topRequests).
	case col != "start" && f.Offset >= 0 && f.Offset+f.Limit <= topPageMax &&
		(f.From.IsZero() || f.To.IsZero() || TopListWindow(f.To.Sub(f.From))):
		if reqs, found, err = q.topRequests(ctx, f.Project, f.From, f.To, where, args, col, f.Desc, f.Offset, f.Limit); err != nil {
			return nil, Count{}, err
		}
	}
	if !found {
		r, err := page(where, args)
		if err != nil {
			return nil, Count{}, err
		}
		reqs = clickhouse.ScanRequests(r)
	}
	if err := counting.Wait(); err != nil {
		return nil, Count{}, err
	}
	if total.Estimated {
		// Never fewer than the rows already listed (a sparse filter's
		// sample may hold none of them).
		total.N = max(total.N, max(f.Offset, 0)+len(reqs))
	}
	return reqs, total, nil
}

// newestPage reads a newest-first page from the window's newest rows
// only. Sorting a whole window under FINAL costs what the window holds:
// a 15-minute window of a busy incident (3M requests) took ~300 ms for 50
// rows. The window's rows and newest start, read without FINAL (44–62 ms
// for that window, beside the list's total counted at the same time), size
// a span that should hold newestSpare times the rows up to the page's
// end; a page that fills from it is exact, since every row left out is
// older than every row in it. The span grows newestGrowth-fold while the
// page comes up short (versions replaced, deleted rows, traffic that
// fell off); found is false when no span short of the window fills it.
func (q *Queries) newestPage(ctx context.Context, f RequestFilter, where string, args []any,
	page func(string, []any) (*clickhouse.Result, error)) (reqs []telemetry.LLMRequest, found bool, err error) {
	r, err := q.CH.Query(ctx, "SELECT count() AS n, max(start) AS last FROM llm_requests WHERE "+where, args...)
	if err != nil {
		return nil, false, fmt.Errorf("size the newest requests: %w", err)
	}
	n, last := r.Row(0).Int("n"), r.Row(0).Time("last")
	want := newestSpare * (max(f.Offset, 0) + f.Limit)
	if n <= int64(want) {
		return nil, false, nil // the window is as small as the span would be
	}
	span := max(time.Duration(float64(f.To.Sub(f.From))*float64(want)/float64(n)), newestMinSpan)
	for from := last.Add(-span); from.After(f.From); from = last.Add(-span) {
		r, err := page(where+" AND start >= ?", append(slices.Clone(args), from))
		if err != nil {
			return nil, false, err
		}
		if r.Len() == f.Limit {
			return clickhouse.ScanRequests(r), true, nil
		}
		span *= newestGrowth
	}
	return nil, false, nil
}

// The first span of a newest-first page holds about newestSpare times the
// rows up to the page's end, at least newestMinSpan (rows are counted by
// the window, not by the second); each retry widens it newestGrowth-fold.
const (
	newestSpare   = 4
	newestMinSpan = time.Second
	newestGrowth  = 8
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

// TopListWindow reports whether a sorted page of a window this long is
// read by topRequests rather than sorted under FINAL.
func TopListWindow(d time.Duration) bool { return d > topMinWindow }

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
	for _, k := range []int{TopFirstK(n), max(2*n, 100)} {
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

// TopFirstK is how many top rows topRequests reads first for a page
// ending at row n.
func TopFirstK(n int) int { return n + max(10, n/5) }

// topPage is topRequests once the bound (nil for none) is chosen.
func (q *Queries) topPage(ctx context.Context, project uint32, where string, args []any, col string, desc bool, offset, limit, k int, bound *float64) ([]telemetry.LLMRequest, bool, error) {
	kr, err := q.CH.Query(ctx, TopKeysSQL(where, col, desc, bound != nil), TopKeysArgs(args, k, bound)...)
	if err != nil {
		return nil, false, fmt.Errorf("list top requests: %w", err)
	}
	keys := make([]TopKey, kr.Len())
	for i := range keys {
		keys[i] = TopKey{Service: kr.Row(i).String("service"), Start: kr.Row(i).Time("start")}
	}
	if len(keys) < k {
		if bound != nil {
			// The sample overestimated the bound: fewer than k rows reach
			// it. Read the window's top rows without one.
			return q.topPage(ctx, project, where, args, col, desc, offset, limit, k, nil)
		}
		return nil, false, errFewTop
	}
	r, err := q.CH.Query(ctx, TopRequestsSQL(where, len(keys)), TopRequestsArgs(project, args, keys)...)
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

// TopStateLen is how many rows of each 6 hours (TopStateSpan)
// llm_request_top keeps per sort column (migration 0012): the first of
// them in the page's order.
const (
	TopStateLen  = 128
	TopStateSpan = 6 * time.Hour
)

// topStates maps the sort columns llm_request_top keeps the slowest rows of
// (descending only) to their state columns.
var topStates = map[string]string{"ttft_ms": "ttft", "e2e_ms": "e2e"}

// topStatesMinWindow is the shortest window read from llm_request_top: its
// first and last 6 hours hold rows outside it, which in a shorter one
// crowd the window's own out of the states too often.
const topStatesMinWindow = 2 * TopStateSpan

// TopStatesWindow reports whether topRequests reads the first k rows of a
// window sorted by col (descending when desc) from llm_request_top. (Its
// states outlive the rows they hold under the same retention, so a window
// within retention is whole in them; rows past retention the TTL has not
// removed yet may be missing.)
func TopStatesWindow(col string, desc bool, k int, from, to time.Time) bool {
	_, ok := topStates[col]
	return ok && desc && k < TopStateLen && !from.IsZero() && to.Sub(from) >= topStatesMinWindow
}

// topFromStates is topRequests read from llm_request_top: the first rows
// of each 6 hours of the window in the page's order, every row ever stored
// (versions since merged away and tombstones too), instead of k rows
// scattered through llm_requests. found is false when they cannot prove
// the page; topRequests then reads llm_requests.
//
// Like topRequests it tries k = TopFirstK rows first, and twice the page
// where stale versions crowded the first try out of a page.
//
// Why it is exact: let c be the k-th row of theirs that passes the filter,
// is not a tombstone and is not replaced by a higher version of its
// request among them. A row left out ranks at or below the last row of
// its 6 hours' state (a cut) or the row after those read (another), so
// when c ranks strictly above every cut, every row ever stored that
// passes and ranks strictly above c is among them; so is therefore every
// final row (FINAL's) that does, and its request's
// (service, start) is among those of the first k. The versions stored now
// under those keys (TopVersionsSQL, without identity: a request is
// (service, start, trace_id, span_id)) say which of the rows read are the
// final ones. A key whose stored versions each match exactly one row read,
// all of one request, is settled; the others are read from llm_requests
// (TopRequestsSQL). A request whose final row is not among the rows read
// does not pass or ranks at or below c, so it is not on the page.
func (q *Queries) topFromStates(ctx context.Context, project uint32, from, to time.Time, where string, args []any, col string, desc bool, offset, limit int) ([]telemetry.LLMRequest, bool, error) {
	n := offset + limit
	for _, k := range []int{TopFirstK(n), max(2*n, 100)} {
		if !TopStatesWindow(col, desc, k, from, to) {
			break
		}
		page, found, more, err := q.topStatesPage(ctx, project, from, to, where, args, col, desc, offset, limit, k)
		if found || err != nil || !more {
			return page, found, err
		}
	}
	return nil, false, nil
}

// topStatesPage is topFromStates with k rows; more is whether more rows
// might prove the page (its rows were not crowded out by the cut).
func (q *Queries) topStatesPage(ctx context.Context, project uint32, from, to time.Time, where string, args []any, col string, desc bool, offset, limit, k int) (page []telemetry.LLMRequest, found, more bool, err error) {
	r, err := q.CH.Query(ctx, TopStatesSQL(where, topStates[col], k), TopStatesArgs(project, args, from, to)...)
	if err != nil {
		return nil, false, false, fmt.Errorf("list top requests: %w", err)
	}
	rows, c, keys := topStatesCandidates(r, col, k)
	if keys == nil {
		return nil, false, false, nil
	}
	before := topBefore(col, desc)
	seen := map[topGroup]bool{}
	for _, key := range keys {
		seen[topGroup{key.Service, key.Start.UnixNano()}] = true
	}
	vr, err := q.CH.Query(ctx, TopVersionsSQL(len(keys)), TopVersionsArgs(project, keys)...)
	if err != nil {
		return nil, false, false, fmt.Errorf("list top requests: versions: %w", err)
	}
	type versionKey struct {
		version uint64
		deleted bool
	}
	storedVersions := map[topGroup]map[versionKey]int{}
	for i := range vr.Len() {
		w := vr.Row(i)
		g := topGroup{w.String("service"), w.Time("start").UnixNano()}
		if storedVersions[g] == nil {
			storedVersions[g] = map[versionKey]int{}
		}
		storedVersions[g][versionKey{uint64(w.Int("version")), w.Bool("is_deleted")}]++
	}
	byGroup := map[topGroup][]topRow{}
	for _, t := range rows {
		if g := (topGroup{t.row.Service, t.row.Start.UnixNano()}); seen[g] {
			byGroup[g] = append(byGroup[g], t)
		}
	}
	var stored []topRow
	var unsettled []TopKey
	for _, key := range keys {
		g := topGroup{key.Service, key.Start.UnixNano()}
		read, settled := byGroup[g], true
		var matched []topRow
		for v, n := range storedVersions[g] {
			var match []topRow
			for _, t := range read {
				if t.version == v.version && t.deleted == v.deleted {
					match = append(match, t)
				}
			}
			// One stored row, read (as often as it was inserted: the
			// same row each time).
			if n != 1 || len(match) == 0 {
				settled = false
				break
			}
			for _, m := range match[1:] {
				settled = settled && reflect.DeepEqual(m.row, match[0].row)
			}
			matched = append(matched, match[0])
		}
		for _, t := range read[1:] {
			settled = settled && t.row.TraceID == read[0].row.TraceID && t.row.SpanID == read[0].row.SpanID
		}
		if settled {
			stored = append(stored, matched...)
		} else {
			unsettled = append(unsettled, key)
		}
	}
	if len(unsettled) > 0 {
		ur, err := q.CH.Query(ctx, TopRequestsSQL(where, len(unsettled)), TopRequestsArgs(project, args, unsettled)...)
		if err != nil {
			return nil, false, false, fmt.Errorf("list top requests: %w", err)
		}
		stored = append(stored, scanTopRows(ur)...)
	}
	page, found = topFinalPage(stored, before, c, col, offset, limit)
	return page, found, true, nil
}

// TopStatesKeys are the (service, start) keys of the first k rows read by
// TopStatesSQL (sorted by col) whose stored versions topFromStates reads
// (TopVersionsSQL); nil when those rows cannot prove a page.
func TopStatesKeys(r *clickhouse.Result, col string, k int) []TopKey {
	_, _, keys := topStatesCandidates(r, col, k)
	return keys
}

// topStatesCandidates reads TopStatesSQL's result: its rows, c (the k-th
// that passes, is not a tombstone and is not replaced by a higher version
// among them) and the keys of the first k such rows; keys is nil when they
// cannot prove a page: fewer than k, NULLs within reach, or c not strictly
// above every cut.
func topStatesCandidates(r *clickhouse.Result, col string, k int) (rows []topRow, c *telemetry.LLMRequest, keys []TopKey) {
	rows = scanTopRows(r)
	// The highest-ranked cut: the last row of 6 hours holding more than
	// their state, or the row after those read.
	var cut *topStateKey
	for i := range r.Len() {
		w := r.Row(i)
		c := topStateKey{w.Float("cut_value"), w.Int("cut_start")}
		if i == topStatesRead(k) {
			c, rows = topStateKey{w.Float("key_value"), w.Int("key_start")}, rows[:i]
		} else if !w.Bool("cut") {
			continue
		}
		if cut == nil || c.before(*cut) {
			cut = &c
		}
	}
	// Rows a higher version of the same request among them replaces are
	// not final; nor are tombstones on a page.
	top := map[requestKey]uint64{}
	for _, t := range rows {
		key := requestKey{t.row.Service, t.row.Start.UnixNano(), t.row.TraceID, t.row.SpanID}
		top[key] = max(top[key], t.version)
	}
	var ranked []*telemetry.LLMRequest
	for i, t := range rows {
		if t.passes && !t.deleted && t.version == top[requestKey{t.row.Service, t.row.Start.UnixNano(), t.row.TraceID, t.row.SpanID}] {
			ranked = append(ranked, &rows[i].row)
		}
	}
	if len(ranked) < k {
		return rows, nil, nil
	}
	before := topBefore(col, true)
	sort.Slice(ranked, func(i, j int) bool { return before(ranked[i], ranked[j]) })
	c = ranked[k-1]
	v := requestValue(c, col)
	if v == nil {
		return rows, nil, nil
	}
	// c's key as the states sort it, -value then -start: strictly before
	// the cut, or a row left out may rank above it.
	if cut != nil && !(topStateKey{-*v, -c.Start.UnixNano()}).before(*cut) {
		return rows, nil, nil
	}
	seen := map[topGroup]bool{}
	for _, t := range ranked[:k] {
		if g := (topGroup{t.Service, t.Start.UnixNano()}); !seen[g] {
			seen[g] = true
			keys = append(keys, TopKey{t.Service, t.Start})
		}
	}
	return rows, c, keys
}

// topGroup is a TopKey as a map key.
type topGroup struct {
	service string
	start   int64 // Unix nanoseconds
}

// topStateKey is how llm_request_top's states sort a row: -value (NULL as
// +inf), then -start in nanoseconds; the page's order is theirs.
type topStateKey struct {
	value float64
	start int64
}

func (a topStateKey) before(b topStateKey) bool {
	return a.value < b.value || a.value == b.value && a.start < b.start
}

// TopStatesSQL reads the rows of a window's 6 hours in llm_request_top's
// state column (topStates), whole, in the page's order: the first 3k of
// them, then one more (its key only counts: a cut). Each comes with its 6
// hours' key, key_value and key_start (-value with NULL as +inf, -start in
// ns), and their cut when they hold more rows than the state: cut_value
// and cut_start of their last. Its arguments are TopStatesArgs: the where
// clause's (passes) then the project and span.
func TopStatesSQL(where, state string, k int) string {
	names := topStateNames()
	unpack := make([]string, len(names))
	for i, name := range names {
		unpack[i] = "r." + strconv.Itoa(i+3) + " AS " + name
	}
	n, last := strconv.Itoa(TopStateLen), strconv.Itoa(TopStateLen-1)
	return "SELECT " + strings.Join(names, ", ") + ", (" + where + ") AS passes, key_value, key_start, cut, cut_value, cut_start FROM (SELECT " +
		strings.Join(unpack, ", ") + ", r.1 AS key_value, r.2 AS key_start, length(top) = " + n + " AS cut, top[" + n + "].1 AS cut_value, top[" + n + "].2 AS cut_start" +
		" FROM (SELECT groupArraySortedMerge(" + n + ")(" + state + ") AS top FROM llm_request_top" +
		" WHERE project_id = ? AND bucket_end > toDateTime(?) AND bucket_end <= toStartOfInterval(toDateTime(?), INTERVAL 6 HOUR) + INTERVAL 6 HOUR" +
		" GROUP BY bucket_end)" +
		" ARRAY JOIN arraySlice(top, 1, " + last + ") AS r) ORDER BY key_value, key_start LIMIT " + strconv.Itoa(topStatesRead(k)+1)
}

// topStatesRead is how many rows TopStatesSQL reads for k: room for the
// stale versions, tombstones and rows the filter leaves out among them.
func topStatesRead(k int) int { return 3 * k }

// topStateNames are the columns of a row in llm_request_top's states, after
// its two sort keys.
func topStateNames() []string {
	return append(strings.FieldsFunc(clickhouse.RequestColumns, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }),
		"version", "is_deleted")
}

// TopStatesArgs are the arguments of TopStatesSQL: the window's 6 hours
// are those of from to that of its last nanosecond before to.
func TopStatesArgs(project uint32, whereArgs []any, from, to time.Time) []any {
	return append(slices.Clone(whereArgs), project, from, to.Add(-time.Nanosecond))
}

// TopVersionsSQL reads the version and tombstone flag of every stored row
// under n (service, start) keys: what topFromStates checks the rows it read
// against. start IN filters the key's granules before the tuples are
// compared. Its arguments are TopVersionsArgs.
func TopVersionsSQL(n int) string {
	return "SELECT service, start, version, is_deleted FROM llm_requests WHERE project_id = ? AND start IN (" +
		strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ") AND (service, start) IN (" +
		strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ") + ") SETTINGS optimize_use_projections = 0"
}

// TopVersionsArgs are the arguments of TopVersionsSQL.
func TopVersionsArgs(project uint32, keys []TopKey) []any {
	out := []any{project}
	for _, k := range keys {
		out = append(out, k.Start)
	}
	for _, k := range keys {
		out = append(out, k.Service, k.Start)
	}
	return out
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
	r, err := q.CH.Query(ctx, TopBoundSQL(where, col, desc), append(slices.Clone(args), TopBoundOffset(k))...)
	if err != nil {
		return nil, fmt.Errorf("list top requests: bound: %w", err)
	}
	if r.Len() == 0 {
		return nil, nil
	}
	return r.Row(0).FloatPtr("bound"), nil
}

// TopBoundOffset is the offset (j-1) of topBound's row for k top rows.
func TopBoundOffset(k int) int {
	return max(3, (topBoundAhead*k*sampleLevel0Keep+SampleBuckets-1)/SampleBuckets) - 1
}

// TopBoundSQL reads the j-th (OFFSET j-1, its one argument after the
// where clause's) value of col in the page's order from the stored
// sample's first level, without FINAL: only a guess, which topRequests
// checks. NULLs sort last and never bound.
func TopBoundSQL(where, col string, desc bool) string {
	return "SELECT toFloat64(" + col + ") AS bound FROM llm_requests_sample WHERE " + where + " AND sample_level = 0 AND " + col +
		" IS NOT NULL ORDER BY " + col + " " + direction(desc) + " LIMIT 1 OFFSET ?"
}

// TopKey is what TopKeysSQL reads of a top row: a prefix of its sorting
// key, which every version of its request shares.
type TopKey struct {
	Service string
	Start   time.Time
}

// TopRequestsSQL reads, without FINAL, every stored row (all versions,
// tombstones too) of the requests with the n given keys (TopKeysSQL's):
// the rows topRequests decides a sorted page from. passes is the filter
// applied to each row. Its arguments are TopRequestsArgs.
//
// The keys come as literals, not a subquery: a set of keys prunes to a
// granule or two a request, and without projections (which hold service
// and start too) the engine does not weigh reading them instead, an
// index analysis that cost more than the read (7 days at 10M: ~200 → ~50
// ms of CPU).
func TopRequestsSQL(where string, n int) string {
	return "SELECT " + clickhouse.RequestColumns + ", version, is_deleted, (" + where + ") AS passes FROM llm_requests" +
		" WHERE project_id = ? AND (service, start) IN (" + strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ") + ")" +
		" SETTINGS optimize_use_projections = 0"
}

// TopRequestsArgs are the arguments of TopRequestsSQL.
func TopRequestsArgs(project uint32, whereArgs []any, keys []TopKey) []any {
	out := append(slices.Clone(whereArgs), project)
	for _, k := range keys {
		out = append(out, k.Service, k.Start)
	}
	return out
}

// TopKeysSQL reads the service and start (TopKey: what the TTFT and E2E
// projections hold of the sorting key) of the top k rows of a filtered
// window by col. bounded restricts them to rows reaching a bound
// (topBound), which lets the engine read the column's projection as a key
// range or skip granules by its minmax index; the top k are the same as
// long as k rows reach it. Its arguments are TopKeysArgs.
func TopKeysSQL(where, col string, desc, bounded bool) string {
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

// TopKeysArgs are the arguments of TopKeysSQL; bound is nil when it is
// not bounded.
func TopKeysArgs(whereArgs []any, k int, bound *float64) []any {
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

// ServiceInfo is one service seen sending or serving LLM requests.
type ServiceInfo struct {
	Service   string    `json:"service"`
	Models    []string  `json:"models"`
	Instances []string  `json:"instances"`
	LastSeen  time.Time `json:"last_seen"`
	// Role: "client" (calls models), "server" (inference server), or both.
	Role string `json:"role"`
}

// Services lists services with LLM traffic since a time. It reads the
// hourly name counts (llm_request_names), not the requests: pages call it
// on every view for their pickers, over a 7-day lookback that may hold
// millions of requests. The lookback starts at the hour of since.
func (q *Queries) Services(ctx context.Context, project uint32, since time.Time) ([]ServiceInfo, error) {
	r, err := q.CH.Query(ctx, `
		SELECT service, groupUniqArray(50)(model) AS models, groupUniqArray(100)(instance) AS instances, CAST(max(last_start) AS DateTime64(9, 'UTC')) AS last_seen, 'client' AS role
		FROM llm_request_names WHERE project_id = ? AND hour >= toStartOfHour(?) GROUP BY service
		UNION ALL
		SELECT server_service AS service, groupUniqArray(50)(model) AS models, groupUniqArray(100)(instance) AS instances, CAST(max(last_start) AS DateTime64(9, 'UTC')) AS last_seen, 'server' AS role
		FROM llm_request_names WHERE project_id = ? AND hour >= toStartOfHour(?) AND server_service != '' GROUP BY server_service`,
		project, since, project, since)
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	by := map[string]*ServiceInfo{}
	for i := 0; i < r.Len(); i++ {
		w := r.Row(i)
		name := w.String("service")
		s := by[name]
		if s == nil {
			s = &ServiceInfo{Service: name, Role: w.String("role")}
			by[name] = s
		} else if s.Role != w.String("role") {
			s.Role = "both"
		}
		s.Models = mergeSorted(s.Models, w.Strings("models"))
		s.Instances = mergeSorted(s.Instances, w.Strings("instances"))
		if t := w.Time("last_seen"); t.After(s.LastSeen) {
			s.LastSeen = t
		}
	}
	if err := q.addMetricsServers(ctx, project, since, by); err != nil {
		return nil, err
	}
	out := make([]ServiceInfo, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out, nil
}

func mergeSorted(a, b []string) []string {
	set := map[string]bool{}
	for _, s := range append(a, b...) {
		if s != "" {
			set[s] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// DiagnoseRequest names what to diagnose.
type DiagnoseRequest struct {
	Project  uint32
	Window   diagnose.Range
	Baseline diagnose.Range // zero = the preceding 3× window
	Service  string
	Model    string
	SLO      *diagnose.SLO
	Prices   map[string]diagnose.Price
}

// Diagnose loads the window and baseline and runs the diagnosis.
func (q *Queries) Diagnose(ctx context.Context, d DiagnoseRequest) (diagnose.Diagnosis, error) {
	in, err := q.input(ctx, d, true, nil)
	if err != nil {
		return diagnose.Diagnosis{}, err
	}
	return q.withServerMetrics(ctx, d, in, diagnose.Diagnose(in))
}

// DiagnoseWithSlowest is Diagnose and the window's n slowest requests by
// TTFT, as Requests sorted by "ttft", descending, lists them (the
// diagnosis page shows both). A window loaded whole holds them among its
// rows already; for a sampled one the list is read beside the window's
// other reads, queued as soon as the window's size says it is sampled
// (after its reads it would add its own to the page's time).
func (q *Queries) DiagnoseWithSlowest(ctx context.Context, d DiagnoseRequest, n int) (diagnose.Diagnosis, []telemetry.LLMRequest, error) {
	var slow []telemetry.LLMRequest
	var g errgroup.Group
	in, err := q.input(ctx, d, true, func(whole bool) {
		if whole {
			return
		}
		g.Go(func() (err error) {
			slow, _, err = q.Requests(ctx, RequestFilter{Project: d.Project, From: d.Window.From, To: d.Window.To, Service: d.Service, Model: d.Model,
				Sort: "ttft", Desc: true, Limit: n, NoTotal: true})
			return err
		})
	})
	if err != nil {
		return diagnose.Diagnosis{}, nil, errors.Join(err, g.Wait())
	}
	// The diagnosis runs while the list's last read does.
	var out diagnose.Diagnosis
	g.Go(func() error {
		out = diagnose.Diagnose(in)
		return nil
	})
	if err := g.Wait(); err != nil {
		return diagnose.Diagnosis{}, nil, err
	}
	if out, err = q.withServerMetrics(ctx, d, in, out); err != nil {
		return diagnose.Diagnosis{}, nil, err
	}
	if in.WindowTotal == 0 { // the rows are the whole window
		slow = slices.Clone(in.Requests)
		before := topBefore(SortColumns["ttft"], true)
		sort.Slice(slow, func(i, j int) bool { return before(&slow[i], &slow[j]) })
		slow = slow[:min(n, len(slow))]
	}
	return out, slow, nil
}

// FinalSettings go with every FINAL read of llm_requests (the query bench
// issues the same statements): a request's
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

// CountSQL is the statement counting a list's matches (where) over rough
// stored rows: exact, or the stored sample's count (scaled up after).
func CountSQL(where string, rough int) string { return planCount(rough, exactCountMax).countSQL(where) }

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

// Compare loads two windows (before = a, after = b) and compares them.
func (q *Queries) Compare(ctx context.Context, project uint32, a, b diagnose.Range, service, model string, prices map[string]diagnose.Price) (diagnose.Comparison, error) {
	// Both windows load at once: one's rows decode in Go while the engine
	// reads the other's.
	var before, after loadedRequests
	var g errgroup.Group
	g.Go(func() error {
		f := RequestFilter{Project: project, Service: service, Model: model}
		rough, err := q.roughCounts(ctx, f, a, b)
		if err != nil {
			return err
		}
		fa, fb := f, f
		fa.From, fa.To = a.From, a.To
		fb.From, fb.To = b.From, b.To
		g.Go(func() (err error) {
			where, args := fa.where()
			before, err = q.loadPlanned(ctx, where, args, rough[0], q.maxRows())
			return err
		})
		where, args := fb.where()
		after, err = q.loadPlanned(ctx, where, args, rough[1], q.maxRows())
		return err
	})
	servers, err := q.servers(ctx, project, service, model, diagnose.Range{From: minTime(a.From, b.From), To: maxTime(a.To, b.To)})
	if err != nil {
		return diagnose.Comparison{}, err
	}
	var gauges [][]telemetry.MetricPoint
	if overlap := a.From.Before(b.To) && b.From.Before(a.To); diagnose.Buckets(a) == diagnose.Buckets(b) && !overlap {
		g.Go(func() (err error) {
			gauges, err = q.metrics(ctx, project, servers, diagnose.Buckets(b), b, a)
			return err
		})
	} else {
		// Windows of different lengths chart at different widths, and
		// overlapping ones both keep the gauges they share.
		gauges = make([][]telemetry.MetricPoint, 2)
		for i, r := range []diagnose.Range{b, a} {
			g.Go(func() error {
				m, err := q.metrics(ctx, project, servers, diagnose.Buckets(r), r)
				if err == nil {
					gauges[i] = m[0]
				}
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return diagnose.Comparison{}, err
	}
	return diagnose.Compare(before.reqs, after.reqs, diagnose.CompareOptions{BeforeMetrics: gauges[1], AfterMetrics: gauges[0], Prices: prices,
		BeforeTotal: before.sampledFrom, AfterTotal: after.sampledFrom, TotalsEstimated: before.estimated || after.estimated, Before: a, After: b}), nil
}

// Series returns the diagnosis time series for the window alone.
func (q *Queries) Series(ctx context.Context, d DiagnoseRequest) ([]diagnose.Bucket, float64, error) {
	// Series reads only the window's requests and gauges; the baseline
	// still bounds the events (replica counts carry forward from before).
	in, err := q.input(ctx, d, false, nil)
	if err != nil {
		return nil, 0, err
	}
	return diagnose.Series(in), diagnose.Buckets(in.Window).Seconds(), nil
}

// input loads what a diagnosis (withBaseline) or the series alone reads;
// planned, when set, is told as soon as the window's size is known whether
// its rows will be read whole.
func (q *Queries) input(ctx context.Context, d DiagnoseRequest, withBaseline bool, planned func(whole bool)) (diagnose.Input, error) {
	if d.Baseline.IsZero() {
		d.Baseline = diagnose.DefaultBaseline(d.Window)
	}
	in := diagnose.Input{Window: d.Window, Baseline: d.Baseline, SLO: d.SLO, Prices: d.Prices}
	ranges := []diagnose.Range{d.Window}
	if withBaseline {
		ranges = append(ranges, d.Baseline)
	}
	// Events span the baseline too, even for the series alone: replica
	// counts carry forward from the last scale event before the window.
	span := diagnose.Range{From: minTime(d.Window.From, d.Baseline.From), To: maxTime(d.Window.To, d.Baseline.To)}
	f := RequestFilter{Project: d.Project, Service: d.Service, Model: d.Model}
	servers, counts, err := q.sizeUp(ctx, f, span, ranges...)
	if err != nil {
		return in, err
	}
	// Window and baseline load at once (see Compare), gauges and events
	// beside them.
	var win, base loadedRequests
	var g errgroup.Group
	g.Go(func() (err error) {
		fw := f
		fw.From, fw.To = d.Window.From, d.Window.To
		where, args := fw.where()
		rough := counts[0]
		if planned != nil {
			planned(!PlanSample(rough, q.maxRows()).Sampled())
		}
		if width := diagnose.Buckets(d.Window); rough > q.maxRows() && rough <= q.seriesExactMax() {
			// The window is loaded as a sample, but is small enough for
			// its series to come from every request: sharper per-bucket
			// percentiles for the chart and the correlations, and the
			// window's exact size with them. Buckets of 5 minutes or more
			// come from the rollups (24 h at 1M requests: ~30 ms of CPU
			// where the engine's FINAL read took ~45); narrower ones from
			// the engine. Bigger windows keep the loaded sample's series:
			// the rollups' read (40–65 ms of CPU at 10M) made a diagnosis
			// 50–110 ms slower, for a chart the sample already draws.
			g.Go(func() (err error) {
				if rollupServes(width) {
					in.RequestBuckets, err = q.rollupBuckets(ctx, d.Project, d.Window, width, d.Service, d.Model)
				} else {
					in.RequestBuckets, err = q.requestBuckets(ctx, where, args, width)
				}
				return err
			})
			if !withBaseline {
				return nil // the series alone: the buckets are all of it
			}
		}
		if !withBaseline {
			win, err = q.loadPlanned(ctx, where, args, rough, q.maxRows())
			return err
		}
		// The baseline only gives reference percentiles and shares: half
		// the window's sample is plenty, and halves its cost.
		fb := f
		fb.From, fb.To = d.Baseline.From, d.Baseline.To
		bwhere, bargs := fb.where()
		win, base, err = q.loadPair(ctx, windowRead{r: d.Window, where: where, args: args, rough: rough, limit: q.maxRows()},
			windowRead{r: d.Baseline, where: bwhere, args: bargs, rough: counts[1], limit: q.maxRows() / 2})
		return err
	})
	// Gauges come pre-aggregated to the chart's bucket width, window and
	// baseline told apart so no bucket mixes the two.
	var gauges [][]telemetry.MetricPoint
	g.Go(func() (err error) {
		gauges, err = q.metrics(ctx, d.Project, servers, diagnose.Buckets(d.Window), ranges...)
		return err
	})
	if len(servers) > 0 {
		g.Go(func() error {
			r, err := q.CH.Query(ctx, "SELECT "+clickhouse.EventColumns+" FROM events FINAL WHERE project_id = ? AND service IN ? AND time >= ? AND time < ? ORDER BY time",
				d.Project, servers, span.From, span.To)
			if err != nil {
				return fmt.Errorf("load events: %w", err)
			}
			in.Events = clickhouse.ScanEvents(r)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return in, err
	}
	in.Requests, in.WindowTotal = win.reqs, win.sampledFrom
	if in.RequestBuckets != nil {
		// The engine's series counted every request of the window.
		in.WindowTotal, win.estimated = 0, false
		for _, b := range in.RequestBuckets {
			in.WindowTotal += b.Requests
		}
	}
	in.BaselineRequests, in.BaselineTotal = base.reqs, base.sampledFrom
	in.TotalsEstimated = win.estimated || base.estimated
	in.Metrics = gauges[0]
	if withBaseline {
		in.Metrics = append(gauges[1], gauges[0]...)
	}
	return in, nil
}

// servers are the inference services behind a service's (and model's)
// requests over a range, and the service itself (which may be one), read
// from the hourly name counts: gauges and events are kept per inference
// service.
func (q *Queries) servers(ctx context.Context, project uint32, service, model string, r diagnose.Range) ([]string, error) {
	where, args := RequestFilter{Project: project, Service: service, Model: model}.scope()
	res, err := q.CH.Query(ctx, "SELECT DISTINCT server_service FROM llm_request_names WHERE "+where+
		" AND hour >= toStartOfHour(?) AND hour < ? AND server_service != '' ORDER BY server_service", append(args, r.From, r.To)...)
	if err != nil {
		return nil, fmt.Errorf("inference services: %w", err)
	}
	out := make([]string, 0, res.Len()+1)
	for i := range res.Len() {
		out = append(out, res.Row(i).String("server_service"))
	}
	return withService(out, service), nil
}

// withService adds service to the sorted inference services when it is
// not among them.
func withService(servers []string, service string) []string {
	if service != "" && !slices.Contains(servers, service) {
		servers = append(servers, service)
		slices.Sort(servers)
	}
	return servers
}

// sizeUp returns the inference services behind f's requests over span (see
// servers) and a rough count of f's requests in each of ranges (see
// roughCount), ranges[0] being a diagnosis's window. A window of
// namesRoughMin or more takes both from the hourly name counts, in one
// statement instead of two (7 days at 1M requests: ~20 ms of engine time
// less); their partial first hours overcount by a twelfth at most, so a
// sample sized by them errs on the small side. Shorter windows count
// llm_requests.
func (q *Queries) sizeUp(ctx context.Context, f RequestFilter, span diagnose.Range, ranges ...diagnose.Range) ([]string, []int, error) {
	if ranges[0].Duration() < namesRoughMin {
		var servers []string
		var counts []int
		var g errgroup.Group
		g.Go(func() (err error) {
			servers, err = q.servers(ctx, f.Project, f.Service, f.Model, span)
			return err
		})
		g.Go(func() (err error) {
			counts, err = q.roughCounts(ctx, f, ranges...)
			return err
		})
		return servers, counts, g.Wait()
	}
	scope, args := f.scope()
	var sums []string
	var sumArgs []any
	for i, r := range ranges {
		sums, sumArgs = append(sums, fmt.Sprintf("sumIf(rows, hour >= toStartOfHour(?) AND hour < ?) AS n%d", i)), append(sumArgs, r.From, r.To)
	}
	res, err := q.CH.Query(ctx, "SELECT server_service, "+strings.Join(sums, ", ")+" FROM llm_request_names WHERE "+scope+
		" AND hour >= toStartOfHour(?) AND hour < ? GROUP BY server_service ORDER BY server_service",
		append(append(sumArgs, args...), span.From, span.To)...)
	if err != nil {
		return nil, nil, fmt.Errorf("size the window: %w", err)
	}
	var servers []string
	counts := make([]int, len(ranges))
	for i := range res.Len() {
		row := res.Row(i)
		if s := row.String("server_service"); s != "" {
			servers = append(servers, s)
		}
		for j := range counts {
			counts[j] += int(row.Int(fmt.Sprintf("n%d", j)))
		}
	}
	return withService(servers, f.Service), counts, nil
}

// DefaultMaxRows bounds the requests one window loads: beyond it a diagnosis
// reads an even sample by hash of (trace, span). p99 over a 20k-row
// uniform sample is within ~1.5 % of the full figure (its standard error
// for exponential latencies), and a diagnosis over it costs ~40 % of one
// over 50k (bench query --max-rows). The chart's per-bucket figures come
// from every request when the window is small enough (SeriesExactMax).
const DefaultMaxRows = 20_000

// SampleBuckets is the hash modulus of the sample: a window keeps
// ⌈maxRows × SampleBuckets / total⌉ of every SampleBuckets hash values.
const SampleBuckets = 4096

// The llm_requests_sample table (migration 0005) holds the requests whose
// hash is below sampleTableKeep, those below sampleLevel0Keep first
// (sample_level 0); llm_requests_sample64 (migration 0017) those below
// sample64Keep. A sample that keeps no more hash values than one of them
// holds reads it instead of llm_requests: the same rows, a 16th, a 64th or
// a 256th of the reading.
const (
	sampleTableKeep  = 256
	sample64Keep     = 64
	sampleLevel0Keep = 16
	// sampleTableMin is the fewest rows of the stored sample a window is
	// read from when it keeps more than the sample holds (see PlanSample).
	sampleTableMin = 8_000
)

func (q *Queries) maxRows() int { return orDefault(q.MaxRows, DefaultMaxRows) }

func (q *Queries) exactCountMax() int { return orDefault(q.ExactCountRows, exactCountMax) }

func (q *Queries) seriesExactMax() int { return orDefault(q.SeriesExactRows, SeriesExactMax) }

// loadedRequests are a window's requests, time-ordered.
type loadedRequests struct {
	reqs []telemetry.LLMRequest
	// sampledFrom is the number of requests in the window when reqs is a
	// sample of them, else 0; estimated says it was scaled up from the
	// sample rather than counted.
	sampledFrom int
	estimated   bool
}

// SamplePlan says where a window's requests are read from, given a rough
// count of them (the number of stored rows, versions included).
type SamplePlan struct {
	Table string
	// Keep is how many of SampleBuckets hash values are read; SampleBuckets
	// (no sampling) when the window holds at most the row limit.
	Keep int
	// Level0 restricts the sample table to sample_level 0.
	Level0 bool
}

// PlanSample chooses the cheapest way to read about limit of rough rows.
func PlanSample(rough, limit int) SamplePlan {
	if rough <= limit {
		return SamplePlan{Table: "llm_requests", Keep: SampleBuckets}
	}
	keep := max(1, (limit*SampleBuckets+rough-1)/rough)
	switch {
	case keep <= sampleLevel0Keep:
		return SamplePlan{Table: "llm_requests_sample", Keep: keep, Level0: true}
	case keep <= sample64Keep:
		return SamplePlan{Table: "llm_requests_sample64", Keep: keep}
	case keep <= sampleTableKeep:
		return SamplePlan{Table: "llm_requests_sample", Keep: keep}
	case rough*sampleTableKeep/SampleBuckets >= max(sampleTableMin, limit*2/5):
		// The whole stored sample holds at least 40 % of the rows asked
		// for, and enough to size the window within ~1 %. A hash sample
		// of llm_requests picks rows from every granule, so it
		// decompresses the whole window (24 h at 1M rows: ~85 ms of CPU);
		// the stored one reads a sixteenth of it (~10 ms), and its
		// percentiles' error grows by 1/√0.4 at most (a p99 within ~1.5 %
		// at 20k rows, ~2.4 % at 8k).
		return SamplePlan{Table: "llm_requests_sample", Keep: sampleTableKeep}
	}
	return SamplePlan{Table: "llm_requests", Keep: keep}
}

// Sampled reports whether the plan reads a sample.
func (p SamplePlan) Sampled() bool { return p.Keep < SampleBuckets }

// SQL is the statement reading the plan's rows of a window (where, args);
// limit only guards memory, the sample already holds about limit rows.
func (p SamplePlan) SQL(where string, args []any, limit int) (string, []any) {
	where, args = p.cond(where, args)
	return "SELECT " + clickhouse.RequestColumns + " FROM " + p.Table + " FINAL WHERE " + where + " LIMIT ?" + FinalSettings,
		append(args, 2*limit)
}

// cond is the condition selecting the plan's rows of a window (where, args).
func (p SamplePlan) cond(where string, args []any) (string, []any) {
	args = slices.Clone(args)
	if p.Level0 {
		where += " AND sample_level = 0"
	}
	if p.Sampled() {
		where += " AND cityHash64(trace_id, span_id) % ? < ?"
		args = append(args, SampleBuckets, p.Keep)
	}
	return where, args
}

// loadPlanned reads the requests of a window (where, args) given a rough
// count of its stored rows: all of them up to limit, else a uniform sample
// chosen by hash modulo (a filter the engine applies while reading, far
// cheaper than ordering every row by hash).
func (q *Queries) loadPlanned(ctx context.Context, where string, args []any, rough, limit int) (loadedRequests, error) {
	// The rough count overcounts unmerged versions, so the sample errs on
	// the small side.
	plan := PlanSample(rough, limit)
	sql, sqlArgs := plan.SQL(where, args, limit)
	reqs, err := q.CH.QueryRequests(ctx, sql, sqlArgs...)
	if err != nil {
		return loadedRequests{}, fmt.Errorf("load requests: %w", err)
	}
	return q.sized(ctx, plan, where, args, reqs)
}

// windowRead is a window's range and where clause (with args), its rough
// count, and how many of its rows a read may keep.
type windowRead struct {
	where        string
	args         []any
	rough, limit int
	r            diagnose.Range
}

// loadPair is loadPlanned for a diagnosis's window and its baseline. When
// both are read from the same table and do not overlap, one statement
// reads both (the rows told apart by start): at 1M requests over 7 days
// a 24-hour window and its 72-hour baseline, both from the stored sample,
// cost ~22 ms of engine time together and ~33 apart.
func (q *Queries) loadPair(ctx context.Context, a, b windowRead) (loadedRequests, loadedRequests, error) {
	pa, pb := PlanSample(a.rough, a.limit), PlanSample(b.rough, b.limit)
	sql, args, ok := pairSQL(a, b, pa, pb)
	if !ok {
		var la, lb loadedRequests
		var g errgroup.Group
		g.Go(func() (err error) {
			lb, err = q.loadPlanned(ctx, b.where, b.args, b.rough, b.limit)
			return err
		})
		la, err := q.loadPlanned(ctx, a.where, a.args, a.rough, a.limit)
		return la, lb, errors.Join(err, g.Wait())
	}
	rows, err := q.CH.QueryRequests(ctx, sql, args...)
	if err != nil {
		return loadedRequests{}, loadedRequests{}, fmt.Errorf("load requests: %w", err)
	}
	// Split in place: the rows are large, and copying them into two
	// growing slices cost more than the diagnosis itself.
	k := 0
	for i := range rows {
		if a.r.Contains(rows[i].Start) {
			rows[i], rows[k] = rows[k], rows[i]
			k++
		}
	}
	ra, rb := rows[:k:k], rows[k:]
	var la, lb loadedRequests
	var g errgroup.Group
	g.Go(func() (err error) {
		lb, err = q.sized(ctx, pb, b.where, b.args, rb)
		return err
	})
	la, err = q.sized(ctx, pa, a.where, a.args, ra)
	return la, lb, errors.Join(err, g.Wait())
}

// pairSQL is the statement reading two windows at once by their plans
// (see loadPair); ok is false when they must be read apart.
func pairSQL(a, b windowRead, pa, pb SamplePlan) (sql string, args []any, ok bool) {
	if pa.Table != pb.Table || a.r.From.Before(b.r.To) && b.r.From.Before(a.r.To) {
		return "", nil, false
	}
	ca, aargs := pa.cond(a.where, a.args)
	cb, bargs := pb.cond(b.where, b.args)
	return "SELECT " + clickhouse.RequestColumns + " FROM " + pa.Table + " FINAL WHERE (" + ca + ") OR (" + cb + ") LIMIT ?" + FinalSettings,
		append(append(aargs, bargs...), 2*(a.limit+b.limit)), true
}

// PairSQL is the statement a diagnosis reads its window (where, args,
// rough count) and baseline with when one statement can read both.
func PairSQL(window, baseline diagnose.Range, where, bwhere string, args, bargs []any, rough, brough, limit int) (string, []any, bool) {
	a := windowRead{r: window, where: where, args: args, rough: rough, limit: limit}
	b := windowRead{r: baseline, where: bwhere, args: bargs, rough: brough, limit: limit / 2}
	return pairSQL(a, b, PlanSample(a.rough, a.limit), PlanSample(b.rough, b.limit))
}

// sized is a window's rows read by plan, time-ordered, with the window's
// size when they are a sample of it.
func (q *Queries) sized(ctx context.Context, plan SamplePlan, where string, args []any, reqs []telemetry.LLMRequest) (loadedRequests, error) {
	out := loadedRequests{reqs: reqs}
	var err error
	switch {
	case !plan.Sampled():
	case plan.Table == "llm_requests" && estimateError(len(out.reqs), plan.Keep) > estimateMaxError:
		// Too few sampled rows to scale up well, and a window this small
		// is cheap to count. (A diagnosis's 10k-row baseline of up to
		// ~50k requests is estimated within 1 %.)
		if out.sampledFrom, err = q.countWhere(ctx, where, args); err != nil {
			return out, err
		}
	default:
		// Counting the window exactly under FINAL would cost as much as
		// the read again (or read every row the sample table spares); the
		// sample's size scaled up is within a percent or so (a 20k-row
		// sample's relative error is ~0.7 %).
		out.sampledFrom = max(len(out.reqs), int(math.Round(float64(len(out.reqs))*SampleBuckets/float64(plan.Keep))))
		out.estimated = true
	}
	sort.Slice(out.reqs, func(i, j int) bool { return out.reqs[i].Start.Before(out.reqs[j].Start) })
	return out, nil
}

// metrics loads the inference gauges of the given services as one point per
// (bucket of width, service, instance, gauge) for each range, in one
// statement: the bucket's peak, stamped with its last sample's time so it
// lands in the same bucket in Go. Peaks are what the charts and
// corroboration read (a full KV cache on one instance holds that
// instance's requests), and a 7-day window then moves thousands of points
// instead of millions. out[i] holds ranges[i]'s points; a bucket two ranges
// share (a window and the baseline right before it) belongs to the first.
func (q *Queries) metrics(ctx context.Context, project uint32, services []string, width time.Duration, ranges ...diagnose.Range) ([][]telemetry.MetricPoint, error) {
	out := make([][]telemetry.MetricPoint, len(ranges))
	if len(services) == 0 || len(ranges) == 0 {
		return out, nil
	}
	sql, args := MetricsSQL(project, services, width, ranges...)
	r, err := q.CH.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("load metrics: %w", err)
	}
	for i := range r.Len() {
		row := r.Row(i)
		side := row.Int("side")
		out[side] = append(out[side], telemetry.MetricPoint{ProjectID: project, Time: row.Time("at"), Service: row.String("service"),
			Instance: row.String("instance"), Name: row.String("name"), Value: row.Float("peak")})
	}
	return out, nil
}

// peakStep is the bucket of metric_peaks_5m (migration 0008).
const peakStep = 5 * time.Minute

// MetricsSQL is the statement metrics runs. A width that is a multiple of
// 5 minutes reads only the 5-minute peaks, each range widened to whole 5
// minutes: each 5-minute bucket lies in one chart bucket, so a chart
// bucket's peak is the peak of all its samples, the first bucket's
// included (it starts before the window anyway; reading raw points for the
// ragged edges instead cost ~10 ms of engine time per range). Narrower
// buckets read raw points. Rows carry side, the index of the first range
// holding them.
func MetricsSQL(project uint32, services []string, width time.Duration, ranges ...diagnose.Range) (string, []any) {
	gauges := []string{diagnose.MetricKVCacheUsage, diagnose.MetricRequestsWaiting, diagnose.MetricRequestsRunning}
	seconds := max(int64(width/time.Second), 1)
	inner := "SELECT time AS t, service, instance, name, value AS v, %s AS side FROM metric_points WHERE project_id = ? AND name IN ? AND service IN ? AND isFinite(value) AND (%s)"
	at := "time"
	if width%peakStep == 0 {
		inner = "SELECT CAST(last_time AS DateTime64(9, 'UTC')) AS t, service, instance, name, CAST(peak AS Float64) AS v, %s AS side FROM metric_peaks_5m WHERE project_id = ? AND name IN ? AND service IN ? AND (%s)"
		at = "bucket"
		ranges = slices.Clone(ranges)
		for i, r := range ranges {
			ranges[i] = diagnose.Range{From: r.From.Truncate(peakStep), To: ceilTime(r.To, peakStep)}
		}
	}
	var side, where []string
	var sideArgs, whereArgs []any
	for i, r := range ranges {
		cond := at + " >= ? AND " + at + " < ?"
		where, whereArgs = append(where, cond), append(whereArgs, r.From, r.To)
		if i < len(ranges)-1 {
			side, sideArgs = append(side, cond, strconv.Itoa(i)), append(sideArgs, r.From, r.To)
		}
	}
	sideSQL := strconv.Itoa(len(ranges) - 1)
	if len(side) > 0 {
		sideSQL = "multiIf(" + strings.Join(side, ", ") + ", " + sideSQL + ")"
	}
	args := append(append(sideArgs, project, gauges, services), whereArgs...)
	return "SELECT max(t) AS at, service, instance, name, max(v) AS peak, side FROM (" + fmt.Sprintf(inner, sideSQL, strings.Join(where, " OR ")) +
		") GROUP BY toStartOfInterval(t, toIntervalSecond(?)) AS bucket, side, service, instance, name ORDER BY at", append(args, seconds)
}

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
	b, err := traceStarts(ctx, q.CH, project, []string{traceID}, time.Unix(0, 0), "")
	if err != nil || b.bounded == 0 {
		return nil, nil, err
	}
	r, err := q.CH.Query(ctx, "SELECT "+clickhouse.SpanColumns+" FROM spans FINAL PREWHERE trace_id = ? WHERE project_id = ? AND start >= ? AND start <= ? ORDER BY start",
		traceID, project, b.lo, b.hi)
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
