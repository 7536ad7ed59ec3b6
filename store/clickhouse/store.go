// Package clickhouse is Tokenpath's event store: spans, llm_requests,
// metric_points and events. One SQL dialect and one set of migrations run
// on two transports: the embedded engine (chDB, the default) and a
// ClickHouse server or cluster through clickhouse-go.
package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Config selects and tunes the transport.
type Config struct {
	// URL of a ClickHouse server (clickhouse://user:pass@host:9000/db).
	// Empty selects the embedded engine in DataDir.
	URL string
	// DataDir holds the embedded engine's files (…/clickhouse).
	DataDir string
	// Cluster, when set, renders ReplicatedMergeTree + Distributed DDL
	// with ON CLUSTER (server mode only).
	Cluster string
	// RetentionDays is the TTL of every table.
	RetentionDays int
	// MaxExecutionTime bounds page queries so one slow read cannot hold
	// one of the embedded engine's few connections for long.
	MaxExecutionTime time.Duration
}

// backend is one transport. Queries arrive with arguments already bound.
type backend interface {
	exec(ctx context.Context, sql string) error
	query(ctx context.Context, sql string) (*Result, error)
	insert(ctx context.Context, b *Batch) error
	close() error
}

// Store is the event store handle; safe for concurrent use.
type Store struct {
	cfg Config
	b   backend
	log *slog.Logger
}

// MinServerVersion is the oldest ClickHouse server the schema works on:
// llm_requests' projections need deduplicate_merge_projection_mode (24.8),
// ReplacingMergeTree's is_deleted column arrived in 23.2, and Map with
// LowCardinality keys, bloom_filter indexes and DateTime64 come before it.
const MinServerVersion = "24.8"

// MaxQuerySize is the longest statement the store lets the engine parse
// (the session's max_query_size; ClickHouse's default is 256 KiB): the
// assembler lists up to 20k trace ids (~700 KB) in one statement.
const MaxQuerySize = 4 << 20

// Open connects to (or starts) the configured engine. It does not migrate.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if cfg.RetentionDays <= 0 {
		cfg.RetentionDays = 30
	}
	if cfg.MaxExecutionTime <= 0 {
		cfg.MaxExecutionTime = 30 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	var (
		b   backend
		err error
	)
	if cfg.URL == "" {
		if cfg.Cluster != "" {
			return nil, errors.New("TOKENPATH_CLICKHOUSE_CLUSTER needs TOKENPATH_CLICKHOUSE_URL: the embedded engine is a single node")
		}
		b, err = openEmbedded(cfg)
	} else {
		b, err = openServer(ctx, cfg, log)
	}
	if err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, b: b, log: log}, nil
}

// Embedded reports whether the store runs the in-process engine.
func (s *Store) Embedded() bool { return s.cfg.URL == "" }

// TakesNative reports whether Insert accepts batches of pre-encoded Native
// blocks (SpanBlocksBatch): the embedded engine reads them from a file as
// they are; clickhouse-go wants column values.
func (s *Store) TakesNative() bool { return s.Embedded() }

// Close releases the engine or the connection pool.
func (s *Store) Close() error { return s.b.close() }

// Exec runs a statement with ? placeholders bound to args (see Bind).
func (s *Store) Exec(ctx context.Context, sql string, args ...any) error {
	q, err := Bind(sql, args...)
	if err != nil {
		return err
	}
	return s.b.exec(ctx, q)
}

// Query runs a SELECT with ? placeholders bound to args and returns all rows.
// Keep results small: pages aggregate in SQL.
func (s *Store) Query(ctx context.Context, sql string, args ...any) (*Result, error) {
	q, err := Bind(sql, args...)
	if err != nil {
		return nil, err
	}
	t := timed(ctx, q, func(ctx context.Context) (int, error) {
		r, err := s.Query(ctx, q)
		if err != nil {
			return 0, err
		}
		return r.Len(), nil
	})
	r, err := s.b.query(ctx, q)
	if err != nil {
		t.done(0)
		return nil, err
	}
	t.done(r.Len())
	return r, nil
}

// Insert writes one batch in one statement.
func (s *Store) Insert(ctx context.Context, b *Batch) error {
	if b.Rows() == 0 {
		return nil
	}
	if err := b.check(); err != nil {
		return err
	}
	defer timed(ctx, "INSERT INTO "+b.Table, nil).done(b.Rows())
	if err := s.b.insert(ctx, b); err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", b.Rows(), b.Table, err)
	}
	return nil
}

// Ping checks that the engine answers.
func (s *Store) Ping(ctx context.Context) error {
	if e, ok := s.b.(*embedded); ok {
		return e.ping(ctx)
	}
	_, err := s.Query(ctx, "SELECT 1")
	return err
}

// Version returns the engine's version() string.
func (s *Store) Version(ctx context.Context) (string, error) {
	r, err := s.Query(ctx, "SELECT version() AS v")
	if err != nil {
		return "", err
	}
	if len(r.Rows) != 1 {
		return "", errors.New("version(): no row")
	}
	return r.Row(0).String("v"), nil
}

// versionAtLeast compares dotted numeric versions ("24.3.1.2" ≥ "23.8").
func versionAtLeast(have, want string) bool {
	hp, wp := strings.Split(have, "."), strings.Split(want, ".")
	for i := range wp {
		var h, w int
		if i < len(hp) {
			fmt.Sscanf(hp[i], "%d", &h)
		}
		fmt.Sscanf(wp[i], "%d", &w)
		if h != w {
			return h > w
		}
	}
	return true
}
