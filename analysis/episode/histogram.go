package episode

import (
	"cmp"
	"math"
	"slices"
)

// Histogram counts a minute's requests by value (ms): one Bucket a value,
// in increasing value order. The per-minute rollup keeps its histograms
// in key order, so a minute is read and summed without a map: building
// them in maps was most of a detection pass (bench query --ops episodes).
type Histogram []Bucket

// Bucket is one value of a Histogram and how many requests had it; a
// count of zero or less counts nothing (a retracted request is -1 until
// the rollup merges it away).
type Bucket struct {
	Value float64
	Count int64
}

// HistogramOf builds a Histogram from counts by value.
func HistogramOf(counts map[float64]int64) Histogram {
	h := make(Histogram, 0, len(counts))
	for v, c := range counts {
		h = append(h, Bucket{v, c})
	}
	slices.SortFunc(h, func(a, b Bucket) int { return cmp.Compare(a.Value, b.Value) })
	return h
}

// Merge returns the sum of h and o, both in value order, as a new
// Histogram.
func (h Histogram) Merge(o Histogram) Histogram {
	out := make(Histogram, 0, len(h)+len(o))
	i, j := 0, 0
	for i < len(h) && j < len(o) {
		switch a, b := h[i], o[j]; {
		case a.Value < b.Value:
			out = append(out, a)
			i++
		case a.Value > b.Value:
			out = append(out, b)
			j++
		default:
			out = append(out, Bucket{a.Value, a.Count + b.Count})
			i, j = i+1, j+1
		}
	}
	out = append(out, h[i:]...)
	return append(out, o[j:]...)
}

// Quantile is the nearest-rank q-quantile of the counted values; NaN when
// the histogram counts nothing.
func (h Histogram) Quantile(q float64) float64 {
	v, _ := h.Quantiles(q, q)
	return v
}

// Quantiles is Quantile at q1 and q2 in one walk: the detector reads a
// minute's ITL p95 and median (bench query --ops episodes).
func (h Histogram) Quantiles(q1, q2 float64) (float64, float64) {
	var n int64
	for _, b := range h {
		if b.Count > 0 {
			n += b.Count
		}
	}
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	rank := func(q float64) int64 { return min(max(int64(math.Ceil(q*float64(n))), 1), n) }
	r1, r2 := rank(q1), rank(q2)
	v1, v2 := math.NaN(), math.NaN()
	var seen int64
	for _, b := range h {
		if b.Count <= 0 {
			continue
		}
		seen += b.Count
		if math.IsNaN(v1) && r1 <= seen {
			v1 = b.Value
		}
		if math.IsNaN(v2) && r2 <= seen {
			v2 = b.Value
		}
		if !math.IsNaN(v1) && !math.IsNaN(v2) {
			break
		}
	}
	return v1, v2 // both set: the ranks add up to n
}

// window is the latest n values of one signal, kept in arrival order and
// sorted, so its median and MAD are read every minute without sorting
// (bench query --ops episodes).
type window struct {
	n            int
	fifo, sorted []float64
	deviations   []float64 // medianMAD's working buffer
}

func (w *window) len() int { return len(w.fifo) }

func (w *window) push(v float64) {
	w.fifo = append(w.fifo, v)
	if len(w.fifo) > w.n {
		i, _ := slices.BinarySearch(w.sorted, w.fifo[0])
		w.sorted = slices.Delete(w.sorted, i, i+1)
		w.fifo = w.fifo[1:]
	}
	i, _ := slices.BinarySearch(w.sorted, v)
	w.sorted = slices.Insert(w.sorted, i, v)
}

// medianMAD is the median and the MAD scaled to a standard deviation
// (×1.4826, exact for a normal distribution). The absolute deviations come
// out sorted by walking outwards from the median.
func (w *window) medianMAD() (float64, float64) {
	s := w.sorted
	med := median(s)
	k, _ := slices.BinarySearch(s, med) // s[:k] below the median
	dev := w.deviations[:0]
	lo, hi := k-1, k
	for lo >= 0 || hi < len(s) {
		if hi >= len(s) || (lo >= 0 && med-s[lo] <= s[hi]-med) {
			dev = append(dev, med-s[lo])
			lo--
		} else {
			dev = append(dev, s[hi]-med)
			hi++
		}
	}
	w.deviations = dev
	return med, 1.4826 * median(dev)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
