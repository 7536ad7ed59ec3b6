package assemble

import (
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// recentlyStarted reports whether the server span ran on an instance that
// had just come up: its first sighting, a scale-up of its service or an
// instance_started event lies within ColdStartWindow of the span start.
// The caller has already seen the request held; this is the second half of
// the evidence.
func (a *assembler) recentlyStarted(server *telemetry.Span) bool {
	if a.hist == nil {
		return false
	}
	window := a.opt.ColdStartWindow
	if server.Instance != "" {
		// An instance missing from FirstSeen is not assumed new: the
		// history may simply not reach back that far.
		if first, ok := a.hist.FirstSeen[InstanceKey(server.Service, server.Instance)]; ok {
			// A first sighting shortly after the span start still marks a
			// new instance (history built before this span was stored, or
			// from a metric scrape that lags the first request).
			if age := server.Start.Sub(first); age <= window && age >= -window {
				return true
			}
		}
	}
	if a.index == nil {
		a.index = newStartIndex(a.hist.Events)
	}
	return a.index.startedWithin(server, window)
}

// startIndex holds the events that bring up capacity, by project and
// service, sorted by time.
type startIndex struct {
	byService map[serviceKey][]startMark
}

type serviceKey struct {
	project uint32
	service string
}

type startMark struct {
	time     time.Time
	instance string // empty: any instance of the service
}

// newStartIndex keeps scale events with ToReplicas > FromReplicas (scale-up
// and scale-from-zero; both counts must be stated, since a bare target does
// not say which way the service moved) and instance_started events. Other
// kinds (raw k8s events) are left to the normalizer to turn into these.
func newStartIndex(events []telemetry.Event) *startIndex {
	idx := &startIndex{byService: map[serviceKey][]startMark{}}
	for i := range events {
		e := &events[i]
		var m startMark
		switch e.Kind {
		case telemetry.EventScale:
			if e.FromReplicas == nil || e.ToReplicas == nil || *e.ToReplicas <= *e.FromReplicas {
				continue
			}
			m = startMark{time: e.Time}
		case telemetry.EventInstanceStarted:
			m = startMark{time: e.Time, instance: e.Instance}
		default:
			continue
		}
		k := serviceKey{e.ProjectID, e.Service}
		idx.byService[k] = append(idx.byService[k], m)
	}
	for _, marks := range idx.byService {
		slices.SortFunc(marks, func(x, y startMark) int { return x.time.Compare(y.time) })
	}
	return idx
}

// startedWithin reports an event for the server's service (and instance, if
// the event names one) in [span start − window, span start].
func (idx *startIndex) startedWithin(server *telemetry.Span, window time.Duration) bool {
	marks := idx.byService[serviceKey{server.ProjectID, server.Service}]
	from := server.Start.Add(-window)
	i, _ := slices.BinarySearchFunc(marks, from, func(m startMark, t time.Time) int {
		return m.time.Compare(t)
	})
	for ; i < len(marks) && !marks[i].time.After(server.Start); i++ {
		if marks[i].instance == "" || marks[i].instance == server.Instance {
			return true
		}
	}
	return false
}
