package assemble

import (
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Interval is the half-open time interval [From, To).
type Interval struct {
	From, To time.Time
}

// Busy is the union of the parts of spans that fall within [from, to):
// disjoint intervals in time order. Model calls that overlap (an agent's
// parallel tool calls, a fan-out) are counted once, so the app's own time
// before a call, to − from minus the busy time, is never subtracted twice.
// dst is reused for the result.
func Busy(dst []Interval, from, to time.Time, spans []Interval) []Interval {
	dst = dst[:0]
	for _, s := range spans {
		a, b := s.From, s.To
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if a.Before(b) {
			dst = append(dst, Interval{a, b})
		}
	}
	slices.SortFunc(dst, func(x, y Interval) int { return x.From.Compare(y.From) })
	out := dst[:0]
	for _, iv := range dst {
		if n := len(out); n > 0 && !iv.From.After(out[n-1].To) {
			if iv.To.After(out[n-1].To) {
				out[n-1].To = iv.To
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Length is the total time the disjoint intervals cover.
func Length(ivs []Interval) time.Duration {
	var d time.Duration
	for _, iv := range ivs {
		d += iv.To.Sub(iv.From)
	}
	return d
}

// earlierCallTime is, for each call, the time between its root's start and
// its own start that the trace spent in earlier model calls (DESIGN.md,
// "Decomposition": pre-inference is the app's own time before the call, so
// an agent loop's fourth call does not count the three calls before it).
// A call's extent is its primary span (the client span, else the server
// span); calls without a root get 0.
func (a *assembler) earlierCallTime(calls []call) []time.Duration {
	a.earlier = a.earlier[:0]
	a.extents = a.extents[:0]
	for i := range calls {
		p := calls[i].primary()
		a.extents = append(a.extents, Interval{p.Start, p.End})
	}
	for i := range calls {
		c := &calls[i]
		var d time.Duration
		if c.root != nil && len(calls) > 1 {
			start := c.primary().Start
			a.busy = Busy(a.busy, c.root.Start, start, a.extents)
			d = Length(a.busy)
		}
		a.earlier = append(a.earlier, d)
	}
	return a.earlier
}

// primary is the span a call's request is keyed by and timed from.
func (c *call) primary() *telemetry.Span {
	if c.client != nil {
		return c.client
	}
	return c.server
}
