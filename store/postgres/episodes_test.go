package postgres

import (
	"context"
	"testing"
	"time"
)

// An episode's recovering_since is stored, read back, and cleared when a
// later pass finds the episode anomalous again or ended.
func TestEpisodeRecoveringRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	p, err := s.EnsureProjectWithKey(ctx, "p", "tp_episode_test_key_long_enough_x")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC)
	at := func(m int) *time.Time { v := t0.Add(time.Duration(m) * time.Minute); return &v }
	read := func() Episode {
		t.Helper()
		eps, err := s.Episodes(ctx, p, "vllm", t0, *at(60))
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != 1 {
			t.Fatalf("got %d episodes, want 1: %+v", len(eps), eps)
		}
		return eps[0]
	}
	e := Episode{ProjectID: p, Service: "vllm", Start: *at(23), Signals: "ttft", Peak: *at(25), PeakTTFTMs: 4000, RecoveringSince: at(28)}
	if err := s.ReplaceEpisodes(ctx, p, t0, []Episode{e}); err != nil {
		t.Fatal(err)
	}
	got := read()
	if got.End != nil || got.RecoveringSince == nil || !got.RecoveringSince.Equal(*at(28)) {
		t.Fatalf("stored ongoing, recovering since 03:28; read end %v, recovering since %v", got.End, got.RecoveringSince)
	}
	if one, err := s.Episode(ctx, p, got.ID); err != nil || one.RecoveringSince == nil || !one.RecoveringSince.Equal(*at(28)) {
		t.Errorf("Episode(%d) = %+v, %v; want recovering since 03:28", got.ID, one, err)
	}
	e.RecoveringSince, e.End = nil, at(28)
	if err := s.ReplaceEpisodes(ctx, p, t0, []Episode{e}); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.RecoveringSince != nil || got.End == nil {
		t.Errorf("ended: read end %v, recovering since %v; want ended, not recovering", got.End, got.RecoveringSince)
	}
}
