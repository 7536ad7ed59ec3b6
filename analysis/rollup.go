package analysis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// Windows whose chart buckets are 5 minutes or wider can read their series
// and overview from the rollups (migration 0011, store/clickhouse/rollup.go):
// every request counted, percentiles within ±2.5 %, for a few thousand
// rollup rows instead of every request under FINAL. Such a read covers the
// window widened to whole 5 minutes (rollupWindow): reading the ragged
// ends from llm_requests instead cost more than the rest of the read (a
// minute of 10M requests over a week: ~60 ms of CPU under FINAL, since
// start is not the sorting key's first column), and a window ending now
// loses nothing by it.

// bins are a histogram of log-scale bucket keys (clickhouse.HistKey) as
// key and count lists.
type bins struct {
	keys   []int
	counts []int64
}

// binsOf reads a histogram the engine returned as key and count arrays.
func binsOf(keys, counts []float64) bins {
	b := bins{keys: make([]int, 0, len(keys)), counts: make([]int64, 0, len(keys))}
	for i, k := range keys {
		if i < len(counts) {
			b.keys, b.counts = append(b.keys, int(k)), append(b.counts, int64(counts[i]))
		}
	}
	return b.sorted()
}

// sorted returns the bins in key order with one count per key; sumMap's
// keys arrive so already, and then nothing is done.
func (b bins) sorted() bins {
	for i := 1; i < len(b.keys); i++ {
		if b.keys[i] <= b.keys[i-1] {
			h := map[int]int64{}
			for j, k := range b.keys {
				h[k] += b.counts[j]
			}
			out := bins{keys: make([]int, 0, len(h)), counts: make([]int64, 0, len(h))}
			for k := range h {
				out.keys = append(out.keys, k)
			}
			slices.Sort(out.keys)
			for _, k := range out.keys {
				out.counts = append(out.counts, h[k])
			}
			return out
		}
	}
	return b
}

// quantiles are the type-7 quantiles (as stats.Quantile) of the values
// sorted bins count (buckets retracted to nothing or below are skipped),
// each read as its bucket's middle; NaN when they count nothing.
func (b bins) quantiles(qs ...float64) []float64 {
	var total int64
	for _, n := range b.counts {
		total += max(n, 0)
	}
	// at is the value of the rank-th smallest (0-based) value.
	at := func(rank int64) float64 {
		last := 0
		for i, n := range b.counts {
			if n <= 0 {
				continue
			}
			if rank < n {
				return clickhouse.HistValue(b.keys[i])
			}
			rank -= n
			last = i
		}
		return clickhouse.HistValue(b.keys[last])
	}
	out := make([]float64, len(qs))
	for i, q := range qs {
		if total == 0 {
			out[i] = math.NaN()
			continue
		}
		pos := q * float64(total-1)
		lo := int64(math.Floor(pos))
		v := at(lo)
		if frac := pos - float64(lo); frac > 0 {
			v += frac * (at(lo+1) - v)
		}
		out[i] = v
	}
	return out
}

// rollupSegment is a stretch of a window read from one rollup tier.
type rollupSegment struct {
	from, to time.Time
	tier     *clickhouse.RollupTier
}

// rollupGrain is the narrowest tier's width: what rollup reads align to.
var rollupGrain = clickhouse.RollupTiers[len(clickhouse.RollupTiers)-1].Width

// rollupServes reports whether a chart of buckets this wide can be read
// from the rollups: the narrowest tier must tile its buckets.
func rollupServes(width time.Duration) bool {
	return width > 0 && width%rollupGrain == 0
}

// rollupWindow is the window a rollup read covers: w widened to whole
// rollupGrain (the first bucket gains at most 5 earlier minutes; the last
// holds what arrived up to the end of its 5 minutes, nothing more when the
// window ends now).
func rollupWindow(w diagnose.Range) diagnose.Range {
	return diagnose.Range{From: w.From.Truncate(rollupGrain), To: ceilTime(w.To, rollupGrain)}
}

// rollupSegments cuts a grain-aligned [from, to) into stretches read from
// the widest tiers that tile buckets of width.
func rollupSegments(from, to time.Time, width time.Duration, tiers []clickhouse.RollupTier) []rollupSegment {
	if !from.Before(to) {
		return nil
	}
	for i := range tiers {
		t := &tiers[i]
		if width%t.Width != 0 {
			continue
		}
		a, b := ceilTime(from, t.Width), to.Truncate(t.Width)
		if !a.Before(b) {
			continue
		}
		out := rollupSegments(from, a, width, tiers[i+1:])
		out = append(out, rollupSegment{a, b, t})
		return append(out, rollupSegments(b, to, width, tiers[i+1:])...)
	}
	return nil // only when from and to are not aligned to the grain
}

func ceilTime(t time.Time, d time.Duration) time.Time {
	if f := t.Truncate(d); !f.Equal(t) {
		return f.Add(d)
	}
	return t
}

// rollupRead is what a rollup read selects: the window's requests (of a
// service, either side, and a model when set) grouped by groupBy (aliases
// of the select list: b is the chart bucket, name a service of either
// side when nameJoin is set), with the rollup sums, the histograms of
// hists, and extra aggregates.
type rollupRead struct {
	project        uint32
	window         diagnose.Range
	width          time.Duration
	service, model string
	hists          []string // llm_requests columns whose histograms are read
	nameJoin       bool
	groupBy        []string
	extra          string
}

// sql unions the window's segments (each grouped by rollup group and
// bucket) and merges them in the engine: sumMap is far cheaper there than
// maps merged in Go.
func (r rollupRead) sql() (string, []any) {
	secs := max(int64(r.width/time.Second), 1)
	scope, sargs := RequestFilter{Project: r.project, Service: r.service, Model: r.model}.scope()
	// Each segment's rows as stored (merging them per segment first would
	// run every sumMap twice).
	values := slices.Clone(clickhouse.RollupSums)
	for _, h := range r.hists {
		values = append(values, "h_"+h)
	}
	var parts []string
	var args []any
	w := rollupWindow(r.window)
	segments := rollupSegments(w.From, w.To, r.width, clickhouse.RollupTiers)
	if len(segments) == 0 { // an empty window: a read of nothing, still valid SQL
		segments = []rollupSegment{{w.From, w.From, &clickhouse.RollupTiers[len(clickhouse.RollupTiers)-1]}}
	}
	for _, s := range segments {
		parts = append(parts, fmt.Sprintf("SELECT service, server_service, model, provider, toStartOfInterval(%[1]s, INTERVAL %[2]d SECOND) AS b, %[3]s FROM %[4]s WHERE %[5]s AND %[1]s >= ? AND %[1]s < ?",
			s.tier.Column, secs, strings.Join(values, ", "), s.tier.Table, scope))
		args = append(append(args, sargs...), s.from, s.to)
	}
	join := ""
	if r.nameJoin {
		join = " ARRAY JOIN " + serviceNames
	}
	inner := "SELECT " + strings.Join(r.groupBy, ", ") + ", " + clickhouse.RollupMerge(r.hists) + r.extra +
		" FROM (" + strings.Join(parts, " UNION ALL ") + ")" + join + " GROUP BY " + strings.Join(r.groupBy, ", ")
	// The maps leave the engine as two arrays each (keys, counts).
	cols, maps := []string{"*"}, make([]string, 0, len(r.hists))
	for _, h := range r.hists {
		cols = append(cols, fmt.Sprintf("CAST(mapKeys(h_%[1]s), 'Array(Float64)') AS hk_%[1]s, CAST(mapValues(h_%[1]s), 'Array(Float64)') AS hv_%[1]s", h))
		maps = append(maps, "h_"+h)
	}
	if len(maps) > 0 {
		cols[0] = "* EXCEPT (" + strings.Join(maps, ", ") + ")"
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM (" + inner + ")" + FinalSettings, args
}

// rollupHist is a histogram read by a rollupRead.
func rollupHist(row clickhouse.Row, col string) bins {
	return binsOf(row.Floats("hk_"+col), row.Floats("hv_"+col))
}

// componentColumn is the llm_requests column of a diagnosis component.
func componentColumn(c string) string { return c + "_ms" }

func seriesRollupRead(project uint32, window diagnose.Range, width time.Duration, service, model string) rollupRead {
	hists := make([]string, len(diagnose.Components))
	for i, c := range diagnose.Components {
		hists[i] = componentColumn(c)
	}
	return rollupRead{project: project, window: window, width: width, service: service, model: model, hists: hists, groupBy: []string{"b"}}
}

// rollupBuckets computes the chart series of a window from the rollups:
// the same figures as requestBuckets, over every request, with
// percentiles within ±2.5 %.
func (q *Queries) rollupBuckets(ctx context.Context, project uint32, window diagnose.Range, width time.Duration, service, model string) ([]diagnose.Bucket, error) {
	sql, args := seriesRollupRead(project, window, width, service, model).sql()
	res, err := q.CH.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("series from rollups: %w", err)
	}
	out := make([]diagnose.Bucket, 0, res.Len())
	for i := range res.Len() {
		row := res.Row(i)
		n := row.Int("requests")
		if n <= 0 {
			continue // every request of the bucket was retracted
		}
		out = append(out, newBucket(row.Time("b"), n, width, row.Int("input_tokens_sum"), row.Int("output_tokens_sum"),
			row.Int("cold_starts"), row.Int("errors"), func(c string) []float64 {
				return rollupHist(row, componentColumn(c)).quantiles(0.5, 0.95, 0.99)
			}))
	}
	slices.SortFunc(out, func(a, b diagnose.Bucket) int { return a.Start.Compare(b.Start) })
	return out, nil
}
