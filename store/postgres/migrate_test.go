package postgres

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/tokenpath/tokenpath/migrations"
)

func embeddedVersions(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.Postgres, "postgres/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded migrations (%v)", err)
	}
	var versions []string
	for _, n := range names {
		versions = append(versions, strings.TrimSuffix(strings.TrimPrefix(n, "postgres/"), ".sql"))
	}
	return versions
}

func appliedVersions(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.Pool.Query(context.Background(), "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestMigrateIdempotent(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t) // first Migrate
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if got, want := strings.Join(appliedVersions(t, s), ","), strings.Join(embeddedVersions(t), ","); got != want {
		t.Errorf("applied %q, want %q", got, want)
	}
	// The schema is usable, in the test's own schema.
	for _, table := range []string{"projects", "api_keys", "share_links", "slos", "scrape_targets",
		"annotations", "settings", "assembly_watermarks"} {
		var n int
		if err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Errorf("table %s: %v", table, err)
		}
	}
}

func TestMigrateConcurrent(t *testing.T) {
	ctx := context.Background()
	url := testURL(t)
	stores := make([]*Store, 3)
	for i := range stores {
		s, err := Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		stores[i] = s
	}
	// Separate pools stand in for separate servers starting together.
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
	}
	if got, want := strings.Join(appliedVersions(t, stores[0]), ","), strings.Join(embeddedVersions(t), ","); got != want {
		t.Errorf("applied %q, want each migration once: %q", got, want)
	}
}

func TestMigrateFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	fsys := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE a (id int);")},
		"0002_b.sql": {Data: []byte("CREATE TABLE b (id int); SELECT no_such_function();")},
		"0003_c.sql": {Data: []byte("CREATE TABLE c (id int);")},
	}
	err = s.migrate(ctx, fsys)
	if err == nil || !strings.Contains(err.Error(), "0002_b.sql") {
		t.Fatalf("want an error naming 0002_b.sql, got %v", err)
	}
	if got := strings.Join(appliedVersions(t, s), ","); got != "0001_a" {
		t.Errorf("applied %q, want only 0001_a", got)
	}
	// b's CREATE TABLE ran in the failed transaction and must be gone;
	// c must not have run after the failure.
	var tables []string
	rows, err := s.Pool.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename IN ('a','b','c') ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	if got := strings.Join(tables, ","); got != "a" {
		t.Errorf("tables %q, want only a", got)
	}

	// Fixed file, second run: resumes at 0002.
	fsys["0002_b.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE b (id int);")}
	if err := s.migrate(ctx, fsys); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(appliedVersions(t, s), ","); got != "0001_a,0002_b,0003_c" {
		t.Errorf("applied %q after fix", got)
	}
}
