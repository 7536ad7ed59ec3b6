// Package storetest gives a test its own migrated stores: an embedded
// ClickHouse in a temporary directory and a fresh PostgreSQL schema
// (pgtest), both closed when the test ends. Tests of the assembler and of
// the read planner use it instead of starting the whole server.
package storetest

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

// Stores are one test's ClickHouse and PostgreSQL, migrated.
type Stores struct {
	CH  *clickhouse.Store
	PG  *postgres.Store
	Log *slog.Logger // discards
}

// Open migrates a fresh pair of stores for t.
func Open(t testing.TB) Stores {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	if err := ch.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pg, err := postgres.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return Stores{CH: ch, PG: pg, Log: log}
}
