package clickhouse

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"syscall"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// server talks to a ClickHouse server or cluster over the native protocol.
type server struct {
	conn driver.Conn
	log  *slog.Logger
	host string
	// settings go with every query (those only some server versions know).
	settings ch.Settings
}

// openServer connects and refuses a server older than MinServerVersion.
func openServer(ctx context.Context, cfg Config, log *slog.Logger) (*server, error) {
	s, err := dialServer(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	v, err := s.conn.ServerVersion()
	if err != nil {
		s.close()
		return nil, fmt.Errorf("clickhouse at %s: read version: %w", s.host, err)
	}
	have := fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch)
	if !versionAtLeast(have, MinServerVersion) {
		s.close()
		return nil, &VersionError{Host: s.host, Have: have}
	}
	// A server that knows projection filtering (25.x) gets it turned off,
	// as the embedded engine does (see projectionFiltering).
	known, err := s.query(ctx, "SELECT count() AS n FROM system.settings WHERE name = '"+projectionFiltering+"'")
	if err != nil {
		s.close()
		return nil, fmt.Errorf("clickhouse at %s: read settings: %w", s.host, err)
	}
	if known.Row(0).Int("n") > 0 {
		s.settings = ch.Settings{projectionFiltering: 0}
	}
	return s, nil
}

// projectionFiltering, the use of projections as an index for other
// queries, is turned off (0): every read filtering on start would
// otherwise read the start column of llm_requests' TTFT and E2E
// projections (migration 0010) to narrow its ranges, which made a
// newest-first page 16 → 55 ms. Reading a query from a projection, what
// those exist for, is not affected.
const projectionFiltering = "optimize_use_projection_filtering"

// dialServer opens the pool and pings it without the version check, so
// tests can drive the transport against the old server Debian packages.
func dialServer(ctx context.Context, cfg Config, log *slog.Logger) (*server, error) {
	opts, err := ch.ParseDSN(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("TOKENPATH_CLICKHOUSE_URL: %w", err)
	}
	host := strings.Join(opts.Addr, ",")
	opts.MaxOpenConns = 16
	opts.MaxIdleConns = 4
	opts.ConnMaxLifetime = time.Hour
	if opts.DialTimeout == 0 || opts.DialTimeout > 10*time.Second {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Settings == nil {
		opts.Settings = ch.Settings{}
	}
	opts.Settings["max_execution_time"] = int(cfg.MaxExecutionTime.Seconds())
	opts.Settings["max_query_size"] = MaxQuerySize
	conn, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("clickhouse at %s: %w", host, err)
	}
	s := &server{conn: conn, log: log, host: host}
	if err := s.retry(ctx, func() error { return conn.Ping(ctx) }); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clickhouse at %s unreachable: %w", host, err)
	}
	return s, nil
}

// VersionError refuses a server older than the schema needs.
type VersionError struct{ Host, Have string }

func (e *VersionError) Error() string {
	return fmt.Sprintf("clickhouse at %s is version %s; Tokenpath needs ClickHouse %s or newer (projections on a ReplacingMergeTree, is_deleted, Map(LowCardinality(String), String))",
		e.Host, e.Have, MinServerVersion)
}

// transient reports errors worth retrying: the server restarting or a
// dropped connection, not bad SQL.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var exc *ch.Exception
	switch {
	case errors.As(err, &exc):
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, sqldriver.ErrBadConn):
		return true
	case errors.As(err, &ne):
		return true
	}
	return strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "broken pipe")
}

// retry runs op up to 4 times with backoff while the error is transient.
// The last failure returns at once: no sleep, no "retrying" warning.
func (s *server) retry(ctx context.Context, op func() error) error {
	const attempts = 4
	delay := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if !transient(err) || attempt == attempts {
			return err
		}
		s.log.Warn("clickhouse transient error; retrying", "host", s.host, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (s *server) exec(ctx context.Context, sql string) error {
	return s.retry(ctx, func() error { return s.conn.Exec(ctx, sql) })
}

func (s *server) query(ctx context.Context, sql string) (*Result, error) {
	var res *Result
	if s.settings != nil {
		ctx = ch.Context(ctx, ch.WithSettings(s.settings))
	}
	err := s.retry(ctx, func() error {
		rows, err := s.conn.Query(ctx, sql)
		if err != nil {
			return err
		}
		defer rows.Close()
		res = &Result{Columns: rows.Columns()}
		types := rows.ColumnTypes()
		for _, t := range types {
			res.Types = append(res.Types, t.DatabaseTypeName())
		}
		for rows.Next() {
			dest := make([]any, len(types))
			for i, t := range types {
				dest[i] = reflect.New(t.ScanType()).Interface()
			}
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			row := make([]any, len(dest))
			for i, d := range dest {
				row[i] = normalizeValue(d)
			}
			res.Rows = append(res.Rows, row)
		}
		return rows.Err()
	})
	return res, err
}

func (s *server) insert(ctx context.Context, b *Batch) error {
	if b.preEncoded() {
		return errors.New("pre-encoded Native blocks need the embedded engine (Store.TakesNative)")
	}
	cols := make([]string, len(b.Columns))
	for i, c := range b.Columns {
		cols[i] = c.Name
	}
	if b.Foreground {
		// Named insert_distributed_sync before 23.11, still an alias after.
		ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_distributed_sync": 1}))
	}
	return s.retry(ctx, func() error {
		batch, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+b.Table+" ("+strings.Join(cols, ", ")+")")
		if err != nil {
			return err
		}
		for i, c := range b.Columns {
			if err := batch.Column(i).Append(c.Data); err != nil {
				_ = batch.Abort()
				return fmt.Errorf("column %s: %w", c.Name, err)
			}
		}
		return batch.Send()
	})
}

func (s *server) close() error { return s.conn.Close() }
