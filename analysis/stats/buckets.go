package stats

import (
	"math"
	"sort"
)

// Buckets is a bucketed distribution as inference servers export it:
// Bounds are the finite upper bounds, ascending; Counts holds
// len(Bounds)+1 per-bucket counts, the last one for (Bounds[n-1], +Inf).
type Buckets struct {
	Bounds []float64
	Counts []float64
}

// Total is the number of observations.
func (b Buckets) Total() float64 {
	var n float64
	for _, c := range b.Counts {
		n += c
	}
	return n
}

// Add adds o's counts to b when both have the same bounds; ok is false
// (b unchanged) when they differ.
func (b *Buckets) Add(o Buckets) (ok bool) {
	if len(b.Counts) == 0 && len(b.Bounds) == 0 {
		b.Bounds = append([]float64(nil), o.Bounds...)
		b.Counts = append([]float64(nil), o.Counts...)
		return true
	}
	if len(o.Bounds) != len(b.Bounds) || len(o.Counts) != len(b.Counts) {
		return false
	}
	for i, v := range o.Bounds {
		if b.Bounds[i] != v {
			return false
		}
	}
	for i, c := range o.Counts {
		b.Counts[i] += c
	}
	return true
}

// Quantile interpolates the q-quantile linearly within its bucket, as
// Prometheus' histogram_quantile does (promql/quantile.go, bucketQuantile):
// the first bucket starts at 0 unless its bound is ≤ 0 (then the bound is
// the answer); a rank in the +Inf bucket answers the highest finite bound.
// NaN when there are no observations or no finite bound.
func (b Buckets) Quantile(q float64) float64 {
	switch {
	case math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(1)
	}
	if len(b.Bounds) == 0 || len(b.Counts) != len(b.Bounds)+1 {
		return math.NaN()
	}
	cum := make([]float64, len(b.Counts))
	var c float64
	for i, n := range b.Counts {
		c += n
		cum[i] = c
	}
	total := cum[len(cum)-1]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.SearchFloat64s(cum[:len(cum)-1], rank)
	if i == len(b.Bounds) {
		return b.Bounds[len(b.Bounds)-1]
	}
	if i == 0 && b.Bounds[0] <= 0 {
		return b.Bounds[0]
	}
	start, end, count := 0.0, b.Bounds[i], cum[i]
	if i > 0 {
		start = b.Bounds[i-1]
		count -= cum[i-1]
		rank -= cum[i-1]
	}
	return start + (end-start)*(rank/count)
}

// Resolution is the width of the bucket that holds the q-quantile: how far
// the interpolated answer may be from the exact one. +Inf when it falls in
// the +Inf bucket, NaN when there is nothing.
func (b Buckets) Resolution(q float64) float64 {
	if len(b.Bounds) == 0 || len(b.Counts) != len(b.Bounds)+1 || b.Total() <= 0 || q < 0 || q > 1 {
		return math.NaN()
	}
	rank, c := q*b.Total(), 0.0
	for i, n := range b.Counts[:len(b.Bounds)] {
		c += n
		if c >= rank {
			if i == 0 {
				return math.Max(b.Bounds[0], 0)
			}
			return b.Bounds[i] - b.Bounds[i-1]
		}
	}
	return math.Inf(1)
}
