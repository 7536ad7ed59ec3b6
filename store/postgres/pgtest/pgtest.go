// Package pgtest gives tests a PostgreSQL database of their own: a fresh
// schema on the machine's test server, dropped when the test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// defaultTestURLs are tried in order when TOKENPATH_TEST_DATABASE_URL is
// unset: the dev/CI machine runs a trust-auth server on 127.0.0.1:5432 whose
// superuser may be postgres or root.
var defaultTestURLs = []string{
	"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"postgres://root@127.0.0.1:5432/test?sslmode=disable",
}

// URL returns a connection string to the test server whose search_path
// is a fresh schema, dropped when the test ends, so tests never see each
// other's tables. An unreachable server fails the test: a skipped test
// would pass CI without testing anything.
func URL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	candidates := defaultTestURLs
	if u := os.Getenv("TOKENPATH_TEST_DATABASE_URL"); u != "" {
		candidates = []string{u}
	}
	var admin *pgx.Conn
	var base string
	var errs []string
	for _, u := range candidates {
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			admin, base = conn, u
			break
		}
		errs = append(errs, err.Error())
	}
	if admin == nil {
		msg := "no PostgreSQL test server (set TOKENPATH_TEST_DATABASE_URL): " + strings.Join(errs, "; ")
		if os.Getenv("CI") == "true" {
			t.Fatal("CI: " + msg)
		}
		t.Fatal(msg)
	}
	defer admin.Close(context.Background())

	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "tp_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TOKENPATH_TEST_DATABASE_URL must be a URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
