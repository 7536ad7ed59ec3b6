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

// Ranks (ordered by the radix sort above radixMin) equals ranks from a
// plain comparison sort: ties share their mean rank, NaN keeps NaN.
func TestRanksMatchComparisonSort(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for name, gen := range map[string]func() float64{
		"latencies": func() float64 { return math.Round(r.ExpFloat64()*300*10) / 10 },
		"tokens":    func() float64 { return float64(r.IntN(4000)) },
		"signed":    func() float64 { return r.NormFloat64() },
		"zeros":     func() float64 { return []float64{0, math.Copysign(0, -1), 1}[r.IntN(3)] },
		"with NaN": func() float64 {
			if r.IntN(5) == 0 {
				return math.NaN()
			}
			return float64(r.IntN(100))
		},
	} {
		for _, n := range []int{0, 1, radixMin - 1, radixMin, 20_000} {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = gen()
			}
			got, want := Ranks(xs), plainRanks(xs)
			for i := range want {
				if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
					t.Fatalf("%s, n=%d: rank of %v at %d is %v, want %v", name, n, xs[i], i, got[i], want[i])
				}
			}
		}
	}
}

// plainRanks is Ranks by definition: a value's rank is 1 + the number of
// smaller values + (the number of other equal values) / 2.
func plainRanks(xs []float64) []float64 {
	vals := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			vals = append(vals, x)
		}
	}
	slices.Sort(vals)
	out := make([]float64, len(xs))
	for i, x := range xs {
		if math.IsNaN(x) {
			out[i] = math.NaN()
			continue
		}
		lo, _ := slices.BinarySearch(vals, x)
		hi := lo
		for hi < len(vals) && vals[hi] == x {
			hi++
		}
		out[i] = float64(lo+1+hi) / 2
	}
	return out
}

func BenchmarkRanks(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	xs := make([]float64, 20_000)
	for i := range xs {
		xs[i] = math.Round(r.ExpFloat64()*300*1000) / 1000
	}
	for b.Loop() {
		Ranks(xs)
	}
}
