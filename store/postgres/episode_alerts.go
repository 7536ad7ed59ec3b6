package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EpisodeAlert is one alert posted (or tried) when an episode of a
// service started (migration 0007).
type EpisodeAlert struct {
	ID           int64
	ProjectID    int64
	Service      string
	EpisodeStart time.Time
	FiredAt      time.Time
	Verdict      string
	Summary      string
	ShareURL     string
	Delivered    bool
	Error        string
}

const episodeAlertColumns = "id, project_id, service, episode_start, fired_at, verdict, summary, share_url, delivered, error"

func scanEpisodeAlert(row pgx.CollectableRow) (EpisodeAlert, error) {
	var a EpisodeAlert
	err := row.Scan(&a.ID, &a.ProjectID, &a.Service, &a.EpisodeStart, &a.FiredAt, &a.Verdict, &a.Summary, &a.ShareURL, &a.Delivered, &a.Error)
	a.EpisodeStart, a.FiredAt = a.EpisodeStart.UTC(), a.FiredAt.UTC()
	return a, err
}

// RecordEpisodeAlert stores an alert attempt and returns its id.
func (s *Store) RecordEpisodeAlert(ctx context.Context, a EpisodeAlert) (int64, error) {
	var id int64
	err := s.Pool.QueryRow(ctx, `INSERT INTO episode_alerts (project_id, service, episode_start, fired_at, verdict, summary, share_url, delivered, error)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
		a.ProjectID, a.Service, a.EpisodeStart, a.FiredAt, a.Verdict, a.Summary, a.ShareURL, a.Delivered, a.Error).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record episode alert of %s: %w", a.Service, err)
	}
	return id, nil
}

// UpdateEpisodeAlertDelivery records a retry of alert a.ID.
func (s *Store) UpdateEpisodeAlertDelivery(ctx context.Context, a EpisodeAlert) error {
	if _, err := s.Pool.Exec(ctx, `UPDATE episode_alerts SET delivered = $2, error = $3 WHERE id = $1`, a.ID, a.Delivered, a.Error); err != nil {
		return fmt.Errorf("update episode alert %d: %w", a.ID, err)
	}
	return nil
}

// LastEpisodeAlert returns the latest episode alert of a service; ok is
// false when none fired.
func (s *Store) LastEpisodeAlert(ctx context.Context, projectID int64, service string) (EpisodeAlert, bool, error) {
	all, err := s.episodeAlerts(ctx, "WHERE project_id = $1 AND service = $2 ORDER BY fired_at DESC, id DESC LIMIT 1", projectID, service)
	if err != nil || len(all) == 0 {
		return EpisodeAlert{}, false, err
	}
	return all[0], true, nil
}

// ListEpisodeAlerts returns the project's latest episode alerts, newest
// first.
func (s *Store) ListEpisodeAlerts(ctx context.Context, projectID int64, limit int) ([]EpisodeAlert, error) {
	return s.episodeAlerts(ctx, "WHERE project_id = $1 ORDER BY fired_at DESC, id DESC LIMIT $2", projectID, limit)
}

func (s *Store) episodeAlerts(ctx context.Context, where string, args ...any) ([]EpisodeAlert, error) {
	rows, err := s.Pool.Query(ctx, "SELECT "+episodeAlertColumns+" FROM episode_alerts "+where, args...)
	if err != nil {
		return nil, fmt.Errorf("episode alerts of project %v: %w", args[0], err)
	}
	out, err := pgx.CollectRows(rows, scanEpisodeAlert)
	if err != nil {
		return nil, fmt.Errorf("episode alerts of project %v: %w", args[0], err)
	}
	return out, nil
}
