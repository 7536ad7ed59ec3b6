package demo

import (
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
	minutes := requestMinutes(s.take(), summaryService)
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

// requestMinutes is a service's minutes as the per-minute rollup holds
// them: requests by the minute they started, TTFT and ITL in 5 % buckets.
func requestMinutes(sc *Scenario, service string) []episode.Minute {
	bucket := func(v float64) float64 {
		g := math.Log(1.05)
		return math.Exp((math.Floor(math.Log(v)/g) + 0.5) * g)
	}
	type counts struct {
		requests, errors int64
		ttft, itl        map[float64]int64
	}
	by := map[time.Time]*counts{}
	for _, r := range sc.Requests {
		if r.Service != service {
			continue
		}
		t := r.Start.UTC().Truncate(time.Minute)
		m := by[t]
		if m == nil {
			m = &counts{ttft: map[float64]int64{}, itl: map[float64]int64{}}
			by[t] = m
		}
		m.requests++
		if r.Error {
			m.errors++
			continue
		}
		m.ttft[bucket(float64(r.TTFT)/float64(time.Millisecond))]++
		if r.OutputTokens >= 2 {
			m.itl[bucket(float64(r.ITL())/float64(time.Millisecond))]++
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
