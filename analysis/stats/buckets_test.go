package stats

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// vLLM's request_latency_buckets (vllm/v1/metrics/loggers.py).
var requestLatencyBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
	40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

func bucketize(bounds, values []float64) Buckets {
	b := Buckets{Bounds: bounds, Counts: make([]float64, len(bounds)+1)}
	for _, v := range values {
		b.Counts[sort.SearchFloat64s(bounds, v)]++ // upper bounds are inclusive
	}
	return b
}

// Interpolated quantiles of known data land in the bucket of the exact
// quantile: within the resolution the bounds allow.
func TestBucketsQuantileWithinResolution(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 1))
	for _, tc := range []struct {
		name string
		draw func() float64
	}{
		{"exponential queue waits", func() float64 { return r.ExpFloat64() * 1.2 }},
		{"lognormal e2e", func() float64 { return math.Exp(r.NormFloat64()*0.8 + 1) }},
		{"bimodal cold starts", func() float64 {
			if r.IntN(10) == 0 {
				return 30 + r.Float64()*20
			}
			return 0.2 + r.Float64()
		}},
	} {
		values := make([]float64, 5000)
		for i := range values {
			values[i] = tc.draw()
		}
		b := bucketize(requestLatencyBounds, values)
		sorted := Sort(values)
		for _, q := range []float64{0.5, 0.9, 0.95, 0.99} {
			exact := sorted.Quantile(q)
			got := b.Quantile(q)
			res := b.Resolution(q)
			// The exact quantile's bucket: interpolation never leaves it.
			i := sort.SearchFloat64s(requestLatencyBounds, exact)
			lo, hi := 0.0, math.Inf(1)
			if i > 0 {
				lo = requestLatencyBounds[i-1]
			}
			if i < len(requestLatencyBounds) {
				hi = requestLatencyBounds[i]
			}
			if got < lo-1e-9 || got > hi+1e-9 || math.Abs(got-exact) > res+1e-9 {
				t.Errorf("%s q%.2f: interpolated %.4f, exact %.4f in (%.2f, %.2f], resolution %.3f", tc.name, q, got, exact, lo, hi, res)
			}
		}
	}
}

// The rules histogram_quantile follows, on figures worked by hand.
func TestBucketsQuantilePrometheusRules(t *testing.T) {
	b := Buckets{Bounds: []float64{1, 2, 4}, Counts: []float64{10, 10, 20, 0}}
	for _, tc := range []struct{ q, want float64 }{
		{0, 0},       // rank 0 is the first bucket's start
		{0.25, 1},    // rank 10: the top of the first bucket
		{0.375, 1.5}, // rank 15: halfway through (1, 2]
		{0.75, 3},    // rank 30: halfway through (2, 4]
		{1, 4},       // rank 40
		{-0.1, math.Inf(-1)},
		{1.1, math.Inf(1)},
	} {
		if got := b.Quantile(tc.q); got != tc.want {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
	inf := Buckets{Bounds: []float64{1, 2}, Counts: []float64{1, 1, 8}}
	if got := inf.Quantile(0.9); got != 2 {
		t.Errorf("a rank in the +Inf bucket = %v, want the highest finite bound 2", got)
	}
	if got := inf.Resolution(0.9); !math.IsInf(got, 1) {
		t.Errorf("resolution in the +Inf bucket = %v, want +Inf", got)
	}
	zero := Buckets{Bounds: []float64{0, 1}, Counts: []float64{5, 5, 0}}
	if got := zero.Quantile(0.3); got != 0 {
		t.Errorf("a rank in a bucket bounded by 0 = %v, want 0", got)
	}
	if got := (Buckets{Bounds: []float64{1}, Counts: []float64{0, 0}}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("no observations = %v, want NaN", got)
	}
	var sum Buckets
	first := sum.Add(b)
	second := sum.Add(b)
	if !first || !second || sum.Total() != 80 || sum.Add(inf) {
		t.Errorf("Add: total %v after two adds; a different layout must be refused", sum.Total())
	}
}
