package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tokenpath/tokenpath/migrations"
)

// migrateLockKey is the pg_advisory_lock key that serializes schema
// migrations across every Tokenpath node sharing a database ("tokenpat" in
// ASCII, so it is recognisable in pg_locks).
const migrateLockKey int64 = 0x746f6b656e706174

// Migrate brings the database schema up to date by applying the embedded
// migrations/postgres/*.sql files not yet recorded in schema_migrations, in
// lexical order, each in its own transaction. It is idempotent, and safe when
// several servers start at once: they take turns on an advisory lock.
func (s *Store) Migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrations.Postgres, "postgres")
	if err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	return s.migrate(ctx, sub)
}

// migrate applies the *.sql files at the root of fsys; split from Migrate so
// tests can feed it broken migrations.
func (s *Store) migrate(ctx context.Context, fsys fs.FS) error {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return fmt.Errorf("migrate postgres: list migrations: %w", err)
	}
	sort.Strings(names)

	// A session-level advisory lock belongs to the connection, so take the
	// connection out of the pool for good: closing it at the end releases the
	// lock even when an unlock would fail on a cancelled context, and a
	// pooled connection can never leak a held lock to the next borrower.
	pooled, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	conn := pooled.Hijack()
	defer closeConn(conn)

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("migrate postgres: take migration lock: %w", err)
	}
	// Created under the lock: two concurrent CREATE TABLE IF NOT EXISTS can
	// still collide on the catalog's unique index.
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    text        PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("migrate postgres: create schema_migrations: %w", err)
	}
	applied := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate postgres: read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("migrate postgres: read schema_migrations: %w", err)
	}
	for _, v := range versions {
		applied[v] = true
	}

	for _, name := range names {
		version := strings.TrimSuffix(path.Base(name), ".sql")
		if applied[version] {
			continue
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("migrate postgres: read %s: %w", name, err)
		}
		if err := applyMigration(ctx, conn, version, string(body)); err != nil {
			return fmt.Errorf("migrate postgres: %s: %w", name, err)
		}
	}
	return nil
}

// applyMigration runs one migration file and records it in the same
// transaction, so a failure leaves neither half-applied DDL nor a version row.
func applyMigration(ctx context.Context, conn *pgx.Conn, version, body string) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// No arguments: pgx sends it with the simple protocol, which accepts
		// a file of several statements.
		if _, err := tx.Exec(ctx, body); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())", version)
		return err
	})
}
