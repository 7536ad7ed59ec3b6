package analysis

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

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

// topStatesWindow reports whether topRequests reads the first k rows of a
// window sorted by col (descending when desc) from llm_request_top. (Its
// states outlive the rows they hold under the same retention, so a window
// within retention is whole in them; rows past retention the TTL has not
// removed yet may be missing.)
func topStatesWindow(col string, desc bool, k int, from, to time.Time) bool {
	_, ok := topStates[col]
	return ok && desc && k < TopStateLen && !from.IsZero() && to.Sub(from) >= topStatesMinWindow
}

// topFromStates is topRequests read from llm_request_top: the first rows
// of each 6 hours of the window in the page's order, every row ever stored
// (versions since merged away and tombstones too), instead of k rows
// scattered through llm_requests. found is false when they cannot prove
// the page; topRequests then reads llm_requests.
//
// Like topRequests it tries k = topFirstK rows first, and twice the page
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
// under those keys (topVersionsSQL, without identity: a request is
// (service, start, trace_id, span_id)) say which of the rows read are the
// final ones. A key whose stored versions each match exactly one row read,
// all of one request, is settled; the others are read from llm_requests
// (topRequestsSQL). A request whose final row is not among the rows read
// does not pass or ranks at or below c, so it is not on the page.
func (q *Queries) topFromStates(ctx context.Context, project uint32, from, to time.Time, where string, args []any, col string, desc bool, offset, limit int) ([]telemetry.LLMRequest, bool, error) {
	n := offset + limit
	for _, k := range []int{topFirstK(n), max(2*n, 100)} {
		if !topStatesWindow(col, desc, k, from, to) {
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
	r, err := q.CH.Query(ctx, topStatesSQL(where, topStates[col], k), topStatesArgs(project, args, from, to)...)
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
	vr, err := q.CH.Query(ctx, topVersionsSQL(len(keys)), topVersionsArgs(project, keys)...)
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
	var unsettled []topKey
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
		ur, err := q.CH.Query(ctx, topRequestsSQL(where, len(unsettled)), topRequestsArgs(project, args, unsettled)...)
		if err != nil {
			return nil, false, false, fmt.Errorf("list top requests: %w", err)
		}
		stored = append(stored, scanTopRows(ur)...)
	}
	page, found = topFinalPage(stored, before, c, col, offset, limit)
	return page, found, true, nil
}

// topStatesCandidates reads topStatesSQL's result: its rows, c (the k-th
// that passes, is not a tombstone and is not replaced by a higher version
// among them) and the keys of the first k such rows; keys is nil when they
// cannot prove a page: fewer than k, NULLs within reach, or c not strictly
// above every cut.
func topStatesCandidates(r *clickhouse.Result, col string, k int) (rows []topRow, c *telemetry.LLMRequest, keys []topKey) {
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
			keys = append(keys, topKey{t.Service, t.Start})
		}
	}
	return rows, c, keys
}

// topGroup is a topKey as a map key.
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

// topStatesSQL reads the rows of a window's 6 hours in llm_request_top's
// state column (topStates), whole, in the page's order: the first 3k of
// them, then one more (its key only counts: a cut). Each comes with its 6
// hours' key, key_value and key_start (-value with NULL as +inf, -start in
// ns), and their cut when they hold more rows than the state: cut_value
// and cut_start of their last. Its arguments are topStatesArgs: the where
// clause's (passes) then the project and span.
func topStatesSQL(where, state string, k int) string {
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

// topStatesRead is how many rows topStatesSQL reads for k: room for the
// stale versions, tombstones and rows the filter leaves out among them.
func topStatesRead(k int) int { return 3 * k }

// topStateNames are the columns of a row in llm_request_top's states, after
// its two sort keys.
func topStateNames() []string {
	return append(strings.FieldsFunc(clickhouse.RequestColumns, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }),
		"version", "is_deleted")
}

// topStatesArgs are the arguments of topStatesSQL: the window's 6 hours
// are those of from to that of its last nanosecond before to.
func topStatesArgs(project uint32, whereArgs []any, from, to time.Time) []any {
	return append(slices.Clone(whereArgs), project, from, to.Add(-time.Nanosecond))
}

// topVersionsSQL reads the version and tombstone flag of every stored row
// under n (service, start) keys: what topFromStates checks the rows it read
// against. start IN filters the key's granules before the tuples are
// compared. Its arguments are topVersionsArgs.
func topVersionsSQL(n int) string {
	return "SELECT service, start, version, is_deleted FROM llm_requests WHERE project_id = ? AND start IN (" +
		strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ") AND (service, start) IN (" +
		strings.TrimSuffix(strings.Repeat("(?, ?), ", n), ", ") + ") SETTINGS optimize_use_projections = 0"
}

// topVersionsArgs are the arguments of topVersionsSQL.
func topVersionsArgs(project uint32, keys []topKey) []any {
	out := []any{project}
	for _, k := range keys {
		out = append(out, k.Start)
	}
	for _, k := range keys {
		out = append(out, k.Service, k.Start)
	}
	return out
}
