package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoShare means a share link is unknown, revoked or expired. Callers
// answer all three alike, so a link's state is never revealed to someone
// who only guesses tokens.
var ErrNoShare = errors.New("no such share link")

// ShareLink is one stored share link. The token is never stored: TokenHash
// is its SHA-256, and ID names the link on the list and revoke pages.
type ShareLink struct {
	ID        int64
	ProjectID int64
	TokenHash []byte
	Path      string
	Title     string
	// Snapshot is the page's frozen data as JSON (see package share); it is
	// left empty by ListShares.
	Snapshot []byte
	// ChartPNG is the unfurl picture drawn with the snapshot (migration
	// 0006); nil when there is none. Only CreateShare and ShareChart touch
	// it; HasChart says whether a looked-up link has one.
	ChartPNG  []byte
	HasChart  bool
	CreatedAt time.Time
	ExpiresAt *time.Time // nil: never expires
	RevokedAt *time.Time // nil: active
}

// Active reports whether the link still opens at time now.
func (l ShareLink) Active(now time.Time) bool {
	return l.RevokedAt == nil && (l.ExpiresAt == nil || now.Before(*l.ExpiresAt))
}

// CreateShare stores a new link and returns it with its ID and creation
// time filled in.
func (s *Store) CreateShare(ctx context.Context, l ShareLink) (ShareLink, error) {
	if len(l.TokenHash) == 0 || len(l.Snapshot) == 0 {
		return l, errors.New("create share link: token hash and snapshot are required")
	}
	err := s.Pool.QueryRow(ctx, `INSERT INTO share_links (token_hash, project_id, path, title, snapshot, expires_at, chart_png)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, created_at`,
		l.TokenHash, l.ProjectID, l.Path, l.Title, string(l.Snapshot), l.ExpiresAt, l.ChartPNG).Scan(&l.ID, &l.CreatedAt)
	l.HasChart = len(l.ChartPNG) > 0
	if err != nil {
		return l, fmt.Errorf("create share link for project %d: %w", l.ProjectID, err)
	}
	return l, nil
}

// ActiveShare returns the link whose token hashes to tokenHash, snapshot
// included, or ErrNoShare when it is unknown, revoked or expired.
func (s *Store) ActiveShare(ctx context.Context, tokenHash []byte) (ShareLink, error) {
	var l ShareLink
	var snapshot string
	err := s.Pool.QueryRow(ctx, `SELECT id, project_id, token_hash, path, title, snapshot::text, chart_png IS NOT NULL, created_at, expires_at, revoked_at
		FROM share_links WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		tokenHash).Scan(&l.ID, &l.ProjectID, &l.TokenHash, &l.Path, &l.Title, &snapshot, &l.HasChart, &l.CreatedAt, &l.ExpiresAt, &l.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, ErrNoShare
	}
	if err != nil {
		return l, fmt.Errorf("look up share link: %w", err)
	}
	l.Snapshot = []byte(snapshot)
	return l, nil
}

// ShareChart returns the unfurl picture of the active link whose token
// hashes to tokenHash, or ErrNoShare when the link is unknown, revoked,
// expired or has no picture.
func (s *Store) ShareChart(ctx context.Context, tokenHash []byte) ([]byte, error) {
	var png []byte
	err := s.Pool.QueryRow(ctx, `SELECT chart_png FROM share_links
		WHERE token_hash = $1 AND chart_png IS NOT NULL AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		tokenHash).Scan(&png)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNoShare
	}
	if err != nil {
		return nil, fmt.Errorf("look up share chart: %w", err)
	}
	return png, nil
}

// ShareByID returns one link of the project, whatever its state, without
// its snapshot; ErrNoShare when the project has no such link.
func (s *Store) ShareByID(ctx context.Context, projectID, id int64) (ShareLink, error) {
	var l ShareLink
	err := s.Pool.QueryRow(ctx, `SELECT id, project_id, token_hash, path, title, created_at, expires_at, revoked_at
		FROM share_links WHERE id = $1 AND project_id = $2`, id, projectID).
		Scan(&l.ID, &l.ProjectID, &l.TokenHash, &l.Path, &l.Title, &l.CreatedAt, &l.ExpiresAt, &l.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, ErrNoShare
	}
	if err != nil {
		return l, fmt.Errorf("look up share link %d: %w", id, err)
	}
	return l, nil
}

// ListShares returns the project's links, newest first, revoked and expired
// ones included, without their snapshots.
func (s *Store) ListShares(ctx context.Context, projectID int64, limit int) ([]ShareLink, error) {
	if limit <= 0 {
		limit = 200
	}
	rows, err := s.Pool.Query(ctx, `SELECT id, project_id, token_hash, path, title, created_at, expires_at, revoked_at
		FROM share_links WHERE project_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2`, projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("list share links of project %d: %w", projectID, err)
	}
	links, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ShareLink, error) {
		var l ShareLink
		err := row.Scan(&l.ID, &l.ProjectID, &l.TokenHash, &l.Path, &l.Title, &l.CreatedAt, &l.ExpiresAt, &l.RevokedAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list share links of project %d: %w", projectID, err)
	}
	return links, nil
}

// RevokeShare revokes link id of the project; it stops opening at once.
// Revoking twice keeps the first time; a link of another project (or none)
// yields ErrNoShare.
func (s *Store) RevokeShare(ctx context.Context, projectID, id int64) error {
	tag, err := s.Pool.Exec(ctx,
		"UPDATE share_links SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 AND project_id = $2", id, projectID)
	if err != nil {
		return fmt.Errorf("revoke share link %d of project %d: %w", id, projectID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke share link %d of project %d: %w", id, projectID, ErrNoShare)
	}
	return nil
}
