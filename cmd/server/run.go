package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web"
)

func newLogger(cfg *config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	format := cfg.LogFormat
	if format == "auto" {
		format = "json"
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

// stores are the two opened databases and what closes them.
type stores struct {
	pg       *postgres.Store
	embedded *postgres.Embedded
	ch       *clickhouse.Store
}

func (s *stores) close(log *slog.Logger) {
	if s.ch != nil {
		if err := s.ch.Close(); err != nil {
			log.Error("close clickhouse", "err", err)
		}
	}
	if s.pg != nil {
		s.pg.Close()
	}
	if s.embedded != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.embedded.Stop(ctx); err != nil {
			log.Error("stop embedded postgres", "err", err)
		} else {
			log.Info("embedded postgres stopped")
		}
	}
}

// openStores starts/opens PostgreSQL and ClickHouse and migrates both;
// ClickHouse migrations run under a Postgres advisory lock so several nodes
// starting at once take turns.
func openStores(ctx context.Context, cfg *config.Config, log *slog.Logger) (*stores, error) {
	s := &stores{}
	pgURL := cfg.DatabaseURL
	if pgURL == "" {
		t0 := time.Now()
		emb, err := postgres.StartEmbedded(ctx, cfg.PostgresDir(), log)
		if err != nil {
			return s, fmt.Errorf("start embedded postgres: %w", err)
		}
		s.embedded = emb
		pgURL = emb.URL()
		log.Info("embedded postgres started", "dir", cfg.PostgresDir(), "took", time.Since(t0).Round(time.Millisecond))
	}
	pg, err := postgres.Open(ctx, pgURL)
	if err != nil {
		return s, err
	}
	s.pg = pg
	if err := pg.Migrate(ctx); err != nil {
		return s, err
	}
	if cfg.BootstrapKey != "" {
		if _, err := pg.EnsureProjectWithKey(ctx, "default", cfg.BootstrapKey); err != nil {
			return s, fmt.Errorf("bootstrap key: %w", err)
		}
	}
	t0 := time.Now()
	ch, err := clickhouse.Open(ctx, clickhouse.Config{
		URL: cfg.ClickHouseURL, DataDir: cfg.ClickHouseDir(), Cluster: cfg.ClickHouseCluster,
		RetentionDays: cfg.RetentionDays, MaxExecutionTime: cfg.QueryTimeout,
	}, log)
	if err != nil {
		return s, err
	}
	s.ch = ch
	if err := pg.WithLock(ctx, postgres.LockClickHouseMigrations, ch.Migrate); err != nil {
		return s, fmt.Errorf("migrate clickhouse: %w", err)
	}
	log.Info("clickhouse ready", "embedded", ch.Embedded(), "took", time.Since(t0).Round(time.Millisecond))
	return s, nil
}

func run(ctx context.Context, cfg *config.Config) error {
	log := newLogger(cfg)
	start := time.Now()
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	st, err := openStores(ctx, cfg, log)
	defer st.close(log)
	if err != nil {
		return err
	}

	app := web.New(web.Deps{Log: log, Stores: map[string]web.Pinger{"postgres": st.pg, "clickhouse": st.ch}})
	httpSrv := &http.Server{
		Handler:           app,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	log.Info("tokenpath ready", "http", ln.Addr().String(), "startup", time.Since(start).Round(time.Millisecond))

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	return nil
}
