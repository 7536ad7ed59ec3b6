package web

import (
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// Without an ongoing episode the lead line is the one that ended last,
// named by its verdict or, before its diagnosis, by what departed; the
// strip places every episode on the window.
func TestEpisodesViewLeadsWithTheLastResolved(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC)
	at := func(m int) *time.Time { v := t0.Add(time.Duration(m) * time.Minute); return &v }
	eps := []postgres.Episode{
		{Service: "vllm", Start: *at(10), End: at(28), Verdict: "queueing", Signals: "ttft"},
		{Service: "chat", Start: *at(30), End: at(41), Signals: "errors"},
	}
	v := episodesView(eps, diagnose.Range{From: t0, To: *at(60)}, *at(60))
	if len(v.Now) != 1 || v.Now[0].Text != "Errors up 03:30–03:41 (11 min), resolved 03:41" || v.Now[0].Ongoing {
		t.Fatalf("lead = %+v, want chat's error episode, resolved", v.Now)
	}
	if len(v.Strips) != 2 || v.Strips[1].Service != "vllm" {
		t.Fatalf("strips = %+v", v.Strips)
	}
	m := v.Strips[1].Episodes[0]
	if m.X != 166 || m.Width != 300 || m.Verdict != "queueing" {
		t.Errorf("vllm's mark at x=%d width=%d (%s), want 166, 300, queueing", m.X, m.Width, m.Verdict)
	}
	eps[0].End = nil
	v = episodesView(eps, diagnose.Range{From: t0, To: *at(60)}, *at(60))
	if len(v.Now) != 1 || v.Now[0].Text != "Queueing since 03:10, 50 min, ongoing" {
		t.Errorf("with vllm's episode ongoing, lead = %+v", v.Now)
	}
}

// An episode whose service went silent never reads "resolved": ongoing, it
// says since when no traffic came; ended by the silence, it says so.
func TestEpisodeTextSilence(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC)
	at := func(m int) *time.Time { v := t0.Add(time.Duration(m) * time.Minute); return &v }
	e := postgres.Episode{Service: "vllm", Start: *at(10), Verdict: "queueing", Signals: "ttft", SilentSince: at(30)}
	if got, want := episodeText(e, *at(33)), "Queueing since 03:10, 23 min, ongoing, no traffic since 03:30"; got != want {
		t.Errorf("ongoing: %q, want %q", got, want)
	}
	e.End = at(35)
	if got, want := episodeText(e, *at(50)), "Queueing 03:10–03:35 (25 min), no traffic since 03:30"; got != want {
		t.Errorf("ended silent: %q, want %q", got, want)
	}
}

// An open episode whose newest minutes are healthy reads "recovering
// since" instead of "ongoing", in the lead line and on its strip mark,
// whose healthy tail starts at that minute.
func TestEpisodeTextRecovering(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC)
	at := func(m int) *time.Time { v := t0.Add(time.Duration(m) * time.Minute); return &v }
	e := postgres.Episode{Service: "vllm", Start: *at(23), Verdict: "queueing", Signals: "ttft", RecoveringSince: at(28)}
	v := episodesView([]postgres.Episode{e}, diagnose.Range{From: t0, To: *at(40)}, *at(30))
	if len(v.Now) != 1 || v.Now[0].Text != "Queueing since 03:23, 7 min · recovering since 03:28" || !v.Now[0].Recovering || !v.Now[0].Ongoing {
		t.Fatalf("lead = %+v, want vllm's queueing episode, recovering since 03:28", v.Now)
	}
	m := v.Strips[0].Episodes[0]
	if m.X != 575 || m.RecoveringX != 700 || !m.Ongoing {
		t.Errorf("mark at x=%d, recovering from x=%d; want 575 and 700 (03:28 of 03:00–03:40)", m.X, m.RecoveringX)
	}
	e.RecoveringSince = nil
	if got := episodeText(e, *at(30)); got != "Queueing since 03:23, 7 min, ongoing" {
		t.Errorf("not recovering: %q", got)
	}
}
