package analysis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/analysis/episode"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"golang.org/x/sync/errgroup"
)

// episodeMinutesSQL reads a project's rows of the per-minute rollup in
// [from, to) as stored, in minute order; requestMinutes sums them per
// service of either side.
func episodeMinutesSQL(project uint32, from, to time.Time) (string, []any) {
	return `SELECT ` + clickhouse.RollupMinutesColumns + ` FROM ` + clickhouse.EpisodeRollup + `
		WHERE project_id = ? AND minute >= ? AND minute < ? ORDER BY minute`, []any{project, from, to}
}

// waitingMinutesSQL reads the requests waiting on each service's servers
// per minute in [from, to): every instance's peak of the gauge in the
// minute, summed over the instances.
func waitingMinutesSQL(project uint32, from, to time.Time) (string, []any) {
	return `SELECT service, minute, sum(peak) AS waiting FROM (
			SELECT service, instance, toStartOfMinute(time) AS minute, max(value) AS peak FROM metric_points
			WHERE project_id = ? AND name = ? AND time >= ? AND time < ? AND isFinite(value)
			GROUP BY service, instance, minute)
		GROUP BY service, minute ORDER BY service, minute`, []any{project, diagnose.MetricRequestsWaiting, from, to}
}

// EpisodeMinutes reads every service's minutes in [from, to), in time
// order, with the requests waiting on its servers; a minute whose
// requests were all retracted is left out unless requests were waiting.
// A service with no request in the range is left out.
func (q *Queries) EpisodeMinutes(ctx context.Context, project uint32, from, to time.Time) (map[string][]episode.Minute, error) {
	// The two statements are independent: run side by side, the pass
	// waits for the slower one only (bench query --ops episodes).
	var out map[string][]episode.Minute
	var res *clickhouse.Result
	var g errgroup.Group
	g.Go(func() (err error) {
		out, err = q.requestMinutes(ctx, project, from, to)
		return err
	})
	g.Go(func() (err error) {
		sql, args := waitingMinutesSQL(project, from, to)
		if res, err = q.CH.Query(ctx, sql, args...); err != nil {
			return fmt.Errorf("episode minutes: waiting requests: %w", err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	waiting := map[string]map[time.Time]float64{}
	for i := range res.Len() {
		row := res.Row(i)
		name := row.String("service")
		if _, ok := out[name]; !ok {
			continue
		}
		if waiting[name] == nil {
			waiting[name] = map[time.Time]float64{}
		}
		waiting[name][row.Time("minute").UTC()] = row.Float("waiting")
	}
	for name, byMinute := range waiting {
		out[name] = withWaiting(out[name], byMinute)
	}
	return out, nil
}

// withWaiting sets each minute's Waiting from byMinute, adding a minute
// without requests where only the gauge has one; time order is kept.
func withWaiting(minutes []episode.Minute, byMinute map[time.Time]float64) []episode.Minute {
	for i := range minutes {
		if w, ok := byMinute[minutes[i].Start]; ok {
			minutes[i].Waiting = w
			delete(byMinute, minutes[i].Start)
		}
	}
	if len(byMinute) == 0 {
		return minutes
	}
	for t, w := range byMinute {
		minutes = append(minutes, episode.Minute{Start: t, Waiting: w})
	}
	slices.SortFunc(minutes, func(a, b episode.Minute) int { return a.Start.Compare(b.Start) })
	return minutes
}

func (q *Queries) requestMinutes(ctx context.Context, project uint32, from, to time.Time) (map[string][]episode.Minute, error) {
	sql, args := episodeMinutesSQL(project, from, to)
	rows, err := q.CH.QueryRollupMinutes(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("episode minutes: %w", err)
	}
	return sumMinutes(rows), nil
}

// sumMinutes sums rollup rows in minute order into each service's minutes,
// a service of either side (the app and its inference server each get
// the requests); a minute whose requests were all retracted is left out.
func sumMinutes(rows []clickhouse.RollupMinute) map[string][]episode.Minute {
	out := map[string][]episode.Minute{}
	values := clickhouse.HistValues()
	hist := func(counts []clickhouse.HistCount) episode.Histogram {
		h := make(episode.Histogram, len(counts))
		for i, b := range counts {
			h[i] = episode.Bucket{Value: values[uint16(b.Key)], Count: b.Count}
		}
		// The engine keeps a Map in key order and a value grows with its
		// key; rows that came otherwise are put in order all the same.
		if !slices.IsSortedFunc(h, func(a, b episode.Bucket) int { return cmp.Compare(a.Value, b.Value) }) {
			byValue := map[float64]int64{}
			for _, b := range h {
				byValue[b.Value] += b.Count
			}
			h = episode.HistogramOf(byValue)
		}
		return h
	}
	// into adds a row to name's minutes; Merge leaves its inputs as they
	// are, so the app and its server share a row's histograms.
	into := func(name string, r *clickhouse.RollupMinute, ttft, itl episode.Histogram) {
		minutes := out[name]
		if n := len(minutes); n > 0 && minutes[n-1].Start.Equal(r.Minute) {
			m := &minutes[n-1]
			m.Requests += r.Requests
			m.Errors += r.Errors
			m.TTFT, m.ITL = m.TTFT.Merge(ttft), m.ITL.Merge(itl)
			return
		}
		out[name] = append(minutes, episode.Minute{Start: r.Minute, Requests: r.Requests, Errors: r.Errors, TTFT: ttft, ITL: itl})
	}
	for i := range rows {
		r := &rows[i]
		ttft, itl := hist(r.TTFT), hist(r.ITL)
		if r.Service != "" {
			into(r.Service, r, ttft, itl)
		}
		if r.ServerService != "" && r.ServerService != r.Service {
			into(r.ServerService, r, ttft, itl)
		}
	}
	for name, minutes := range out {
		kept := minutes[:0]
		for _, m := range minutes {
			if m.Requests > 0 {
				kept = append(kept, m)
			}
		}
		if len(kept) == 0 {
			delete(out, name)
		} else {
			out[name] = kept
		}
	}
	return out
}
