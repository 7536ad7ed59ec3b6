package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoSLO means the SLO does not exist in this project.
var ErrNoSLO = errors.New("no such SLO")

// LockAlerts lets one node at a time evaluate SLO alerts.
const LockAlerts int32 = 0x746f6b10

// SLO metrics.
const (
	SLOMetricTTFT = "ttft" // time to first token must stay under ThresholdMs
	SLOMetricTPOT = "tpot" // time per output token (ITL) must stay under ThresholdMs
	SLOMetricE2E  = "e2e"  // end-to-end latency must stay under ThresholdMs
)

// SLO is a saved objective: Metric at Percentile must stay under
// ThresholdMs over Window, for a service ("" = every service) and model
// ("" = every model). A TPOT objective written as "≥ N tok/s" is stored as
// its time per token, 1000/N ms, so every metric reads "lower is better".
type SLO struct {
	ID          int64
	ProjectID   int64
	Service     string
	Model       string
	Metric      string
	Percentile  float64 // 50 ≤ p < 100
	ThresholdMs float64
	Window      string // e.g. "1h", "7d", "28d"
	CreatedAt   time.Time
}

// SLOAlert is one firing of an SLO's fast-burn alert.
type SLOAlert struct {
	ID         int64
	ProjectID  int64
	SLOID      int64
	FiredAt    time.Time
	BurnLong   float64
	BurnShort  float64
	Verdict    string
	Confidence float64
	Summary    string
	ShareURL   string
	Delivered  bool
	Error      string
}

const sloColumns = "id, project_id, service, model, metric, percentile, threshold_ms, time_window, created_at"

func scanSLO(row pgx.CollectableRow) (SLO, error) {
	var s SLO
	err := row.Scan(&s.ID, &s.ProjectID, &s.Service, &s.Model, &s.Metric, &s.Percentile, &s.ThresholdMs, &s.Window, &s.CreatedAt)
	return s, err
}

// ListSLOs returns the project's SLOs ordered by service, model and metric.
func (s *Store) ListSLOs(ctx context.Context, projectID int64) ([]SLO, error) {
	rows, err := s.Pool.Query(ctx, "SELECT "+sloColumns+" FROM slos WHERE project_id = $1 ORDER BY service, model, metric, id", projectID)
	if err != nil {
		return nil, fmt.Errorf("list SLOs of project %d: %w", projectID, err)
	}
	out, err := pgx.CollectRows(rows, scanSLO)
	if err != nil {
		return nil, fmt.Errorf("list SLOs of project %d: %w", projectID, err)
	}
	return out, nil
}

// CreateSLO saves a new SLO and returns it with its id. The caller
// validates; the table's CHECK constraints are the last line.
func (s *Store) CreateSLO(ctx context.Context, slo SLO) (SLO, error) {
	rows, err := s.Pool.Query(ctx, `INSERT INTO slos (project_id, service, model, metric, percentile, threshold_ms, time_window)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+sloColumns,
		slo.ProjectID, slo.Service, slo.Model, slo.Metric, slo.Percentile, slo.ThresholdMs, slo.Window)
	if err != nil {
		return SLO{}, fmt.Errorf("create SLO: %w", err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanSLO)
	if err != nil {
		return SLO{}, fmt.Errorf("create SLO: %w", err)
	}
	return out, nil
}

// DeleteSLO deletes an SLO of the project (and its alert history).
func (s *Store) DeleteSLO(ctx context.Context, projectID, id int64) error {
	tag, err := s.Pool.Exec(ctx, "DELETE FROM slos WHERE id = $1 AND project_id = $2", id, projectID)
	if err != nil {
		return fmt.Errorf("delete SLO %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete SLO %d of project %d: %w", id, projectID, ErrNoSLO)
	}
	return nil
}

// RecordSLOAlert stores a firing (delivered or not) and returns its id.
func (s *Store) RecordSLOAlert(ctx context.Context, a SLOAlert) (int64, error) {
	var id int64
	err := s.Pool.QueryRow(ctx, `INSERT INTO slo_alerts (project_id, slo_id, fired_at, burn_long, burn_short, verdict, confidence, summary, share_url, delivered, error)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id`,
		a.ProjectID, a.SLOID, a.FiredAt, a.BurnLong, a.BurnShort, a.Verdict, a.Confidence, a.Summary, a.ShareURL, a.Delivered, a.Error).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record alert of SLO %d: %w", a.SLOID, err)
	}
	return id, nil
}

// UpdateSLOAlertDelivery records a retry of alert a.ID: the burn rates
// then and whether it got through. FiredAt stays the first attempt, so a
// webhook broken for long gets a fresh diagnosis once the alert is stale.
func (s *Store) UpdateSLOAlertDelivery(ctx context.Context, a SLOAlert) error {
	_, err := s.Pool.Exec(ctx, `UPDATE slo_alerts SET burn_long = $2, burn_short = $3, delivered = $4, error = $5 WHERE id = $1`,
		a.ID, a.BurnLong, a.BurnShort, a.Delivered, a.Error)
	if err != nil {
		return fmt.Errorf("update alert %d: %w", a.ID, err)
	}
	return nil
}

// LastSLOAlert returns the SLO's latest alert; ok is false when it never
// fired.
func (s *Store) LastSLOAlert(ctx context.Context, sloID int64) (a SLOAlert, ok bool, err error) {
	rows, err := s.Pool.Query(ctx, "SELECT "+alertColumns+" FROM slo_alerts WHERE slo_id = $1 ORDER BY fired_at DESC, id DESC LIMIT 1", sloID)
	if err != nil {
		return a, false, fmt.Errorf("last alert of SLO %d: %w", sloID, err)
	}
	all, err := pgx.CollectRows(rows, scanAlert)
	if err != nil {
		return a, false, fmt.Errorf("last alert of SLO %d: %w", sloID, err)
	}
	if len(all) == 0 {
		return a, false, nil
	}
	return all[0], true, nil
}

const alertColumns = "id, project_id, slo_id, fired_at, burn_long, burn_short, verdict, confidence, summary, share_url, delivered, error"

func scanAlert(row pgx.CollectableRow) (SLOAlert, error) {
	var a SLOAlert
	err := row.Scan(&a.ID, &a.ProjectID, &a.SLOID, &a.FiredAt, &a.BurnLong, &a.BurnShort, &a.Verdict, &a.Confidence, &a.Summary, &a.ShareURL, &a.Delivered, &a.Error)
	return a, err
}

// ListSLOAlerts returns the project's latest alerts, newest first.
func (s *Store) ListSLOAlerts(ctx context.Context, projectID int64, limit int) ([]SLOAlert, error) {
	rows, err := s.Pool.Query(ctx, "SELECT "+alertColumns+" FROM slo_alerts WHERE project_id = $1 ORDER BY fired_at DESC, id DESC LIMIT $2", projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("list alerts of project %d: %w", projectID, err)
	}
	out, err := pgx.CollectRows(rows, scanAlert)
	if err != nil {
		return nil, fmt.Errorf("list alerts of project %d: %w", projectID, err)
	}
	return out, nil
}
