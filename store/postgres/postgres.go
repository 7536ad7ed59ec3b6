// Package postgres is Tokenpath's relational store: projects, hashed API
// keys, share links, SLOs, scrape targets, annotations and schema versions
// in PostgreSQL, plus an embedded PostgreSQL server for single-node installs.
package postgres

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is a connection pool to Tokenpath's PostgreSQL database.
type Store struct {
	// Pool is exported so other packages can run their own queries on the
	// same connections instead of opening a second pool.
	Pool *pgxpool.Pool
}

// Pool limits used unless the URL sets pool_* parameters itself. The data
// here is small; a handful of connections serves UI and auth, and staying
// well under max_connections leaves room for several nodes on one server.
const (
	defaultMaxConns       = 10
	defaultConnectTimeout = 5 * time.Second
)

// Open connects to the PostgreSQL server at url (a postgres:// URL or a
// key=value DSN) and checks that it answers. Errors name the server but never
// the password.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn redacts the password from its parse errors.
		return nil, fmt.Errorf("parse postgres URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		// Shows up in pg_stat_activity, so a DBA can tell whose sessions these are.
		cfg.ConnConfig.RuntimeParams["application_name"] = "tokenpath"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres at %s: %w", serverAddr(cfg), err)
	}
	s := &Store{Pool: pool}
	if err := s.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Ping checks that the database answers; it backs /readyz.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.Pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres at %s unreachable: %w", serverAddr(s.Pool.Config()), err)
	}
	return nil
}

// Close waits for borrowed connections to come back and closes them all.
func (s *Store) Close() {
	s.Pool.Close()
}

// serverAddr names the server for error messages: host:port, or the socket
// directory and port for a unix socket. It never includes credentials.
func serverAddr(cfg *pgxpool.Config) string {
	host := cfg.ConnConfig.Host
	if strings.HasPrefix(host, "/") {
		return host + " (unix socket, port " + strconv.Itoa(int(cfg.ConnConfig.Port)) + ")"
	}
	return net.JoinHostPort(host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// closeConn closes a connection outside the pool. It gets its own short
// deadline: the caller's context may be cancelled already, and a dead
// server must not hang the close.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
