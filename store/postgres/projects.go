package postgres

import (
	"context"
	"fmt"
)

// EnsureProject returns the id of project name, creating it when missing.
func (s *Store) EnsureProject(ctx context.Context, name string) (int64, error) {
	if _, err := s.Pool.Exec(ctx, "INSERT INTO projects (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", name); err != nil {
		return 0, fmt.Errorf("create project %q: %w", name, err)
	}
	var id int64
	if err := s.Pool.QueryRow(ctx, "SELECT id FROM projects WHERE name = $1", name).Scan(&id); err != nil {
		return 0, fmt.Errorf("find project %q: %w", name, err)
	}
	return id, nil
}
