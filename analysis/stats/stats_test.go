package stats

import (
	"math"
	"math/rand"
	"testing"
)

func near(a, b, tol float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= tol
}

func TestQuantile(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"median odd", []float64{3, 1, 2}, 0.5, 2},
		{"median even interpolates", []float64{1, 2, 3, 4}, 0.5, 2.5},
		// Type 7 on 1..10: position 0.95*9 = 8.55 → 9 + 0.55.
		{"p95 of 1..10", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 0.95, 9.55},
		{"p99 of 1..100", seq(1, 100), 0.99, 99.01},
		{"min", []float64{5, 7, 9}, 0, 5},
		{"max", []float64{5, 7, 9}, 1, 9},
		{"single", []float64{42}, 0.95, 42},
		{"NaN ignored", []float64{nan, 1, nan, 3, nan}, 0.5, 2},
		{"all NaN", []float64{nan, nan}, 0.5, nan},
		{"empty", nil, 0.5, nan},
		{"q out of range", []float64{1, 2}, 1.5, nan},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(tc.xs, tc.q); !near(got, tc.want, 1e-9) {
				t.Errorf("Quantile(%v, %v) = %v, want %v", tc.xs, tc.q, got, tc.want)
			}
		})
	}
}

func TestQuantileDoesNotModifyInput(t *testing.T) {
	xs := []float64{3, 1, 2}
	Quantile(xs, 0.5)
	if xs[0] != 3 || xs[1] != 1 || xs[2] != 2 {
		t.Fatalf("input reordered: %v", xs)
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize(append(seq(1, 101), math.NaN()))
	if s.N != 101 || s.P50 != 51 || !near(s.P95, 96, 1e-9) || !near(s.P99, 100, 1e-9) {
		t.Fatalf("Summarize = %+v", s)
	}
}

func TestMeanSumMinMax(t *testing.T) {
	xs := []float64{2, math.NaN(), 4, 9}
	if got := Mean(xs); got != 5 {
		t.Errorf("Mean = %v, want 5", got)
	}
	if got := Sum(xs); got != 15 {
		t.Errorf("Sum = %v, want 15", got)
	}
	if got := Max(xs); got != 9 {
		t.Errorf("Max = %v, want 9", got)
	}
	if got := Min(xs); got != 2 {
		t.Errorf("Min = %v, want 2", got)
	}
	if !math.IsNaN(Mean(nil)) || !math.IsNaN(Max([]float64{math.NaN()})) {
		t.Error("Mean/Max of nothing must be NaN")
	}
}

func TestShares(t *testing.T) {
	if got := Share(1, 4); got != 0.25 {
		t.Errorf("Share(1,4) = %v", got)
	}
	if got := Share(3, 0); got != 0 {
		t.Errorf("Share(3,0) = %v, want 0", got)
	}
	s := Shares(map[string]int{"a": 3, "b": 1})
	if s["a"] != 0.75 || s["b"] != 0.25 {
		t.Errorf("Shares = %v", s)
	}
	if !math.IsNaN(Ratio(1, 0)) || Ratio(3, 2) != 1.5 {
		t.Error("Ratio")
	}
}

func TestPearson(t *testing.T) {
	x := seq(1, 10)
	lin := make([]float64, len(x))
	neg := make([]float64, len(x))
	for i, v := range x {
		lin[i] = 3*v + 7
		neg[i] = -2 * v
	}
	if got := Pearson(x, lin); !near(got, 1, 1e-12) {
		t.Errorf("perfectly linear: r = %v, want 1", got)
	}
	if got := Pearson(x, neg); !near(got, -1, 1e-12) {
		t.Errorf("perfectly inverse: r = %v, want -1", got)
	}
	// Known value: x = 1..5, y = 2,4,5,4,5 → r = 0.7745966692.
	if got := Pearson([]float64{1, 2, 3, 4, 5}, []float64{2, 4, 5, 4, 5}); !near(got, 0.7745966692, 1e-9) {
		t.Errorf("known r = %v, want 0.7746", got)
	}
	if got := Pearson([]float64{1, 2, 3}, []float64{5, 5, 5}); !math.IsNaN(got) {
		t.Errorf("constant side: r = %v, want NaN", got)
	}
	// Pairwise deletion: the NaN pair and its outlier partner are dropped.
	if got := Pearson([]float64{1, 2, math.NaN(), 4}, []float64{2, 4, 1000, 8}); !near(got, 1, 1e-12) {
		t.Errorf("pairwise NaN: r = %v, want 1", got)
	}
}

func TestSpearman(t *testing.T) {
	x := seq(1, 20)
	exp := make([]float64, len(x))
	for i, v := range x {
		exp[i] = math.Exp(v / 2) // monotone, far from linear
	}
	if got := Spearman(x, exp); !near(got, 1, 1e-12) {
		t.Errorf("monotone: rho = %v, want 1", got)
	}
	if p := Pearson(x, exp); p > 0.9 {
		t.Errorf("test data should be non-linear, Pearson = %v", p)
	}
	// Ties: x = 1,2,2,3 ranks 1,2.5,2.5,4; y = 1,2,3,4 → rho = 0.9486832981.
	if got := Spearman([]float64{1, 2, 2, 3}, []float64{1, 2, 3, 4}); !near(got, 0.9486832981, 1e-9) {
		t.Errorf("ties: rho = %v, want 0.9487", got)
	}
}

func TestRanksTies(t *testing.T) {
	got := Ranks([]float64{10, 20, 20, math.NaN(), 5, 20})
	want := []float64{2, 4, 4, math.NaN(), 1, 4}
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Fatalf("Ranks = %v, want %v", got, want)
		}
	}
}

func TestLagCorrelation(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	n := 60
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.Float64()
	}
	// y follows x two buckets later.
	y := make([]float64, n)
	for i := range y {
		y[i] = math.NaN()
		if i >= 2 {
			y[i] = 5*x[i-2] + 1
		}
	}
	r, lag := LagCorrelation(x, y, 3)
	if lag != 2 || !near(r, 1, 1e-9) {
		t.Errorf("x leads y by 2: got r=%v lag=%d", r, lag)
	}
	// And the other way round.
	r, lag = LagCorrelation(y, x, 3)
	if lag != -2 || !near(r, 1, 1e-9) {
		t.Errorf("y lags: got r=%v lag=%d", r, lag)
	}
	// Beyond the search range the relation is not found at full strength.
	if r, _ := LagCorrelation(x, y, 1); near(r, 1, 1e-3) {
		t.Errorf("lag 2 found with maxLag 1: r=%v", r)
	}
}

func TestLagCorrelationPrefersSmallLag(t *testing.T) {
	// A linear trend correlates perfectly at every lag: lag 0 must win.
	x := seq(1, 30)
	y := seq(101, 130)
	if r, lag := LagCorrelation(x, y, 3); lag != 0 || !near(r, 1, 1e-12) {
		t.Errorf("got r=%v lag=%d, want 1 at lag 0", r, lag)
	}
}

func TestLagCorrelationMinimumPairs(t *testing.T) {
	nan := math.NaN()
	// Four usable pairs only.
	x := []float64{1, 2, nan, 3, 4, nan}
	y := []float64{2, 4, 5, 6, 8, 9}
	if r, lag := LagCorrelation(x, y, 0); !math.IsNaN(r) || lag != 0 {
		t.Errorf("4 pairs: got r=%v lag=%d, want NaN", r, lag)
	}
	x[2] = 2.5
	if r, _ := LagCorrelation(x, y, 0); math.IsNaN(r) {
		t.Error("5 pairs must give a coefficient")
	}
	if PairCount(x, y) != 5 {
		t.Errorf("PairCount = %d, want 5", PairCount(x, y))
	}
	if r, _ := LagCorrelation(nil, nil, 3); !math.IsNaN(r) {
		t.Error("empty series must give NaN")
	}
}

func TestLagCorrelationSpearman(t *testing.T) {
	x := seq(1, 12)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * v * v
	}
	if r, lag := LagCorrelationFunc(x, y, 3, Spearman); lag != 0 || !near(r, 1, 1e-12) {
		t.Errorf("got r=%v lag=%d", r, lag)
	}
}

func seq(from, to int) []float64 {
	out := make([]float64, 0, to-from+1)
	for v := from; v <= to; v++ {
		out = append(out, float64(v))
	}
	return out
}

func TestQuantileCI(t *testing.T) {
	xs := seq(1, 100)
	// Median of 1..100 at z = 1.96: ranks 50 ± 9.8 → values 41 and 61.
	lo, hi := QuantileCI(xs, 0.5, 1.96)
	if lo != 41 || hi != 61 {
		t.Errorf("median CI = [%v, %v], want [41, 61]", lo, hi)
	}
	// p95 of 20 values: the interval reaches the maximum.
	lo, hi = QuantileCI(seq(1, 20), 0.95, 1.645)
	if hi != 20 || lo > 18 || lo < 15 {
		t.Errorf("p95 CI of 20 values = [%v, %v]", lo, hi)
	}
	// More data, narrower interval around the point estimate.
	big := seq(1, 10000)
	lo, hi = QuantileCI(big, 0.95, 1.645)
	if p := Quantile(big, 0.95); lo > p || hi < p || hi-lo > 80 {
		t.Errorf("p95 CI of 10k values = [%v, %v] around %v", lo, hi, p)
	}
	if lo, hi := QuantileCI([]float64{math.NaN()}, 0.5, 1.96); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Error("CI of nothing must be NaN")
	}
}

func TestSortedReadsMany(t *testing.T) {
	s := Sort([]float64{5, math.NaN(), 1, 3})
	if len(s) != 3 || s[0] != 1 || s[2] != 5 {
		t.Fatalf("Sort = %v", s)
	}
	if s.Quantile(0.5) != 3 || s.Summary().N != 3 {
		t.Errorf("median %v summary %+v", s.Quantile(0.5), s.Summary())
	}
}

func TestTwoProportionZ(t *testing.T) {
	// 30 % against 10 % of 100 each: pooled 20 %, se = sqrt(.2·.8·.02).
	if z := TwoProportionZ(30, 100, 10, 100); !near(z, 0.2/math.Sqrt(0.2*0.8*0.02), 1e-12) {
		t.Errorf("z = %v", z)
	}
	if z := TwoProportionZ(10, 100, 30, 100); z >= 0 {
		t.Errorf("a smaller share gave z = %v, want negative", z)
	}
	for _, c := range [][4]int{{0, 0, 5, 10}, {5, 10, 0, 0}, {0, 10, 0, 10}, {10, 10, 10, 10}} {
		if z := TwoProportionZ(c[0], c[1], c[2], c[3]); z != 0 {
			t.Errorf("TwoProportionZ%v = %v, want 0", c, z)
		}
	}
}
