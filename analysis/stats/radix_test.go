package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The radix sort orders exactly as comparison sorting does, for every kind
// of float a column holds: negatives, zeros of both signs, subnormals,
// infinities, repeats, and runs sharing most of their bytes.
func TestSortFloatsMatchesSlicesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func() float64{
		"latencies": func() float64 { return math.Round(r.ExpFloat64()*300*1000) / 1000 },
		"signed":    func() float64 { return r.NormFloat64() * 1e6 },
		"integers":  func() float64 { return float64(r.IntN(50)) },
		"extremes": func() float64 {
			return []float64{math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), math.SmallestNonzeroFloat64,
				-math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64, 1, -1}[r.IntN(10)]
		},
		"constant": func() float64 { return 42.5 },
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, radixMin - 1, radixMin, 5000} {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = gen()
			}
			want := slices.Clone(xs)
			slices.Sort(want)
			got := slices.Clone(xs)
			sortFloats(got)
			for i := range want {
				// == treats -0 and +0 alike, as slices.Sort does.
				if got[i] != want[i] {
					t.Fatalf("%s, n=%d: position %d is %v, want %v", name, n, i, got[i], want[i])
				}
			}
			if !slices.IsSorted(got) {
				t.Fatalf("%s, n=%d: not sorted", name, n)
			}
		}
	}
}

// BenchmarkSort compares the radix sort with slices.Sort on a diagnosis
// column (30k exponential latencies).
func BenchmarkSort(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	xs := make([]float64, 30_000)
	for i := range xs {
		xs[i] = math.Round(r.ExpFloat64()*300*1000) / 1000
	}
	buf := make([]float64, len(xs))
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			copy(buf, xs)
			sortFloats(buf)
		}
	})
	b.Run("slices.Sort", func(b *testing.B) {
		for b.Loop() {
			copy(buf, xs)
			slices.Sort(buf)
		}
	})
}
