package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoSession means the session cookie is unknown, expired, or its key
// was revoked.
var ErrNoSession = errors.New("no such session")

// Session is a logged-in browser.
type Session struct {
	ProjectID int64
	KeyID     int64
	ExpiresAt time.Time
}

// CreateSession logs a browser in with an API key and returns the session
// id for the cookie (shown once; only its hash is stored).
func (s *Store) CreateSession(ctx context.Context, key string, ttl time.Duration) (id string, sess Session, err error) {
	err = s.Pool.QueryRow(ctx, "SELECT id, project_id FROM api_keys WHERE hash = $1 AND revoked_at IS NULL", HashKey(key)).
		Scan(&sess.KeyID, &sess.ProjectID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", sess, ErrUnknownKey
	}
	if err != nil {
		return "", sess, fmt.Errorf("look up API key: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", sess, err
	}
	id = base64.RawURLEncoding.EncodeToString(b[:])
	sess.ExpiresAt = time.Now().Add(ttl).UTC()
	h := sha256.Sum256([]byte(id))
	if _, err := s.Pool.Exec(ctx, "INSERT INTO sessions (id_hash, project_id, api_key_id, expires_at) VALUES ($1, $2, $3, $4)",
		h[:], sess.ProjectID, sess.KeyID, sess.ExpiresAt); err != nil {
		return "", sess, fmt.Errorf("create session: %w", err)
	}
	// Opportunistic cleanup keeps the table small without a cron job.
	_, _ = s.Pool.Exec(ctx, "DELETE FROM sessions WHERE expires_at < now() - interval '1 day'")
	return id, sess, nil
}

// SessionFor resolves a session cookie; a revoked key ends its sessions.
func (s *Store) SessionFor(ctx context.Context, id string) (Session, error) {
	h := sha256.Sum256([]byte(id))
	var sess Session
	err := s.Pool.QueryRow(ctx, `SELECT s.project_id, s.api_key_id, s.expires_at FROM sessions s
		JOIN api_keys k ON k.id = s.api_key_id AND k.revoked_at IS NULL
		WHERE s.id_hash = $1 AND s.expires_at > now()`, h[:]).Scan(&sess.ProjectID, &sess.KeyID, &sess.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return sess, ErrNoSession
	}
	if err != nil {
		return sess, fmt.Errorf("look up session: %w", err)
	}
	return sess, nil
}

// DeleteSession logs a browser out.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	h := sha256.Sum256([]byte(id))
	_, err := s.Pool.Exec(ctx, "DELETE FROM sessions WHERE id_hash = $1", h[:])
	return err
}
