package analysis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

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
	if in.ServerMetrics, err = q.serverMetricsFor(ctx, d, in); err != nil {
		return diagnose.Diagnosis{}, err
	}
	return diagnose.Diagnose(in), nil
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
	g.Go(func() (err error) {
		if in.ServerMetrics, err = q.serverMetricsFor(ctx, d, in); err != nil {
			return err
		}
		out = diagnose.Diagnose(in)
		return nil
	})
	if err := g.Wait(); err != nil {
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
	servers, err := q.servers(ctx, project, service, model, diagnose.Range{From: telemetry.MinTime(a.From, b.From), To: telemetry.MaxTime(a.To, b.To)})
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
	span := diagnose.Range{From: telemetry.MinTime(d.Window.From, d.Baseline.From), To: telemetry.MaxTime(d.Window.To, d.Baseline.To)}
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
	if withBaseline {
		g.Go(func() (err error) {
			in.ErrorTypes, err = q.errorTypes(ctx, f, d.Window, d.Baseline)
			return err
		})
	}
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

// errorTypes counts the failed requests of the window and the baseline by
// error type, over every request (a sampled window's rows do not carry the
// type): errorTypesSQL.
func (q *Queries) errorTypes(ctx context.Context, f RequestFilter, window, baseline diagnose.Range) (*diagnose.ErrorTypeCounts, error) {
	sql, args := errorTypesSQL(f, window, baseline)
	r, err := q.CH.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("count errors: %w", err)
	}
	out := &diagnose.ErrorTypeCounts{Window: map[string]int{}, Baseline: map[string]int{}}
	for i := range r.Len() {
		row := r.Row(i)
		if n := int(row.Int("w")); n > 0 {
			out.Window[row.String("error_type")] = n
		}
		if n := int(row.Int("b")); n > 0 {
			out.Baseline[row.String("error_type")] = n
		}
	}
	return out, nil
}

// errorTypesSQL counts f's failed requests by error type in the window (w)
// and the baseline (b). It reads only failed rows and needs no FINAL: a
// live row counts +1 and a deleted one −1, as in the rollups
// (clickhouse.RequestSign), so a replaced version cancels exactly.
func errorTypesSQL(f RequestFilter, window, baseline diagnose.Range) (string, []any) {
	scope, args := f.scope()
	sign := clickhouse.RequestSign
	return "SELECT error_type, sumIf(" + sign + ", start >= ? AND start < ?) AS w, sumIf(" + sign + ", start >= ? AND start < ?) AS b" +
			" FROM llm_requests WHERE " + scope + " AND error = 1 AND start >= ? AND start < ? GROUP BY error_type",
		append(append([]any{window.From, window.To, baseline.From, baseline.To}, args...),
			telemetry.MinTime(window.From, baseline.From), telemetry.MaxTime(window.To, baseline.To))
}
