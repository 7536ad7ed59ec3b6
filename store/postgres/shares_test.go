package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestShareLinkLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	p1, err := s.EnsureProjectWithKey(ctx, "p1", "tp_share_test_key_of_p1_long_enough")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.EnsureProjectWithKey(ctx, "p2", "tp_share_test_key_of_p2_long_enough")
	if err != nil {
		t.Fatal(err)
	}
	hash := func(tok string) []byte { h := sha256.Sum256([]byte(tok)); return h[:] }
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Minute)

	live, err := s.CreateShare(ctx, ShareLink{ProjectID: p1, TokenHash: hash("live"), Path: "/diagnose?service=a",
		Title: "TTFT p95 rose", Snapshot: []byte(`{"kind":"diagnose","n":1}`), ExpiresAt: &future})
	if err != nil {
		t.Fatal(err)
	}
	if live.ID == 0 || live.CreatedAt.IsZero() {
		t.Fatalf("created link lacks id or time: %+v", live)
	}
	expired, err := s.CreateShare(ctx, ShareLink{ProjectID: p1, TokenHash: hash("expired"), Path: "/compare",
		Snapshot: []byte(`{}`), ExpiresAt: &past})
	if err != nil {
		t.Fatal(err)
	}
	forever, err := s.CreateShare(ctx, ShareLink{ProjectID: p2, TokenHash: hash("forever"), Path: "/diagnose", Snapshot: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if expired.ID == live.ID || forever.ID == live.ID {
		t.Fatalf("ids repeat: %d %d %d", live.ID, expired.ID, forever.ID)
	}

	got, err := s.ActiveShare(ctx, hash("live"))
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]any
	if err := json.Unmarshal(got.Snapshot, &snap); err != nil {
		t.Fatal(err)
	}
	if got.ID != live.ID || got.ProjectID != p1 || got.Title != "TTFT p95 rose" || snap["kind"] != "diagnose" || snap["n"] != 1.0 {
		t.Errorf("ActiveShare = %+v (snapshot %s)", got, got.Snapshot)
	}
	if _, err := s.ActiveShare(ctx, hash("forever")); err != nil {
		t.Errorf("a link without expiry does not open: %v", err)
	}
	for _, tok := range []string{"expired", "unknown"} {
		if _, err := s.ActiveShare(ctx, hash(tok)); !errors.Is(err, ErrNoShare) {
			t.Errorf("ActiveShare(%s) = %v, want ErrNoShare", tok, err)
		}
	}

	// Another project can neither see nor revoke the link.
	if err := s.RevokeShare(ctx, p2, live.ID); !errors.Is(err, ErrNoShare) {
		t.Errorf("project 2 revoked project 1's link: %v", err)
	}
	if _, err := s.ShareByID(ctx, p2, live.ID); !errors.Is(err, ErrNoShare) {
		t.Errorf("project 2 reads project 1's link: %v", err)
	}
	list, err := s.ListShares(ctx, p1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != expired.ID || list[1].ID != live.ID || list[0].Snapshot != nil {
		t.Errorf("ListShares(p1) = %+v, want expired then live, without snapshots", list)
	}

	if err := s.RevokeShare(ctx, p1, live.ID); err != nil {
		t.Fatal(err)
	}
	first, err := s.ShareByID(ctx, p1, live.ID)
	if err != nil || first.RevokedAt == nil || first.Active(time.Now()) {
		t.Fatalf("after revoke: %+v, %v", first, err)
	}
	if err := s.RevokeShare(ctx, p1, live.ID); err != nil {
		t.Errorf("second revoke: %v", err)
	}
	again, _ := s.ShareByID(ctx, p1, live.ID)
	if !again.RevokedAt.Equal(*first.RevokedAt) {
		t.Errorf("second revoke moved revoked_at from %v to %v", first.RevokedAt, again.RevokedAt)
	}
	if _, err := s.ActiveShare(ctx, hash("live")); !errors.Is(err, ErrNoShare) {
		t.Errorf("revoked link still opens: %v", err)
	}
}

func TestShareChartStoredWithLink(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	p, err := s.EnsureProjectWithKey(ctx, "charts", "tp_share_chart_test_key_long_enough")
	if err != nil {
		t.Fatal(err)
	}
	hash := func(tok string) []byte { h := sha256.Sum256([]byte("chart-" + tok)); return h[:] }
	png := []byte("\x89PNG\r\n\x1a\n picture bytes")
	with, err := s.CreateShare(ctx, ShareLink{ProjectID: p, TokenHash: hash("with"), Path: "/diagnose", Snapshot: []byte(`{}`), ChartPNG: png})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateShare(ctx, ShareLink{ProjectID: p, TokenHash: hash("without"), Path: "/requests/x", Snapshot: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.ActiveShare(ctx, hash("with")); err != nil || !l.HasChart || l.ChartPNG != nil {
		t.Errorf("ActiveShare(with) = HasChart %v, %d picture bytes, %v; want a flag and no bytes", l.HasChart, len(l.ChartPNG), err)
	}
	if l, err := s.ActiveShare(ctx, hash("without")); err != nil || l.HasChart {
		t.Errorf("ActiveShare(without) = HasChart %v, %v", l.HasChart, err)
	}
	got, err := s.ShareChart(ctx, hash("with"))
	if err != nil || string(got) != string(png) {
		t.Errorf("ShareChart = %q, %v; want the stored bytes", got, err)
	}
	if _, err := s.ShareChart(ctx, hash("without")); !errors.Is(err, ErrNoShare) {
		t.Errorf("ShareChart of a link without a picture = %v, want ErrNoShare", err)
	}
	if err := s.RevokeShare(ctx, p, with.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ShareChart(ctx, hash("with")); !errors.Is(err, ErrNoShare) {
		t.Errorf("ShareChart of a revoked link = %v, want ErrNoShare", err)
	}
}
