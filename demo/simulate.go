package demo

import "time"

// Simulate runs the model over [from, to) with the given phases (time
// outside them is healthy) and returns everything it would send, without
// sending. Requests that arrive before to are finished even if that takes
// past to; nothing new starts at or after to. The same cfg.Seed, window and
// phases give the same scenario.
func Simulate(cfg Config, from, to time.Time, phases []Phase) *Scenario {
	s := newSim(cfg, from, phases)
	s.stopAt = to
	s.advance(to)
	s.drain()
	out := s.take()
	out.From, out.To, out.Phases = from, to, append([]Phase(nil), phases...)
	return out
}
