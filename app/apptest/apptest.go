// Package apptest starts a whole Tokenpath server for integration tests:
// the real embedded ClickHouse in a temp dir, a fresh PostgreSQL schema on
// the machine's test server, and every listener on 127.0.0.1:0 — in the
// test's own process (Start) or as the real cmd/server binary in a child
// process (StartProcess), for tests that kill, starve or measure it.
package apptest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/tokenpath/tokenpath/app"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

// Key is the API key of project "default" in every test server.
const Key = "tp_test_key_0123456789abcdef"

// Options adjust the server under test.
type Options struct {
	// DataDir reuses a data dir (to test restarts); empty = a fresh one.
	DataDir string
	// DatabaseURL reuses a database; empty = a fresh schema.
	DatabaseURL string
	// Configure edits the config before start.
	Configure func(*config.Config)
}

// Server is a running test server.
type Server struct {
	*app.App
	DataDir     string
	DatabaseURL string
}

// Start runs a server for the test and stops it at cleanup.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	if opt.DataDir == "" {
		opt.DataDir = t.TempDir()
	}
	if opt.DatabaseURL == "" {
		opt.DatabaseURL = pgtest.URL(t)
	}
	cfg, err := config.Load("tokenpath-test", nil, func(k string) string {
		switch k {
		case "TOKENPATH_HTTP_ADDR", "TOKENPATH_OTLP_HTTP_ADDR", "TOKENPATH_OTLP_GRPC_ADDR":
			return "127.0.0.1:0"
		case "TOKENPATH_DATA_DIR":
			return opt.DataDir
		case "TOKENPATH_DATABASE_URL":
			return opt.DatabaseURL
		case "TOKENPATH_BOOTSTRAP_KEY":
			return Key
		}
		return ""
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Configure != nil {
		opt.Configure(cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TOKENPATH_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	a, err := app.Start(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("start tokenpath: %v", err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	return &Server{App: a, DataDir: opt.DataDir, DatabaseURL: opt.DatabaseURL}
}
