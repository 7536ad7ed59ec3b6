package normalize

import (
	"fmt"
	"math"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// maxHistogramBuckets bounds one histogram point: explicit layouts of
// inference servers hold 10–30 buckets, an exponential histogram at most
// 160 by default; more is a misconfigured exporter.
const maxHistogramBuckets = 1024

// histogram keeps an OTLP explicit-bucket histogram point.
func (b *pointBuilder) histogram(name string, temporality metricspb.AggregationTemporality, dp *metricspb.HistogramDataPoint) {
	if dp.Flags&noRecordedValue != 0 {
		return
	}
	bounds, counts := dp.ExplicitBounds, dp.BucketCounts
	if len(bounds) == 0 && len(counts) <= 1 {
		return // count and sum only: the _sum/_count points carry it
	}
	if len(counts) != len(bounds)+1 {
		b.errs.reject(fmt.Sprintf("metric %s: %d bucket counts for %d bounds", name, len(counts), len(bounds)))
		return
	}
	for i := 1; i < len(bounds); i++ {
		if !(bounds[i] > bounds[i-1]) {
			b.errs.reject(fmt.Sprintf("metric %s: explicit bounds not ascending", name))
			return
		}
	}
	// OTLP allows a last bound of +Inf; the +Inf bucket is implied.
	if n := len(bounds); n > 0 && math.IsInf(bounds[n-1], 1) {
		bounds, counts = bounds[:n-1], append(counts[:n-1:n-1], counts[n-1]+counts[n])
	}
	b.keepHistogram(name, temporality, dp.StartTimeUnixNano, dp.TimeUnixNano, dp.Attributes, append([]float64(nil), bounds...), append([]uint64(nil), counts...), dp.Count, dp.GetSum())
}

// exponential keeps an OTLP exponential histogram point as explicit
// buckets: the zero bucket (with any negative observations: latencies are
// not negative) up to the zero threshold, then the positive buckets
// (base^i, base^(i+1)], base = 2^(2^-scale).
func (b *pointBuilder) exponential(name string, temporality metricspb.AggregationTemporality, dp *metricspb.ExponentialHistogramDataPoint) {
	if dp.Flags&noRecordedValue != 0 {
		return
	}
	pos := dp.GetPositive()
	if len(pos.GetBucketCounts()) > maxHistogramBuckets || dp.Scale < -10 || dp.Scale > 20 {
		b.errs.reject(fmt.Sprintf("metric %s: exponential histogram of scale %d with %d buckets", name, dp.Scale, len(pos.GetBucketCounts())))
		return
	}
	var negative uint64
	for _, n := range dp.GetNegative().GetBucketCounts() {
		negative += n
	}
	bound := func(index int64) float64 { return math.Exp2(float64(index) / math.Exp2(float64(dp.Scale))) }
	bounds := []float64{max(dp.ZeroThreshold, 0)}
	counts := []uint64{dp.ZeroCount + negative}
	if len(pos.GetBucketCounts()) > 0 {
		if low := bound(int64(pos.Offset)); low > bounds[0] {
			bounds, counts = append(bounds, low), append(counts, 0)
		}
		for i, n := range pos.BucketCounts {
			up := bound(int64(pos.Offset) + int64(i) + 1)
			if up <= bounds[len(bounds)-1] {
				counts[len(counts)-1] += n
				continue
			}
			bounds, counts = append(bounds, up), append(counts, n)
		}
	}
	counts = append(counts, 0) // +Inf
	b.keepHistogram(name, temporality, dp.StartTimeUnixNano, dp.TimeUnixNano, dp.Attributes, bounds, counts, dp.Count, dp.GetSum())
}

func (b *pointBuilder) keepHistogram(name string, temporality metricspb.AggregationTemporality, start, ts uint64, attrs []*commonpb.KeyValue, bounds []float64, counts []uint64, count uint64, sum float64) {
	if len(bounds) > maxHistogramBuckets {
		b.errs.reject(fmt.Sprintf("metric %s: %d buckets, at most %d", name, len(bounds), maxHistogramBuckets))
		return
	}
	for _, v := range bounds {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b.errs.reject(fmt.Sprintf("metric %s: bound %v", name, v))
			return
		}
	}
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total != count {
		// The buckets are what quantiles read; a count that disagrees is
		// the exporter's rounding, not an observation.
		count = total
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		sum = 0
	}
	if ts == 0 {
		b.errs.reject(fmt.Sprintf("metric %s: time_unix_nano is zero", name))
		return
	}
	t := unixNanos(ts)
	if r := checkTime("time", t, b.now); r != "" {
		b.errs.reject(fmt.Sprintf("metric %s: %s", name, r))
		return
	}
	p := telemetry.HistogramPoint{ProjectID: b.projectID, Time: t, Service: b.service, Name: HistogramName(name),
		Bounds: bounds, Counts: counts, Count: count, Sum: sum,
		Cumulative: temporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}
	if start != 0 && start <= ts {
		p.Start = unixNanos(start)
	}
	p.Labels = flattenAttributes(attrs, b.lim)
	p.Instance = b.instance
	if p.Instance == "" {
		if p.Instance = p.Labels["instance"]; p.Instance == "" {
			p.Instance = p.Labels["pod"]
		}
		p.Instance = cleanString(p.Instance, maxNameBytes)
	}
	*b.hists = append(*b.hists, p)
}
