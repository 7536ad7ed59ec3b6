package diagnose

import (
	"math"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// maxLagBuckets bounds the lag search: a gauge scraped every 15 s and a
// request attributed to its start bucket can be a bucket or two apart, more
// than three is a different story.
const maxLagBuckets = 3

// Correlation is one coefficient the diagnosis looked at, per time bucket
// (with the best lag) or per request.
type Correlation struct {
	X string `json:"x"` // e.g. kv_cache_usage, input_tokens
	Y string `json:"y"` // e.g. ttft_p99, ttft
	// Per says what a pair is: "30 s bucket" or "request".
	Per      string   `json:"per"`
	Pearson  *float64 `json:"pearson"`
	Spearman *float64 `json:"spearman"`
	// Lag is the shift, in buckets, of the best Pearson; positive means X
	// leads Y.
	Lag   int `json:"lag_buckets"`
	Pairs int `json:"pairs"` // pairs at lag 0
}

// best is the stronger of the two coefficients, NaN when neither exists.
func (c Correlation) best() float64 {
	p, s := val(c.Pearson), val(c.Spearman)
	switch {
	case math.IsNaN(p):
		return s
	case math.IsNaN(s):
		return p
	}
	return math.Max(p, s)
}

// Correlation series names.
const (
	seriesTTFTP99     = "ttft_p99"
	seriesITLP95      = "itl_p95"
	seriesInputTokens = "input_tokens"
)

// bucketCorrelations correlates the pressure gauges with latency per bucket.
// The buckets should span baseline and window: a window that is saturated
// throughout has no variance of its own to correlate.
func bucketCorrelations(buckets []Bucket, per string) []Correlation {
	ttft := column(buckets, func(b *Bucket) *float64 { return b.TTFT.P99 })
	itl := column(buckets, func(b *Bucket) *float64 { return b.ITL.P95 })
	kv := column(buckets, func(b *Bucket) *float64 { return b.KVCacheUsage })
	waiting := column(buckets, func(b *Bucket) *float64 { return b.RequestsWaiting })
	running := column(buckets, func(b *Bucket) *float64 { return b.RequestsRunning })

	var out []Correlation
	add := func(xName string, x []float64, yName string, y []float64) {
		r, lag := stats.LagCorrelation(x, y, maxLagBuckets)
		rho, _ := stats.LagCorrelationFunc(x, y, maxLagBuckets, stats.Spearman)
		if math.IsNaN(r) && math.IsNaN(rho) {
			return
		}
		out = append(out, Correlation{
			X: xName, Y: yName, Per: per,
			Pearson: num(r), Spearman: num(rho), Lag: lag,
			Pairs: stats.PairCount(x, y),
		})
	}
	add(MetricKVCacheUsage, kv, seriesTTFTP99, ttft)
	add(MetricRequestsWaiting, waiting, seriesTTFTP99, ttft)
	add(MetricRequestsRunning, running, seriesITLP95, itl)
	add(MetricKVCacheUsage, kv, seriesITLP95, itl)
	return out
}

// requestCorrelations relates each request's latency to its prompt length:
// prefill scales with input tokens, queueing and provider slowness do not.
func requestCorrelations(reqs []telemetry.LLMRequest) []Correlation {
	in := tokens(reqs, true)
	var out []Correlation
	for _, name := range []string{ComponentTTFT, ComponentPrefill} {
		y := values(reqs, name)
		n := stats.PairCount(in, y)
		if n < stats.MinLagPairs {
			continue
		}
		r, rho := stats.Pearson(in, y), stats.Spearman(in, y)
		if math.IsNaN(r) && math.IsNaN(rho) {
			continue
		}
		out = append(out, Correlation{
			X: seriesInputTokens, Y: name, Per: "request",
			Pearson: num(r), Spearman: num(rho), Pairs: n,
		})
	}
	return out
}

// findCorrelation returns the correlation of x with y, if computed.
func findCorrelation(cs []Correlation, x, y string) (Correlation, bool) {
	for _, c := range cs {
		if c.X == x && c.Y == y {
			return c, true
		}
	}
	return Correlation{}, false
}
