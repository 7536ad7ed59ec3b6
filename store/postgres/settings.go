package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Setting reads the project's document under key into v; found is false
// (and v untouched) when the key was never saved.
func (s *Store) Setting(ctx context.Context, projectID int64, key string, v any) (found bool, err error) {
	var raw []byte
	err = s.Pool.QueryRow(ctx, "SELECT value FROM settings WHERE project_id = $1 AND key = $2", projectID, key).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read setting %q of project %d: %w", key, projectID, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("decode setting %q of project %d: %w", key, projectID, err)
	}
	return true, nil
}

// PutSetting saves v as the project's document under key, replacing it.
func (s *Store) PutSetting(ctx context.Context, projectID int64, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode setting %q: %w", key, err)
	}
	_, err = s.Pool.Exec(ctx, `INSERT INTO settings (project_id, key, value, updated_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (project_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`, projectID, key, raw)
	if err != nil {
		return fmt.Errorf("save setting %q of project %d: %w", key, projectID, err)
	}
	return nil
}

// ProjectsWithSetting lists the projects that saved a document under key,
// for background jobs that only concern configured projects (alerts).
func (s *Store) ProjectsWithSetting(ctx context.Context, key string) ([]int64, error) {
	rows, err := s.Pool.Query(ctx, "SELECT project_id FROM settings WHERE key = $1 ORDER BY project_id", key)
	if err != nil {
		return nil, fmt.Errorf("projects with setting %q: %w", key, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("projects with setting %q: %w", key, err)
	}
	return ids, nil
}
