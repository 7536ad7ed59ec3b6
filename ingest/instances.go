package ingest

import (
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

type instanceKey struct {
	project           uint32
	service, instance string
}

// KnowInstances seeds the set of inference instances already seen, so a
// restart does not report them as new.
func (p *Pipeline) KnowInstances(project uint32, service, instance string) {
	p.instMu.Lock()
	p.instances[instanceKey{project, service, instance}] = true
	p.instMu.Unlock()
}

// noteInstances adds to first the inference instances that spans (server
// spans) and points (engine gauges) show, at the earliest time each was
// seen, and returns it.
func noteInstances(first map[instanceKey]time.Time, spans []telemetry.Span, points []telemetry.MetricPoint) map[instanceKey]time.Time {
	note := func(k instanceKey, t time.Time) {
		if k.instance == "" {
			return
		}
		if first == nil {
			first = map[instanceKey]time.Time{}
		}
		if f, ok := first[k]; !ok || t.Before(f) {
			first[k] = t
		}
	}
	for i := range spans {
		s := &spans[i]
		if s.LLM.Role == telemetry.LLMServer {
			note(instanceKey{s.ProjectID, s.Service, s.Instance}, s.Start)
		}
	}
	for i := range points {
		pt := &points[i]
		switch pt.Name {
		case "kv_cache_usage", "requests_waiting", "requests_running":
			note(instanceKey{pt.ProjectID, pt.Service, pt.Instance}, pt.Time)
		}
	}
	return first
}

func mergeSightings(into, from map[instanceKey]time.Time) map[instanceKey]time.Time {
	for k, t := range from {
		if into == nil {
			into = map[instanceKey]time.Time{}
		}
		if f, ok := into[k]; !ok || t.Before(f) {
			into[k] = t
		}
	}
	return into
}

// newInstances infers an instance_started event the first time an
// inference instance shows up (a server span or a metric point), at the
// earliest time it was seen in the segment. markInstances records them as
// known once stored.
func (p *Pipeline) newInstances(sightings map[instanceKey]time.Time) []telemetry.Event {
	p.instMu.Lock()
	defer p.instMu.Unlock()
	var out []telemetry.Event
	for k, t := range sightings {
		if p.instances[k] {
			continue
		}
		out = append(out, telemetry.Event{ProjectID: k.project, Time: t, Kind: telemetry.EventInstanceStarted,
			Service: k.service, Instance: k.instance, Reason: "first seen", Source: "tokenpath"})
	}
	return out
}

func (p *Pipeline) markInstances(started []telemetry.Event) {
	p.instMu.Lock()
	defer p.instMu.Unlock()
	for _, e := range started {
		p.instances[instanceKey{e.ProjectID, e.Service, e.Instance}] = true
	}
}
