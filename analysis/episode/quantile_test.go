package episode_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tokenpath/tokenpath/analysis/episode"
)

// TestHistogramQuantileNearestRank holds Quantile to the nearest-rank
// quantile of the values the histogram counts, written out one by one,
// over random histograms (zero and negative counts count nothing).
func TestHistogramQuantileNearestRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		h := episode.Histogram{}
		var values []float64
		for range 1 + rng.IntN(150) {
			v := math.Exp(float64(rng.IntN(200)) / 10)
			c := int64(rng.IntN(40)) - 5
			h[v] += c
		}
		for v, c := range h {
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
		}
	}
}
