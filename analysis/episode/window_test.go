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
