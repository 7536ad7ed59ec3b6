// Package stats holds the small, allocation-light statistics the analysis
// pages need: quantiles read at p50/p95/p99, means, shares and rank or
// linear correlation (with a lag search over time buckets). Every function
// ignores NaN, which the callers use for "unknown", so a missing value never
// drags a figure towards zero.
package stats

import (
	"math"
)

// Quantile returns the q-quantile (q in 0..1) of xs, interpolating linearly
// between the closest ranks (the "type 7" definition of R and NumPy). NaN
// values are ignored; the result is NaN when no value is left or q is out of
// range. xs is not modified.
func Quantile(xs []float64, q float64) float64 {
	return Sort(xs).Quantile(q)
}

// Quantiles returns one quantile per q, sorting xs (a copy, NaN dropped)
// only once.
func Quantiles(xs []float64, qs ...float64) []float64 {
	sorted := Sort(xs)
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = sorted.Quantile(q)
	}
	return out
}

// Sorted is a sample sorted ascending with NaN removed: sort once, then read
// as many quantiles as needed (a page reads p50/p95/p99 and intervals of the
// same column).
type Sorted []float64

// Sort returns a sorted copy of xs without NaN values.
func Sort(xs []float64) Sorted {
	s := finite(xs)
	sortFloats(s)
	return s
}

// Quantile is the package Quantile over an already sorted sample.
func (s Sorted) Quantile(q float64) float64 {
	if len(s) == 0 || math.IsNaN(q) || q < 0 || q > 1 {
		return math.NaN()
	}
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi {
		return s[lo]
	}
	frac := pos - float64(lo)
	return s[lo] + frac*(s[hi]-s[lo])
}

// Summary returns p50, p95 and p99 of the sample.
func (s Sorted) Summary() Summary {
	return Summary{P50: s.Quantile(0.50), P95: s.Quantile(0.95), P99: s.Quantile(0.99), N: len(s)}
}

// Summary is the p50/p95/p99 read of a sample: latency is read at the tail,
// never at the average.
type Summary struct {
	P50, P95, P99 float64
	N             int // values that were not NaN
}

// Summarize returns p50, p95 and p99 of xs (NaN when xs has no value).
func Summarize(xs []float64) Summary {
	return Sort(xs).Summary()
}

// Count returns how many values of xs are not NaN.
func Count(xs []float64) int {
	n := 0
	for _, x := range xs {
		if !math.IsNaN(x) {
			n++
		}
	}
	return n
}

// Mean returns the arithmetic mean of the non-NaN values of xs, NaN when
// there is none.
func Mean(xs []float64) float64 {
	sum, n := 0.0, 0
	for _, x := range xs {
		if !math.IsNaN(x) {
			sum += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// Sum returns the sum of the non-NaN values of xs (0 when there is none).
func Sum(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		if !math.IsNaN(x) {
			sum += x
		}
	}
	return sum
}

// Max returns the largest non-NaN value of xs, NaN when there is none.
func Max(xs []float64) float64 {
	m := math.NaN()
	for _, x := range xs {
		if !math.IsNaN(x) && (math.IsNaN(m) || x > m) {
			m = x
		}
	}
	return m
}

// Min returns the smallest non-NaN value of xs, NaN when there is none.
func Min(xs []float64) float64 {
	m := math.NaN()
	for _, x := range xs {
		if !math.IsNaN(x) && (math.IsNaN(m) || x < m) {
			m = x
		}
	}
	return m
}

// Share returns part/whole, or 0 when whole is 0: an empty group holds a
// zero share of anything.
func Share(part, whole int) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// TwoProportionZ is the z statistic of the difference between the shares
// a/n1 and b/n2, with the pooled share's standard error: how many standard
// errors a/n1 lies above b/n2. It is 0 when either group is empty or the
// pooled share is 0 or 1 (no spread to measure against).
func TwoProportionZ(a, n1, b, n2 int) float64 {
	if n1 == 0 || n2 == 0 {
		return 0
	}
	p := float64(a+b) / float64(n1+n2)
	se := math.Sqrt(p * (1 - p) * (1/float64(n1) + 1/float64(n2)))
	if se == 0 {
		return 0
	}
	return (float64(a)/float64(n1) - float64(b)/float64(n2)) / se
}

// Shares turns counts into shares of their total (all 0 when the total is 0).
func Shares[K comparable](counts map[K]int) map[K]float64 {
	total := 0
	for _, c := range counts {
		total += c
	}
	out := make(map[K]float64, len(counts))
	for k, c := range counts {
		out[k] = Share(c, total)
	}
	return out
}

// Ratio returns a/b, NaN when b is 0 or either is NaN.
func Ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// finite returns a copy of xs without NaN values.
func finite(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// QuantileCI returns a distribution-free confidence interval for the
// q-quantile of xs: the order statistics whose ranks lie z binomial
// standard errors either side of n·q (z = 1.645 for ~90 %, 1.96 for ~95 %).
// It needs no assumption about the latency distribution, and with few
// values it widens towards the extremes, which is the point: a p95 of 60
// requests is a rough figure. NaN values are ignored; (NaN, NaN) when none
// is left.
func QuantileCI(xs []float64, q, z float64) (lo, hi float64) {
	return Sort(xs).QuantileCI(q, z)
}

// QuantileCI is the package QuantileCI over an already sorted sample.
func (s Sorted) QuantileCI(q, z float64) (lo, hi float64) {
	n := len(s)
	if n == 0 || q < 0 || q > 1 {
		return math.NaN(), math.NaN()
	}
	center := float64(n) * q
	half := z * math.Sqrt(float64(n)*q*(1-q))
	loRank := max(0, min(n-1, int(math.Floor(center-half))))
	hiRank := max(0, min(n-1, int(math.Ceil(center+half))))
	return s[loRank], s[hiRank]
}
