package ingest

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// firstIntervalMax bounds how long a series may have run before its first
// point reaches Tokenpath for that point's counts to be kept as one
// interval: a server that started minutes ago (a cold start) keeps its first
// requests; one that ran for days would put them all at one instant.
const firstIntervalMax = 5 * time.Minute

// histogramSeries identifies one histogram series across exports.
type histogramSeries struct {
	project                       uint32
	service, instance, name, labs string
}

func seriesOf(p *telemetry.HistogramPoint) histogramSeries {
	keys := make([]string, 0, len(p.Labels))
	for k := range p.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(p.Labels[k])
		b.WriteByte(0)
	}
	return histogramSeries{p.ProjectID, p.Service, p.Instance, p.Name, b.String()}
}

// HistogramDeltas turns cumulative histogram points into per-interval
// deltas, keeping each series' last cumulative point. A count that falls,
// a bucket that shrinks or a later start time is a restart of the
// producer: the new counts are the interval's. The first point of a series
// seeds it (kept whole only when its start is within firstIntervalMax), so
// after a Tokenpath restart each series loses at most one interval.
type HistogramDeltas struct {
	mu   sync.Mutex
	last map[histogramSeries]telemetry.HistogramPoint
}

// Convert returns the deltas of pts (delta points pass as they are;
// intervals without observations are left out) and commit, which records
// the new cumulative state: call it once the deltas are stored, so a failed
// insert retried converts the same way.
func (d *HistogramDeltas) Convert(pts []telemetry.HistogramPoint) (out []telemetry.HistogramPoint, commit func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := map[histogramSeries]telemetry.HistogramPoint{}
	for i := range pts {
		p := &pts[i]
		if !p.Cumulative {
			if p.Count > 0 {
				out = append(out, *p)
			}
			continue
		}
		k := seriesOf(p)
		prev, ok := next[k]
		if !ok {
			prev, ok = d.last[k]
		}
		if ok && !p.Time.After(prev.Time) {
			continue // a retried or late export: that interval is stored
		}
		next[k] = *p
		delta, keep := intervalOf(p, prev, ok)
		if keep && delta.Count > 0 {
			out = append(out, delta)
		}
	}
	return out, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.last == nil {
			d.last = map[histogramSeries]telemetry.HistogramPoint{}
		}
		for k, p := range next {
			if cur, ok := d.last[k]; !ok || p.Time.After(cur.Time) {
				d.last[k] = p
			}
		}
	}
}

// intervalOf is the delta of cumulative point p after prev (hasPrev false:
// the series' first point); keep is false when the interval is unknown.
func intervalOf(p *telemetry.HistogramPoint, prev telemetry.HistogramPoint, hasPrev bool) (telemetry.HistogramPoint, bool) {
	whole := *p
	whole.Cumulative = false
	whole.Counts = slices.Clone(p.Counts)
	if !hasPrev {
		fresh := !p.Start.IsZero() && p.Start.Before(p.Time) && p.Time.Sub(p.Start) <= firstIntervalMax
		return whole, fresh
	}
	// A start later than the last one, or after the last point, is a
	// restart whatever the counts did.
	restarted := !p.Start.IsZero() && (!prev.Start.IsZero() && p.Start.After(prev.Start) || p.Start.After(prev.Time))
	if !restarted && p.Count >= prev.Count {
		if counts, ok := subtractBuckets(p, &prev); ok {
			delta := whole
			delta.Start, delta.Counts = prev.Time, counts
			delta.Count, delta.Sum = p.Count-prev.Count, p.Sum-prev.Sum
			return delta, true
		}
		if slices.Equal(p.Bounds, prev.Bounds) {
			restarted = true // a bucket fell: counters reset
		} else {
			return whole, false // a new layout: this point seeds it
		}
	}
	// A restart: the counts are all since it.
	if p.Start.IsZero() || !p.Start.After(prev.Time) {
		whole.Start = prev.Time
	}
	return whole, true
}

// subtractBuckets returns p's per-bucket counts minus prev's. Bounds may
// differ where prev's cumulative count at each of p's bounds is still
// known: a bound prev has, or one inside a bucket of prev that is empty
// (an exponential histogram whose range grew or whose scale fell). ok is
// false when a bucket would go negative or a bound falls inside a
// populated bucket of prev.
func subtractBuckets(p, prev *telemetry.HistogramPoint) ([]uint64, bool) {
	if len(p.Counts) != len(p.Bounds)+1 || len(prev.Counts) != len(prev.Bounds)+1 {
		return nil, false
	}
	prevCum := make([]uint64, len(prev.Counts))
	var c uint64
	for i, n := range prev.Counts {
		c += n
		prevCum[i] = c
	}
	// cumAt is prev's count of observations ≤ b.
	cumAt := func(b float64) (uint64, bool) {
		j := sort.SearchFloat64s(prev.Bounds, b)
		if j < len(prev.Bounds) && prev.Bounds[j] == b {
			return prevCum[j], true
		}
		if prev.Counts[j] != 0 {
			return 0, false
		}
		if j == 0 {
			return 0, true
		}
		return prevCum[j-1], true
	}
	out := make([]uint64, len(p.Counts))
	var cum, below uint64
	for i, b := range p.Bounds {
		cum += p.Counts[i]
		pc, ok := cumAt(b)
		if !ok || pc > cum {
			return nil, false
		}
		d := cum - pc
		if d < below {
			return nil, false
		}
		out[i] = d - below
		below = d
	}
	total := p.Count - prev.Count
	if total < below {
		return nil, false
	}
	out[len(p.Bounds)] = total - below
	return out, true
}
