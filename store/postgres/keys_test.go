package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestEnsureProjectWithKey(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	const key = "bootstrap-key-from-env-0123456789"

	id1, err := s.EnsureProjectWithKey(ctx, "default", key)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := s.EnsureProjectWithKey(ctx, "default", key)
	if err != nil {
		t.Fatalf("second call: %v", err)
	}
	if id1 != id2 {
		t.Errorf("project id changed: %d then %d", id1, id2)
	}
	if got, err := s.ProjectForKey(ctx, key); err != nil || got != id1 {
		t.Errorf("ProjectForKey = %d, %v; want %d", got, err, id1)
	}
	keys, err := s.ListKeys(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].Name != "bootstrap" || keys[0].Prefix != key[:8] {
		t.Errorf("keys after two ensures = %+v, want one bootstrap key with prefix %q", keys, key[:8])
	}

	// The same key cannot silently move to another project.
	if _, err := s.EnsureProjectWithKey(ctx, "other", key); err == nil {
		t.Error("a key of project default was accepted for project other")
	}

	// A revoked bootstrap key stays revoked across restarts.
	if err := s.RevokeKey(ctx, id1, keys[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsureProjectWithKey(ctx, "default", key); !errors.Is(err, ErrKeyRevoked) {
		t.Errorf("ensure with revoked key: %v, want ErrKeyRevoked", err)
	}
}

func TestKeyLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	project, err := s.EnsureProjectWithKey(ctx, "p1", "tp_first_key_of_p1_with_enough_length")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.EnsureProjectWithKey(ctx, "p2", "tp_first_key_of_p2_with_enough_length")
	if err != nil {
		t.Fatal(err)
	}

	key, err := s.CreateKey(ctx, project, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "tp_") || len(key) != 3+52 {
		t.Errorf("key %q: want tp_ + 52 base32 characters", key)
	}
	key2, err := s.CreateKey(ctx, project, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if key2 == key {
		t.Error("two CreateKey calls returned the same key")
	}
	if _, err := s.CreateKey(ctx, 999999, "x"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("CreateKey on a missing project: %v", err)
	}

	got, err := s.ProjectForKey(ctx, key)
	if err != nil || got != project {
		t.Fatalf("ProjectForKey = %d, %v; want %d", got, err, project)
	}
	for _, bad := range []string{"", "tp_nope", key + "x", strings.ToUpper(key)} {
		if _, err := s.ProjectForKey(ctx, bad); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("ProjectForKey(%q) = %v, want ErrUnknownKey", bad, err)
		}
	}

	keys, err := s.ListKeys(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	var created APIKey
	for _, k := range keys {
		if k.Prefix == key[:8] && k.Name == "ci" && k.LastUsedAt != nil {
			created = k
		}
	}
	if created.ID == 0 {
		t.Fatalf("ListKeys = %+v: no used key named ci with prefix %q", keys, key[:8])
	}
	if len(keys) != 3 {
		t.Errorf("ListKeys returned %d keys, want 3", len(keys))
	}

	// Never stored in clear: not in any column, in any encoding postgres
	// would print.
	var row string
	if err := s.Pool.QueryRow(ctx, "SELECT k::text FROM api_keys k WHERE id = $1", created.ID).Scan(&row); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(row, key) || strings.Contains(row, key[3:]) {
		t.Errorf("api_keys row contains the key: %s", row)
	}

	// Another project cannot revoke it.
	if err := s.RevokeKey(ctx, other, created.ID); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("revoke from another project: %v, want ErrUnknownKey", err)
	}
	if _, err := s.ProjectForKey(ctx, key); err != nil {
		t.Errorf("key stopped working after a refused revoke: %v", err)
	}

	if err := s.RevokeKey(ctx, project, created.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, project, created.ID); err != nil {
		t.Errorf("second revoke: %v, want no-op", err)
	}
	if _, err := s.ProjectForKey(ctx, key); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("revoked key: %v, want ErrUnknownKey", err)
	}
	if got, err := s.ProjectForKey(ctx, key2); err != nil || got != project {
		t.Errorf("revoking one key broke another: %d, %v", got, err)
	}
	keys, _ = s.ListKeys(ctx, project)
	for _, k := range keys {
		if k.ID == created.ID && k.RevokedAt == nil {
			t.Error("ListKeys does not show the revocation")
		}
	}
}

func TestDisplayPrefixHidesShortKeys(t *testing.T) {
	for _, key := range []string{"devkey", "0123456789abcdef", "tp_" + strings.Repeat("a", 52)} {
		p := displayPrefix(key)
		if len(p) > 8 || (len(key) < 32 && len(p) > len(key)/4) {
			t.Errorf("displayPrefix(%q) = %q reveals too much", key, p)
		}
		if !strings.HasPrefix(key, p) {
			t.Errorf("displayPrefix(%q) = %q is not a prefix", key, p)
		}
	}
}
