package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresScrapeTargets is the ScrapeTargetStore on PostgreSQL: targets are
// rows of scrape_targets, and each scrape updates the row's last_scrape_at,
// last_error and up.
type PostgresScrapeTargets struct {
	Pool *pgxpool.Pool
}

// ProjectID returns the id of the project named name.
func (p PostgresScrapeTargets) ProjectID(ctx context.Context, name string) (int64, error) {
	var id int64
	err := p.Pool.QueryRow(ctx, "SELECT id FROM projects WHERE name = $1", name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("no project named %q (TOKENPATH_BOOTSTRAP_KEY creates it)", name)
	}
	if err != nil {
		return 0, fmt.Errorf("look up project %q: %w", name, err)
	}
	return id, nil
}

// ScrapeTargets reads every project's targets.
func (p PostgresScrapeTargets) ScrapeTargets(ctx context.Context) ([]ScrapeTarget, error) {
	rows, err := p.Pool.Query(ctx, "SELECT id, project_id, url, interval_s, timeout_s, service, labels::text FROM scrape_targets ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("read scrape_targets: %w", err)
	}
	defer rows.Close()
	var out []ScrapeTarget
	for rows.Next() {
		var (
			t                 ScrapeTarget
			project           int64
			interval, timeout int32
			labels            string
		)
		if err := rows.Scan(&t.ID, &project, &t.URL, &interval, &timeout, &t.Service, &labels); err != nil {
			return nil, fmt.Errorf("read scrape_targets: %w", err)
		}
		t.ProjectID = uint32(project)
		t.Interval = time.Duration(interval) * time.Second
		t.Timeout = time.Duration(timeout) * time.Second
		t.Labels = labelMap(labels)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read scrape_targets: %w", err)
	}
	return out, nil
}

// labelMap reads the labels document; the UI writes strings, but a number
// or boolean put there by hand is kept as its JSON text.
func labelMap(doc string) map[string]string {
	var raw map[string]json.RawMessage
	if json.Unmarshal([]byte(doc), &raw) != nil || len(raw) == 0 {
		return nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		out[k] = s
	}
	return out
}

// maxLastError bounds scrape_targets.last_error; the page shows one line.
const maxLastError = 1024

// RecordScrape stores a scrape's outcome in the target's row.
func (p PostgresScrapeTargets) RecordScrape(ctx context.Context, id int64, at time.Time, up bool, lastError string) error {
	// PostgreSQL text refuses NUL bytes and invalid UTF-8.
	lastError = strings.ToValidUTF8(strings.ReplaceAll(lastError, "\x00", ""), "?")
	if len(lastError) > maxLastError {
		lastError = strings.ToValidUTF8(lastError[:maxLastError], "")
	}
	_, err := p.Pool.Exec(ctx, "UPDATE scrape_targets SET last_scrape_at = $2, last_error = $3, up = $4 WHERE id = $1", id, at, lastError, up)
	if err != nil {
		return fmt.Errorf("record scrape of target %d: %w", id, err)
	}
	return nil
}
