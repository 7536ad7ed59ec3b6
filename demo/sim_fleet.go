package demo

import (
	"fmt"
	"math"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

func (s *sim) newReplica() *replica {
	name := fmt.Sprintf("%s-%s-%s", vllmService, s.rsHash, s.podHash(5))
	r := &replica{res: vllmResource(name), started: s.now}
	s.replicas = append(s.replicas, r)
	return r
}

// startPod creates a replica that becomes ready after the pod start time,
// then takes the requests the gateway held.
func (s *sim) startPod() {
	r := s.newReplica()
	s.at(s.now.Add(s.uniform(podStartMin, podStartMax)), func() {
		if r.gone {
			return
		}
		r.ready = true
		held := s.held
		s.held = nil
		for _, c := range held {
			s.deliver(r, c)
		}
		s.kick(r)
	})
}

func (s *sim) active() []*replica {
	var out []*replica
	for _, r := range s.replicas {
		if !r.draining {
			out = append(out, r)
		}
	}
	return out
}

// pickReplica is the least-loaded ready replica (the gateway balances on
// outstanding requests), nil when none is ready.
func (s *sim) pickReplica() *replica {
	var best *replica
	for _, r := range s.replicas {
		if !r.ready || r.draining {
			continue
		}
		if best == nil || r.load() < best.load() {
			best = r
		}
	}
	return best
}

// scale records a scale event and starts or drains pods to match.
func (s *sim) scale(from, to int, reason, source string) {
	s.out.Events = append(s.out.Events, telemetry.Event{
		Time: s.now, Kind: telemetry.EventScale, Service: vllmService,
		FromReplicas: telemetry.Ptr(int32(from)), ToReplicas: telemetry.Ptr(int32(to)),
		Reason: reason, Source: source,
	})
	for range to - from {
		s.startPod()
	}
	for range from - to {
		// Retire a pod that is still starting first, else the least
		// loaded; it finishes what it holds before it goes.
		var victim *replica
		for _, r := range s.active() {
			switch {
			case victim == nil,
				!r.ready && victim.ready,
				r.ready == victim.ready && r.load() < victim.load():
				victim = r
			}
		}
		victim.draining = true
		s.maybeGone(victim)
	}
}

func (s *sim) maybeGone(r *replica) {
	if !r.draining || r.busy || r.load() > 0 {
		return
	}
	r.gone = true
	for i, x := range s.replicas {
		if x == r {
			s.replicas = append(s.replicas[:i], s.replicas[i+1:]...)
			break
		}
	}
}

// autoscale is one poll of KEDA and the HPA.
func (s *sim) autoscale() {
	if s.stopped(s.now) {
		return
	}
	defer s.at(s.now.Add(autoscalePoll), s.autoscale)
	act := s.active()
	load := 0
	for _, r := range act {
		load += r.load()
	}
	if load > 0 || len(s.held) > 0 {
		s.lastActivity = s.now
	}
	n := len(act)
	if n == 0 {
		return // activation happens at the gateway, on the next request
	}
	if s.now.Sub(s.lastActivity) >= kedaCooldown {
		s.scale(n, 0, "KEDAScaleTargetDeactivated", "keda")
		s.downSince, s.loads = time.Time{}, nil
		return
	}
	s.loads = append(s.loads, load)
	if len(s.loads) > hpaWindow {
		s.loads = s.loads[1:]
	}
	sum := 0
	for _, l := range s.loads {
		sum += l
	}
	avg := float64(sum) / float64(len(s.loads))
	up := min(max(int(math.Ceil(avg/hpaTargetLoad)), 1), s.maxReplicas)
	down := min(max(int(math.Ceil(avg/hpaScaleDownLoad)), 1), s.maxReplicas)
	idle := len(s.loads) >= hpaIdlePolls
	for _, l := range s.loads[max(len(s.loads)-hpaIdlePolls, 0):] {
		idle = idle && l == 0
	}
	switch {
	case idle:
		if n > 1 {
			s.scale(n, 1, "SuccessfulRescale", "hpa")
		}
		s.downSince = time.Time{}
	case up > n:
		s.scale(n, up, "SuccessfulRescale", "hpa")
		s.downSince = time.Time{}
	case down >= n:
		s.downSince = time.Time{}
	case s.downSince.IsZero():
		s.downSince = s.now
	case s.now.Sub(s.downSince) >= hpaDownStabilization:
		s.scale(n, down, "SuccessfulRescale", "hpa")
		s.downSince = time.Time{}
	}
}

// scrape samples every ready replica's gauges, as Prometheus would.
func (s *sim) scrape() {
	if s.stopped(s.now) {
		return
	}
	defer s.at(s.now.Add(scrapeInterval), s.scrape)
	labels := map[string]string{"model_name": vllmModel}
	for _, r := range s.replicas {
		if !r.ready {
			continue
		}
		for _, m := range []struct {
			name  string
			value float64
		}{
			{MetricKVCacheUsage, r.kvUsage(s.eng)},
			{MetricRequestsWaiting, float64(len(r.waiting))},
			{MetricRequestsRunning, float64(len(r.running))},
		} {
			s.out.Metrics = append(s.out.Metrics, telemetry.MetricPoint{
				Time: s.now, Service: vllmService, Instance: r.res.Instance,
				Name: m.name, Labels: labels, Value: m.value,
			})
		}
	}
	if s.summary != nil {
		s.summary.setGauges(s.eng)
	}
	s.out.Metrics = append(s.out.Metrics, telemetry.MetricPoint{
		Time: s.now, Service: vllmService, Name: MetricReplicas,
		Labels: map[string]string{"deployment": vllmService, "namespace": namespace},
		Value:  float64(len(s.active())),
	})
}
