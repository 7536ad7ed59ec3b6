package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LockEpisodes lets one node at a time detect episodes.
const LockEpisodes int32 = 0x746f6b11

// ProjectIDs lists every project's id.
func (s *Store) ProjectIDs(ctx context.Context) ([]int64, error) {
	rows, err := s.Pool.Query(ctx, "SELECT id FROM projects ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	return ids, nil
}

// Episode is one stored incident of a service (migration 0005).
type Episode struct {
	ID        int64
	ProjectID int64
	Service   string
	Start     time.Time
	End       *time.Time // nil while ongoing
	// Signals is episode.Signal's text ("ttft,objective").
	Signals       string
	Peak          time.Time
	PeakTTFTMs    float64
	PeakErrorRate float64
	// BaselineTTFTMs is the baseline's TTFT p95 when it started (0: none).
	BaselineTTFTMs float64
	// BaselineFrom/To is the clean stretch before it; nil when none.
	BaselineFrom, BaselineTo *time.Time
	Verdict                  string
	Confidence               float64
	Summary                  string
	DiagnosedAt              *time.Time
	DiagnosedEnd             *time.Time
	// SilentSince is the first minute without a request when the service
	// went silent in the episode (migration 0007); nil otherwise.
	SilentSince *time.Time
	// DiagnosedAs is the service whose diagnosis the episode carries (an
	// inference server's episode carries the app's whose requests it
	// served, migration 0008); "" for its own.
	DiagnosedAs string
	// RecoveringSince is the minute after the last anomalous one while the
	// episode is open and its newest minutes are healthy (migration 0009);
	// nil otherwise.
	RecoveringSince *time.Time
}

// Recovering is RecoveringSince while the episode is ongoing, nil once it
// has ended: what the pages and the API show.
func (e Episode) Recovering() *time.Time {
	if e.End != nil {
		return nil
	}
	return e.RecoveringSince
}

// DiagnosisService is the service an episode's diagnosis reads.
func (e Episode) DiagnosisService() string {
	if e.DiagnosedAs != "" {
		return e.DiagnosedAs
	}
	return e.Service
}

const episodeColumns = "id, project_id, service, started_at, ended_at, signals, peak_at, peak_ttft_ms, peak_error_rate, baseline_ttft_ms, " +
	"baseline_from, baseline_to, verdict, confidence, summary, diagnosed_at, diagnosed_end, silent_since, diagnosed_as, recovering_since"

func scanEpisode(row pgx.CollectableRow) (Episode, error) {
	var e Episode
	err := row.Scan(&e.ID, &e.ProjectID, &e.Service, &e.Start, &e.End, &e.Signals, &e.Peak, &e.PeakTTFTMs, &e.PeakErrorRate, &e.BaselineTTFTMs,
		&e.BaselineFrom, &e.BaselineTo, &e.Verdict, &e.Confidence, &e.Summary, &e.DiagnosedAt, &e.DiagnosedEnd, &e.SilentSince, &e.DiagnosedAs, &e.RecoveringSince)
	for _, t := range []*time.Time{&e.Start, &e.Peak} {
		*t = t.UTC()
	}
	for _, t := range []*time.Time{e.End, e.BaselineFrom, e.BaselineTo, e.DiagnosedAt, e.DiagnosedEnd, e.SilentSince, e.RecoveringSince} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return e, err
}

// ReplaceEpisodes stores what a detection pass found for the project: every
// episode in eps is inserted or updated (by service and start, keeping its
// diagnosis), and every stored one that started at or after since and is
// not in eps is deleted (late data can move or dissolve an episode).
func (s *Store) ReplaceEpisodes(ctx context.Context, projectID int64, since time.Time, eps []Episode) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		services, starts := make([]string, len(eps)), make([]time.Time, len(eps))
		for i, e := range eps {
			services[i], starts[i] = e.Service, e.Start
		}
		if _, err := tx.Exec(ctx, `DELETE FROM episodes WHERE project_id = $1 AND started_at >= $2
			AND (service, started_at) NOT IN (SELECT * FROM unnest($3::text[], $4::timestamptz[]))`,
			projectID, since, services, starts); err != nil {
			return fmt.Errorf("delete dissolved episodes of project %d: %w", projectID, err)
		}
		b := &pgx.Batch{}
		for _, e := range eps {
			b.Queue(`INSERT INTO episodes (project_id, service, started_at, ended_at, signals, peak_at, peak_ttft_ms, peak_error_rate,
					baseline_ttft_ms, baseline_from, baseline_to, silent_since, recovering_since)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
				ON CONFLICT (project_id, service, started_at) DO UPDATE SET ended_at = EXCLUDED.ended_at, signals = EXCLUDED.signals,
					peak_at = EXCLUDED.peak_at, peak_ttft_ms = EXCLUDED.peak_ttft_ms, peak_error_rate = EXCLUDED.peak_error_rate,
					baseline_ttft_ms = EXCLUDED.baseline_ttft_ms, baseline_from = EXCLUDED.baseline_from, baseline_to = EXCLUDED.baseline_to,
					silent_since = EXCLUDED.silent_since, recovering_since = EXCLUDED.recovering_since`,
				projectID, e.Service, e.Start, e.End, e.Signals, e.Peak, e.PeakTTFTMs, e.PeakErrorRate, e.BaselineTTFTMs, e.BaselineFrom, e.BaselineTo,
				e.SilentSince, e.RecoveringSince)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("store episodes of project %d: %w", projectID, err)
		}
		return nil
	})
}

// Episodes returns the project's episodes that overlap [from, to) (an
// ongoing one overlaps every window after its start), of one service or
// of every service when service is "", oldest first.
func (s *Store) Episodes(ctx context.Context, projectID int64, service string, from, to time.Time) ([]Episode, error) {
	rows, err := s.Pool.Query(ctx, "SELECT "+episodeColumns+` FROM episodes
		WHERE project_id = $1 AND ($2 = '' OR service = $2) AND started_at < $4 AND (ended_at IS NULL OR ended_at > $3)
		ORDER BY started_at, service`, projectID, service, from, to)
	if err != nil {
		return nil, fmt.Errorf("episodes of project %d: %w", projectID, err)
	}
	out, err := pgx.CollectRows(rows, scanEpisode)
	if err != nil {
		return nil, fmt.Errorf("episodes of project %d: %w", projectID, err)
	}
	return out, nil
}

// Episode returns one episode of the project by id.
func (s *Store) Episode(ctx context.Context, projectID, id int64) (Episode, error) {
	rows, err := s.Pool.Query(ctx, "SELECT "+episodeColumns+" FROM episodes WHERE project_id = $1 AND id = $2", projectID, id)
	if err != nil {
		return Episode{}, fmt.Errorf("episode %d: %w", id, err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEpisode)
	if err != nil {
		return Episode{}, fmt.Errorf("episode %d: %w", id, err)
	}
	return e, nil
}

// EpisodeDiagnosis is the verdict recorded on an episode: when, the end it
// saw (nil: it was ongoing), and the service it diagnosed ("" for the
// episode's own).
type EpisodeDiagnosis struct {
	Verdict    string
	Confidence float64
	Summary    string
	At         time.Time
	SawEnd     *time.Time
	As         string
}

// RecordEpisodeDiagnosis keeps an episode's diagnosis.
func (s *Store) RecordEpisodeDiagnosis(ctx context.Context, id int64, d EpisodeDiagnosis) error {
	_, err := s.Pool.Exec(ctx, `UPDATE episodes SET verdict = $2, confidence = $3, summary = $4, diagnosed_at = $5, diagnosed_end = $6,
			diagnosed_as = $7 WHERE id = $1`,
		id, d.Verdict, d.Confidence, d.Summary, d.At, d.SawEnd, d.As)
	if err != nil {
		return fmt.Errorf("record diagnosis of episode %d: %w", id, err)
	}
	return nil
}
