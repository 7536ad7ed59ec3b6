package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoTarget means the scrape target does not exist in this project.
var ErrNoTarget = errors.New("no such scrape target")

// ErrDuplicateTarget means the project already scrapes that URL.
var ErrDuplicateTarget = errors.New("this URL is already scraped")

// ScrapeTarget is a row of scrape_targets as the settings page shows it;
// the scraper (ingest) reads and updates the same rows.
type ScrapeTarget struct {
	ID           int64
	ProjectID    int64
	URL          string
	Service      string
	Interval     time.Duration
	Timeout      time.Duration
	CreatedAt    time.Time
	LastScrapeAt *time.Time // nil: not scraped yet
	LastError    string
	Up           bool
}

// ListTargets returns the project's scrape targets in the order they were
// added.
func (s *Store) ListTargets(ctx context.Context, projectID int64) ([]ScrapeTarget, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, project_id, url, service, interval_s, timeout_s, created_at, last_scrape_at, last_error, up
		FROM scrape_targets WHERE project_id = $1 ORDER BY id`, projectID)
	if err != nil {
		return nil, fmt.Errorf("list scrape targets of project %d: %w", projectID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ScrapeTarget, error) {
		var t ScrapeTarget
		var interval, timeout int32
		err := row.Scan(&t.ID, &t.ProjectID, &t.URL, &t.Service, &interval, &timeout, &t.CreatedAt, &t.LastScrapeAt, &t.LastError, &t.Up)
		t.Interval, t.Timeout = time.Duration(interval)*time.Second, time.Duration(timeout)*time.Second
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list scrape targets of project %d: %w", projectID, err)
	}
	return out, nil
}

// CreateTarget adds a scrape target; the timeout is 10 s or the interval,
// whichever is shorter (a scrape must end before the next is due). It
// returns ErrDuplicateTarget when the project already scrapes the URL.
func (s *Store) CreateTarget(ctx context.Context, projectID int64, url, service string, interval time.Duration) (int64, error) {
	secs := int(interval / time.Second)
	timeout := min(secs, 10)
	var id int64
	err := s.Pool.QueryRow(ctx, `INSERT INTO scrape_targets (project_id, url, service, interval_s, timeout_s)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`, projectID, url, service, secs, timeout).Scan(&id)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
			return 0, ErrDuplicateTarget
		}
		return 0, fmt.Errorf("create scrape target: %w", err)
	}
	return id, nil
}

// DeleteTarget removes a scrape target of the project.
func (s *Store) DeleteTarget(ctx context.Context, projectID, id int64) error {
	tag, err := s.Pool.Exec(ctx, "DELETE FROM scrape_targets WHERE id = $1 AND project_id = $2", id, projectID)
	if err != nil {
		return fmt.Errorf("delete scrape target %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete scrape target %d of project %d: %w", id, projectID, ErrNoTarget)
	}
	return nil
}
