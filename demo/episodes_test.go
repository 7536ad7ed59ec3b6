package demo

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/episode"
)

// The backfill's doc-summarizer raises no episode but its batch surge. Seed
// 47 draws, 16 minutes before the surge, a minute whose TTFT p95 rose 1.6×
// and then minutes whose ITL p95 rose 1.5× on a few requests in a crowded
// batch, the ITL median unmoved: noise, which the detector once stored as
// a 2-minute decode episode (TestNoFalseAlarms holds the same shapes).
func TestBackfillSummarizerEpisodesArePlanted(t *testing.T) {
	now := base.Add(4*time.Hour + 47*7919*time.Millisecond)
	from := now.Add(-4 * time.Hour)
	phases := PlannedBackfill(from, now)
	srv, err := StartMetricsOnlyServer(summaryModel)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	s := newSim(Config{Seed: 47}, from, phases)
	s.addSummarizer(srv, from)
	s.stopAt = now
	s.advance(now)
	s.drain()
	minutes := requestMinutes(callsOf(s.take().Requests, nil), summaryService)
	eps := episode.Detect(minutes, episode.Config{TTFTObjective: 10_000})
	surges := 0
	for _, e := range eps {
		planted := false
		for _, ph := range phases {
			// A surge's queue drains for a few minutes after it.
			if ph.Incident == BatchSurge && e.Start.Before(ph.To.Add(5*time.Minute)) && e.End.After(ph.From) {
				planted = true
			}
		}
		if !planted {
			t.Errorf("doc-summarizer episode %s–%s (%s) outside the batch surge", e.Start.Format("15:04"), e.End.Format("15:04"), e.Signals)
			continue
		}
		surges++
	}
	if surges != 1 {
		t.Errorf("%d episodes in the batch surge, want 1", surges)
	}
}

// backfillSeeds is how many seeds TestBackfillEpisodesArePlanted draws
// the demo's backfill with (~1 s of CPU each). Seed 7 draws, on
// support-agent, two minutes of a few failed calls more than usual
// (TestNoFalseAlarms, "a managed API's unlucky minutes"); seeds 7, 10 and
// 15 the memory-bound decode whose ITL rises least.
const backfillSeeds = 16

// shownOn is the service on whose calls each planted incident shows: the
// episode detector watches a call's TTFT, ITL and errors, so a slow
// retrieval, before the call, shows on none.
var shownOn = map[Incident]string{
	ColdStart: ragService, LongPrompt: ragService, NetworkDelay: ragService,
	MemoryBoundDecode: ragService, KVSaturation: ragService,
	ProviderSlowness: agentService, RateLimits: agentService,
	BatchSurge: summaryService,
}

// The demo's 4-hour backfill, seed after seed: every episode the detector
// finds on an app is a planted incident of that app, and every planted
// incident long enough to open one (Enter minutes) has exactly one.
func TestBackfillEpisodesArePlanted(t *testing.T) {
	for seed := range int64(backfillSeeds) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			now := base.Add(DefaultBackfill + time.Duration(seed)*7919*time.Millisecond)
			from := now.Add(-DefaultBackfill)
			phases := PlannedBackfill(from, now)
			srv, err := StartMetricsOnlyServer(summaryModel)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			s := newSim(Config{Seed: seed}, from, phases)
			s.addSummarizer(srv, from)
			s.stopAt = now
			// In chunks, as Run sends it, keeping what the minutes need.
			var all []call
			for t := from; t.Before(now); t = t.Add(15 * time.Minute) {
				s.advance(t)
				all = callsOf(s.take().Requests, all)
			}
			s.advance(now)
			s.drain()
			all = callsOf(s.take().Requests, all)
			for _, service := range []string{ragService, agentService, summaryService} {
				eps := episode.Detect(requestMinutes(all, service), episode.Config{TTFTObjective: 10_000})
				found := map[Phase]int{}
				for _, e := range eps {
					var planted []Phase
					for _, ph := range phases {
						// A queue drains for a few minutes after its incident.
						if shownOn[ph.Incident] == service && e.Start.Before(ph.To.Add(5*time.Minute)) && e.End.After(ph.From) {
							planted = append(planted, ph)
						}
					}
					if len(planted) != 1 {
						t.Errorf("%s episode %s–%s (%s) over %d planted incidents, want 1", service, e.Start.Format("15:04"), e.End.Format("15:04"), e.Signals, len(planted))
						continue
					}
					found[planted[0]]++
				}
				for _, ph := range phases {
					if shownOn[ph.Incident] != service || ph.To.Sub(ph.From) < time.Duration(episode.DefaultConfig.Enter)*time.Minute {
						continue
					}
					if found[ph] != 1 {
						t.Errorf("%s %s %s–%s: %d episodes, want 1", service, ph.Incident, ph.From.Format("15:04"), ph.To.Format("15:04"), found[ph])
					}
				}
			}
		})
	}
}

// call is what requestMinutes reads of a Request.
type call struct {
	service   string
	start     time.Time
	err       bool
	ttft, itl time.Duration
	// output is how many tokens it generated.
	output int
}

// callsOf appends the calls of reqs to to.
func callsOf(reqs []Request, to []call) []call {
	for _, r := range reqs {
		to = append(to, call{service: r.Service, start: r.Start, err: r.Error, ttft: r.TTFT, itl: r.ITL(), output: r.OutputTokens})
	}
	return to
}

// requestMinutes is a service's minutes as the per-minute rollup holds
// them: requests by the minute they started, TTFT and ITL in 5 % buckets.
func requestMinutes(calls []call, service string) []episode.Minute {
	bucket := func(v float64) float64 {
		g := math.Log(1.05)
		return math.Exp((math.Floor(math.Log(v)/g) + 0.5) * g)
	}
	type counts struct {
		requests, errors int64
		ttft, itl        map[float64]int64
	}
	by := map[time.Time]*counts{}
	for _, r := range calls {
		if r.service != service {
			continue
		}
		t := r.start.UTC().Truncate(time.Minute)
		m := by[t]
		if m == nil {
			m = &counts{ttft: map[float64]int64{}, itl: map[float64]int64{}}
			by[t] = m
		}
		m.requests++
		if r.err {
			m.errors++
			continue
		}
		m.ttft[bucket(float64(r.ttft)/float64(time.Millisecond))]++
		if r.output >= 2 {
			m.itl[bucket(float64(r.itl)/float64(time.Millisecond))]++
		}
	}
	out := make([]episode.Minute, 0, len(by))
	for t, m := range by {
		out = append(out, episode.Minute{Start: t, Requests: m.requests, Errors: m.errors,
			TTFT: episode.HistogramOf(m.ttft), ITL: episode.HistogramOf(m.itl)})
	}
	slices.SortFunc(out, func(a, b episode.Minute) int { return a.Start.Compare(b.Start) })
	return out
}

// A planted rate-limits incident (5 minutes, 30 % of the support agent's
// calls refused instead of 5 %) opens an errors episode over it, seed
// after seed: the detector's guard against noisy quiet minutes
// (TestNoFalseAlarms, "a managed API's unlucky minutes") leaves a real
// rise plain.
func TestRateLimitsOpenAnErrorsEpisode(t *testing.T) {
	for seed := range int64(10) {
		from := base.Add(time.Duration(seed) * 7919 * time.Millisecond)
		limits := Phase{Incident: RateLimits, From: from.Add(90 * time.Minute), To: from.Add(95 * time.Minute)}
		now := limits.To.Add(15 * time.Minute)
		s := newSim(Config{Seed: 900 + seed}, from, []Phase{limits})
		s.stopAt = now
		s.advance(now)
		s.drain()
		eps := episode.Detect(requestMinutes(callsOf(s.take().Requests, nil), agentService), episode.Config{TTFTObjective: 10_000})
		if len(eps) != 1 || eps[0].Signals&episode.SignalErrors == 0 || !eps[0].Start.Before(limits.To) || !eps[0].End.After(limits.From) {
			t.Errorf("seed %d: support-agent episodes %+v; want one errors episode over the rate limits %s–%s", 900+seed, eps, limits.From.Format("15:04"), limits.To.Format("15:04"))
		}
	}
}
