package episode

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestWindowMedianMAD holds the rolling window's median and MAD, kept
// without sorting, to the textbook ones over the same latest values:
// sort, take the median, sort the absolute deviations, take theirs.
func TestWindowMedianMAD(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 15, 60} {
		w := window{n: n}
		var all []float64
		for i := range 500 {
			v := math.Round(rng.NormFloat64()*10) / 4 // ties and repeats
			if i%7 == 0 {
				v = rng.ExpFloat64() * 100
			}
			w.push(v)
			all = append(all, v)
			latest := slices.Clone(all[max(0, len(all)-n):])
			slices.Sort(latest)
			med := median(latest)
			for j, x := range latest {
				latest[j] = math.Abs(x - med)
			}
			slices.Sort(latest)
			gotMed, gotMAD := w.medianMAD()
			if gotMed != med || gotMAD != 1.4826*median(latest) || w.len() != min(len(all), n) {
				t.Fatalf("n=%d after %d values: median, MAD = %v, %v; want %v, %v", n, i+1, gotMed, gotMAD, med, 1.4826*median(latest))
			}
		}
	}
}

// TestHistogramQuantileNearestRank holds Quantile to the nearest-rank
// quantile of the values the histogram counts, written out one by one,
// over random histograms (zero and negative counts count nothing).
func TestHistogramQuantileNearestRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		counts := map[float64]int64{}
		var values []float64
		for range 1 + rng.IntN(150) {
			v := math.Exp(float64(rng.IntN(200)) / 10)
			c := int64(rng.IntN(40)) - 5
			counts[v] += c
		}
		h := HistogramOf(counts)
		for v, c := range counts {
			for range max(c, 0) {
				values = append(values, v)
			}
		}
		slices.Sort(values)
		for _, q := range []float64{0, 0.5, 0.95, 0.99, 1} {
			want := math.NaN()
			if len(values) > 0 {
				want = values[min(max(int(math.Ceil(q*float64(len(values)))), 1), len(values))-1]
			}
			if got := h.Quantile(q); got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("histogram %d, q=%v: got %v, want %v", i, q, got, want)
			}
			// Quantiles reads two in one walk, in either order.
			p95, got := h.Quantiles(0.95, q)
			if (p95 != h.Quantile(0.95) && !math.IsNaN(p95)) || (got != want && !(math.IsNaN(got) && math.IsNaN(want))) {
				t.Fatalf("histogram %d, Quantiles(0.95, %v) = %v, %v; want %v, %v", i, q, p95, got, h.Quantile(0.95), want)
			}
		}
	}
}

// TestHistogramMerge holds Merge to adding counts value by value, over
// random histograms that share some values.
func TestHistogramMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 500 {
		a, b, sum := map[float64]int64{}, map[float64]int64{}, map[float64]int64{}
		for _, m := range []map[float64]int64{a, b} {
			for range rng.IntN(40) {
				v, c := float64(rng.IntN(60)), int64(rng.IntN(9))-2
				m[v] += c
				sum[v] += c
			}
		}
		got := HistogramOf(a).Merge(HistogramOf(b))
		if want := HistogramOf(sum); !slices.Equal(got, want) {
			t.Fatalf("merge %d: got %v, want %v", i, got, want)
		}
	}
}

// TestPooledChance holds the Poisson tail of the pooled error rate to
// values computed apart: 10 or more errors where 3.33 are expected, and a
// count far out where the terms would underflow without logs.
func TestPooledChance(t *testing.T) {
	w := pooled{n: 3}
	w.push(1000, 90) // pushed out by the next three
	for range 3 {
		w.push(1000, 45)
	}
	if w.requests != 3000 || w.errors != 135 {
		t.Fatalf("pooled %d errors of %d requests, want 135 of 3000", w.errors, w.requests)
	}
	for _, c := range []struct {
		requests, errors int64
		want             float64
	}{
		{74, 10, 0.0023398},     // 4.5 % of 74 = 3.33 expected
		{74, 3, 0.64656},        // about as expected: likely
		{20000, 1000, 5.499e-4}, // 900 expected
	} {
		if got := w.chance(c.requests, c.errors); math.Abs(got-c.want) > 1e-3*c.want+1e-7 {
			t.Errorf("chance(%d errors of %d) = %.6g, want %.6g", c.errors, c.requests, got, c.want)
		}
	}
}
