package ingest

import (
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

type resourceKey struct {
	project uint32
	hash    uint64
}

// noteResources adds to into the distinct resources that spans reference,
// each with LastSeen at or after its spans' starts, and returns it.
func noteResources(into map[resourceKey]telemetry.Resource, spans []telemetry.Span) map[resourceKey]telemetry.Resource {
	var (
		last     resourceKey
		lastSeen time.Time
	)
	for i := range spans {
		s := &spans[i]
		if s.ResourceHash == 0 {
			continue
		}
		// LastSeen is rounded up to the hour: a resource already written
		// is written again (for its retention) at most once an hour.
		seen := s.Start.Truncate(time.Hour).Add(time.Hour)
		k := resourceKey{s.ProjectID, s.ResourceHash}
		if k == last && !seen.After(lastSeen) {
			continue // spans of one resource come together
		}
		if into == nil {
			into = map[resourceKey]telemetry.Resource{}
		}
		r, ok := into[k]
		if !ok {
			r = telemetry.Resource{ProjectID: s.ProjectID, Hash: s.ResourceHash, Service: s.Service, Attributes: s.Resource}
		}
		if seen.After(r.LastSeen) {
			r.LastSeen = seen
		}
		into[k] = r
		last, lastSeen = k, r.LastSeen
	}
	return into
}

func mergeResources(into, from map[resourceKey]telemetry.Resource) map[resourceKey]telemetry.Resource {
	for k, r := range from {
		if into == nil {
			into = map[resourceKey]telemetry.Resource{}
		}
		if have, ok := into[k]; ok && !r.LastSeen.After(have.LastSeen) {
			continue
		}
		into[k] = r
	}
	return into
}

// maxWrittenResources bounds writtenResources: a resource forgotten is
// only written again, which the resources table folds.
const maxWrittenResources = 1 << 16

// writtenResources remembers which resources are in the resources table
// and up to which LastSeen, so a flush writes only new or newly seen ones.
type writtenResources struct {
	mu   sync.Mutex
	seen map[resourceKey]time.Time
}

// missing returns the resources of want not yet written with a LastSeen at
// least as late.
func (w *writtenResources) missing(want map[resourceKey]telemetry.Resource) []telemetry.Resource {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []telemetry.Resource
	for k, r := range want {
		if t, ok := w.seen[k]; ok && !r.LastSeen.After(t) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// mark records resources as written; call it only once they are stored.
func (w *writtenResources) mark(rs []telemetry.Resource) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[resourceKey]time.Time{}
	}
	if len(w.seen)+len(rs) > maxWrittenResources {
		// Forget an arbitrary half (map order is random).
		n := len(w.seen) / 2
		for k := range w.seen {
			if n == 0 {
				break
			}
			delete(w.seen, k)
			n--
		}
	}
	for _, r := range rs {
		k := resourceKey{r.ProjectID, r.Hash}
		if t, ok := w.seen[k]; !ok || r.LastSeen.After(t) {
			w.seen[k] = r.LastSeen
		}
	}
}
