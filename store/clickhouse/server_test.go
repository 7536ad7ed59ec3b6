package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// The server tests run against the ClickHouse that Debian ships (18.16):
// too old for the schema, so Open must refuse it, but old enough to prove
// that the driver, the retry loop and the pool work without a newer server.

// lockedBuffer collects log output written from the driver's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// retries counts the transient-error warnings logged so far.
func (b *lockedBuffer) retries() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), "clickhouse transient error; retrying")
}

func TestServerRefusesOldVersion(t *testing.T) {
	addr, _, _ := startClickHouseServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := "clickhouse://default@" + addr + "/default"

	s, err := Open(ctx, Config{URL: url}, quietLog)
	if err == nil {
		s.Close()
		t.Fatalf("Open accepted the server at %s; want a *VersionError (needs %s)", addr, MinServerVersion)
	}
	var ve *VersionError
	if !errors.As(err, &ve) {
		t.Fatalf("Open: err = %v (%T), want a *VersionError", err, err)
	}
	t.Logf("Open refused the server: %v", err)

	// The version in the error is the one the server itself reports.
	raw, err := dialServer(ctx, Config{URL: url, MaxExecutionTime: 10 * time.Second}, quietLog)
	if err != nil {
		t.Fatalf("dial without the version check: %v", err)
	}
	defer raw.close()
	version, err := (&Store{b: raw}).Version(ctx)
	if err != nil {
		t.Fatalf("SELECT version(): %v", err)
	}
	if !strings.HasPrefix(version, "18.16.") || ve.Have != version {
		t.Errorf("VersionError.Have = %q, server says version() = %q (want 18.16.x)", ve.Have, version)
	}
	msg := ve.Error()
	for _, want := range []string{addr, "version " + version + ";", "ClickHouse " + MinServerVersion + " or newer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestServerTransportAndReconnect(t *testing.T) {
	addr, stop, restart := startClickHouseServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := Config{URL: "clickhouse://default@" + addr + "/default", MaxExecutionTime: 10 * time.Second}
	srv, err := dialServer(ctx, cfg, log)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	s := &Store{cfg: cfg, b: srv, log: log}
	defer s.Close()

	// MergeTree with ORDER BY and no PARTITION BY: the newest syntax 18.16
	// accepts.
	if err := s.Exec(ctx, "CREATE TABLE t (a String, n UInt32) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	insert := func(a []string, n []uint32) {
		t.Helper()
		err := s.Insert(ctx, &Batch{Table: "t", Columns: []BatchColumn{
			{Name: "a", Type: "String", Data: a},
			{Name: "n", Type: "UInt32", Data: n},
		}})
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	insert([]string{"x", "it's", ""}, []uint32{1, 4294967295, 0})
	want := [][]any{{"", int64(0)}, {"it's", int64(4294967295)}, {"x", int64(1)}}
	check := func(when string, want [][]any) {
		t.Helper()
		r, err := s.Query(ctx, "SELECT a, n FROM t ORDER BY a")
		if err != nil {
			t.Fatalf("%s: query: %v", when, err)
		}
		if !reflect.DeepEqual(r.Columns, []string{"a", "n"}) || !reflect.DeepEqual(r.Types, []string{"String", "UInt32"}) {
			t.Errorf("%s: columns %v types %v", when, r.Columns, r.Types)
		}
		if !reflect.DeepEqual(r.Rows, want) {
			t.Errorf("%s: rows\n got %#v\nwant %#v", when, r.Rows, want)
		}
	}
	check("before restart", want)
	// A bound argument reaches the server as an escaped literal.
	r, err := s.Query(ctx, "SELECT n FROM t WHERE a = ?", "it's")
	if err != nil {
		t.Fatalf("bound query: %v", err)
	}
	if r.Len() != 1 || r.Row(0).Int("n") != 4294967295 {
		t.Errorf("bound query: rows %#v", r.Rows)
	}

	// Bad SQL is the caller's error: returned at once, not retried.
	before, began := logs.retries(), time.Now()
	err = s.Exec(ctx, "SELEC 1")
	elapsed := time.Since(began)
	var exc *ch.Exception
	if !errors.As(err, &exc) || exc.Code != 62 { // 62: SYNTAX_ERROR
		t.Errorf("bad SQL: err = %v (%T), want a syntax *Exception", err, err)
	}
	// Four attempts would sleep 200+400+800 ms between them.
	if n := logs.retries() - before; n != 0 || elapsed > time.Second {
		t.Errorf("bad SQL retried %d times, took %s", n, elapsed)
	}

	// Server killed and back on the same port and data: the pooled
	// connection is dead, the same Store must reconnect by itself.
	restart()
	check("after restart", want)
	insert([]string{"y"}, []uint32{7})
	check("insert after restart", append(want, []any{"y", int64(7)}))

	// Server down: connection refused is transient, so it is retried with
	// backoff (200+400+800 ms), and the caller gets the error right after
	// the fourth attempt, without a pointless last sleep.
	stop()
	before, began = logs.retries(), time.Now()
	_, err = s.Query(ctx, "SELECT 1")
	elapsed = time.Since(began)
	if err == nil || !transient(err) {
		t.Errorf("server down: err = %v, want a transient error", err)
	}
	if n := logs.retries() - before; n != 3 || elapsed < 1400*time.Millisecond || elapsed > 2500*time.Millisecond {
		t.Errorf("server down: %d retries in %s, want 3 over 1.4–2.5 s", n, elapsed)
	}
	restart()
	check("after outage", append(want, []any{"y", int64(7)}))
}
