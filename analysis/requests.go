package analysis

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

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
		(f.From.IsZero() || f.To.IsZero() || topListWindow(f.To.Sub(f.From))):
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
