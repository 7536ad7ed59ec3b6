package analysis

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
)

// A histogram's quantiles are within ±2.5 % of the exact type-7 ones, for
// one value, a few, many, and after retractions (negative counts that
// cancel earlier ones); empty gives NaN.
func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	qs := []float64{0, 0.01, 0.5, 0.9, 0.95, 0.99, 1}
	for _, n := range []int{1, 2, 3, 17, 1000, 20000} {
		var values, keys, counts []float64
		for range n {
			v := r.ExpFloat64() * 300
			if r.IntN(20) == 0 {
				v = 0
			}
			values = append(values, v)
			keys, counts = append(keys, float64(clickhouse.HistKey(v))), append(counts, 1)
			// A value added and retracted again leaves no trace.
			w := r.Float64() * 1e4
			keys, counts = append(keys, float64(clickhouse.HistKey(w)), float64(clickhouse.HistKey(w))), append(counts, 1, -1)
		}
		got := binsOf(keys, counts).quantiles(qs...)
		for i, q := range qs {
			want := stats.Quantile(values, q)
			if math.Abs(got[i]-want) > 0.025*want+1e-9 {
				t.Errorf("%d values: q%v %v, want %v (±2.5 %%)", n, q, got[i], want)
			}
		}
	}
	if got := (bins{}).quantiles(0.5); !math.IsNaN(got[0]) {
		t.Errorf("empty histogram: %v, want NaN", got)
	}
}

// A histogram read as key and count arrays (as the engine returns it:
// keys ascending, or not, a key split over entries, retracted keys) gives
// the same quantiles as one entry per key in key order.
func TestBinsOfMatchHistogram(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	qs := []float64{0, 0.5, 0.95, 0.99, 1}
	for _, n := range []int{0, 1, 5, 300} {
		h := map[int]int64{}
		var keys, counts []float64
		for range n {
			k := float64(clickhouse.HistKey(r.ExpFloat64() * 300))
			c := float64(1 + r.IntN(3))
			h[int(k)] += int64(c)
			keys, counts = append(keys, k), append(counts, c)
		}
		h[-7] += 0 // retracted to nothing
		keys, counts = append(keys, -7), append(counts, 0)
		// As the engine sends it: one entry per key, ascending.
		var sortedKeys []int
		for k := range h {
			sortedKeys = append(sortedKeys, k)
		}
		slices.Sort(sortedKeys)
		var ks, cs []float64
		for _, k := range sortedKeys {
			ks, cs = append(ks, float64(k)), append(cs, float64(h[k]))
		}
		want := binsOf(ks, cs).quantiles(qs...)
		got := binsOf(keys, counts).quantiles(qs...)
		for i := range qs {
			if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
				t.Errorf("%d values, q%v: unsorted entries %v, one per key %v", n, qs[i], got[i], want[i])
			}
		}
	}
}

// A rollup read of an empty window (or one with buckets the tiers do not
// tile) is still one valid statement; the engine answers it with nothing.
func TestRollupReadOfNothing(t *testing.T) {
	a := storetest.Open(t)
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, w := range []diagnose.Range{{From: now, To: now}, {From: now, To: now.Add(-time.Hour)}} {
		sql, args := seriesRollupRead(1, w, 5*time.Minute, "", "").sql()
		r, err := a.CH.Query(context.Background(), sql, args...)
		if err != nil || r.Len() != 0 {
			t.Errorf("window %v: %v rows, error %v", w, r, err)
		}
	}
}
