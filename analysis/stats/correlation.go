package stats

import (
	"math"
)

// MinLagPairs is the fewest non-NaN pairs LagCorrelation accepts at a lag:
// below that a coefficient over time buckets is noise.
const MinLagPairs = 5

// Pearson returns the linear correlation of x and y over the pairs where
// both are non-NaN (pairwise deletion; extra values of the longer slice are
// ignored). It is NaN with fewer than two pairs or when either side is
// constant.
func Pearson(x, y []float64) float64 {
	px, py := pairs(x, y)
	return pearson(px, py)
}

func pearson(x, y []float64) float64 {
	n := len(x)
	if n < 2 {
		return math.NaN()
	}
	mx, my := Mean(x), Mean(y)
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	r := sxy / math.Sqrt(sxx*syy)
	// Rounding can push a perfect fit a hair past ±1.
	return math.Max(-1, math.Min(1, r))
}

// Spearman returns the rank correlation of x and y (Pearson over ranks, tied
// values sharing their average rank) over the pairs where both are non-NaN.
// It is 1 for any strictly increasing relation, linear or not.
func Spearman(x, y []float64) float64 {
	px, py := pairs(x, y)
	if len(px) < 2 {
		return math.NaN()
	}
	return pearson(Ranks(px), Ranks(py))
}

// Ranks returns the 1-based rank of every value of xs; tied values share the
// average of the ranks they span, NaN values keep a NaN rank and take no
// rank from the others.
func Ranks(xs []float64) []float64 {
	// Ties share a mean rank, so the sort need not be stable.
	order := sortedOrder(xs)
	ranks := make([]float64, len(xs))
	for i := range ranks {
		ranks[i] = math.NaN()
	}
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && xs[order[end]] == xs[order[start]] {
			end++
		}
		// Ranks start+1 … end share their mean.
		avg := float64(start+1+end) / 2
		for k := start; k < end; k++ {
			ranks[order[k]] = avg
		}
		start = end
	}
	return ranks
}

// LagCorrelation searches lags −maxLag … maxLag for the strongest Pearson
// correlation between two aligned bucket series and returns it with its lag.
// A positive lag pairs x[i] with y[i+lag]: x leads y (KV cache fills, then
// TTFT rises). NaN buckets are skipped pairwise; a lag with fewer than
// MinLagPairs pairs is not considered, and when no lag qualifies the result
// is (NaN, 0). Among equally strong lags the smallest |lag| wins, so an
// in-step relation is preferred over a shifted one.
func LagCorrelation(x, y []float64, maxLag int) (r float64, lag int) {
	return LagCorrelationFunc(x, y, maxLag, Pearson)
}

// LagCorrelationFunc is LagCorrelation with another coefficient, e.g.
// Spearman for relations that are monotone but not linear.
func LagCorrelationFunc(x, y []float64, maxLag int, corr func(x, y []float64) float64) (r float64, lag int) {
	if maxLag < 0 {
		maxLag = -maxLag
	}
	best, bestLag := math.NaN(), 0
	// Visit lags by growing |lag| so ties keep the smaller shift.
	for d := 0; d <= maxLag; d++ {
		for _, l := range []int{d, -d} {
			if d == 0 && l < 0 {
				continue
			}
			sx, sy := shifted(x, y, l)
			px, py := pairs(sx, sy)
			if len(px) < MinLagPairs {
				continue
			}
			c := corr(px, py)
			if math.IsNaN(c) {
				continue
			}
			if math.IsNaN(best) || math.Abs(c) > math.Abs(best)+1e-12 {
				best, bestLag = c, l
			}
		}
	}
	if math.IsNaN(best) {
		return math.NaN(), 0
	}
	return best, bestLag
}

// shifted returns the overlapping parts of x and y with y moved back by lag
// buckets, so out[i] pairs x[i] with y[i+lag].
func shifted(x, y []float64, lag int) ([]float64, []float64) {
	n := min(len(x), len(y))
	if lag >= 0 {
		if lag >= n {
			return nil, nil
		}
		return x[:n-lag], y[lag:n]
	}
	l := -lag
	if l >= n {
		return nil, nil
	}
	return x[l:n], y[:n-l]
}

// pairs returns the aligned values of x and y where both are non-NaN.
func pairs(x, y []float64) ([]float64, []float64) {
	n := min(len(x), len(y))
	px := make([]float64, 0, n)
	py := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		if math.IsNaN(x[i]) || math.IsNaN(y[i]) {
			continue
		}
		px = append(px, x[i])
		py = append(py, y[i])
	}
	return px, py
}

// PairCount returns how many aligned pairs of x and y are both non-NaN: the
// n a correlation was computed over.
func PairCount(x, y []float64) int {
	px, _ := pairs(x, y)
	return len(px)
}
