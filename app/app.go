// Package app assembles a Tokenpath server from its parts — stores, ingest
// pipeline and receivers, analysis workers, web — and runs them with an
// orderly start and stop. cmd/server calls it; tests start whole servers
// with it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/alerts"
	"github.com/tokenpath/tokenpath/analysis/assembler"
	"github.com/tokenpath/tokenpath/auth"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/ingest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web"
)

// NewLogger builds the slog logger the config asks for: JSON unless stderr
// is a terminal.
func NewLogger(cfg *config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	format := cfg.LogFormat
	if format == "auto" || format == "" {
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

// App is a running server.
type App struct {
	Config  *config.Config
	Log     *slog.Logger
	PG      *postgres.Store
	CH      *clickhouse.Store
	Ingest  *ingest.Receiver
	Keys    *auth.Cache
	Queries *analysis.Queries
	// Scraper pulls inference servers' /metrics; Status feeds the settings page.
	Scraper *ingest.Scraper
	// Alerts posts SLO fast-burn webhooks (every minute; tests call Evaluate).
	Alerts *alerts.AlertEvaluator
	// Episodes segments services' traffic into incidents (at start, as
	// the assembler finishes each minute, at least every minute; tests call
	// Detect).
	Episodes *analysis.EpisodeDetector

	// Bound addresses (useful when the config asked for port 0).
	HTTPAddr, OTLPHTTPAddr, OTLPGRPCAddr string

	embedded *postgres.Embedded
	servers  []*http.Server
	grpc     *grpc.Server
	cancel   context.CancelFunc
	demoCtx  context.Context
	workers  sync.WaitGroup
	errc     chan error
	stopOnce sync.Once
}

// Start opens the stores, starts the workers and listeners, and returns
// once the server accepts traffic.
func Start(ctx context.Context, cfg *config.Config, log *slog.Logger) (*App, error) {
	a := &App{Config: cfg, Log: log, errc: make(chan error, 4)}
	// Bind every listener first: a port clash is reported before the
	// database starts or migrations run (TestStartReportsPortClashFirst),
	// and links and snippets name the ports actually bound (port 0 in tests).
	lns, err := bindListeners(cfg)
	if err != nil {
		return nil, err
	}
	a.HTTPAddr = lns.http.Addr().String()
	if lns.otlpHTTP != nil {
		a.OTLPHTTPAddr = lns.otlpHTTP.Addr().String()
	}
	if lns.grpc != nil {
		a.OTLPGRPCAddr = lns.grpc.Addr().String()
	}
	ok := false
	defer func() {
		if !ok {
			lns.close()
			a.Stop(context.Background())
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := a.openStores(ctx); err != nil {
		return nil, err
	}
	a.Keys = auth.NewCache(a.PG)

	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	a.demoCtx = workCtx
	pipe, err := ingest.NewPipeline(filepath.Join(cfg.DataDir, "wal"), a.CH, ingest.PipelineConfig{MaxPendingRows: cfg.MaxPendingRows}, log)
	if err != nil {
		return nil, err
	}
	a.Ingest = &ingest.Receiver{Pipeline: pipe, Auth: a.Keys, MaxBodyBytes: cfg.MaxBodyBytes, Log: log}
	a.workers.Add(1)
	go func() { defer a.workers.Done(); pipe.Run(workCtx) }()
	a.Scraper = ingest.NewScraper(a.Ingest, ingest.PostgresScrapeTargets{Pool: a.PG.Pool}, cfg.ScrapeTargets, log)
	a.Scraper.Client = cfg.Outbound.Client(0) // timeouts come per scrape
	a.workers.Add(1)
	go func() { defer a.workers.Done(); a.Scraper.Run(workCtx) }()

	asm := &assembler.Assembler{CH: a.CH, PG: a.PG, Log: log, Acks: pipe.Metrics.Acks, Writing: pipe.WritingSince}
	a.workers.Add(1)
	go func() { defer a.workers.Done(); asm.Run(workCtx) }()
	settings := &analysis.StoredSettings{PG: a.PG, Log: log}
	a.Queries = &analysis.Queries{CH: a.CH, Mappings: settings}
	settings.Pairs = a.Queries

	public := a.publicURL()

	pipe.Metrics.Registry.MustRegister(clickhouse.NewEngineCollector(a.CH, log), asm.Collector())
	deps := web.Deps{
		Log:        log,
		Stores:     map[string]web.Pinger{"postgres": a.PG, "clickhouse": a.CH},
		Ingest:     pipe,
		Assembly:   asm,
		Metrics:    pipe.Metrics.Registry,
		Queries:    a.Queries,
		Keys:       a.Keys,
		Events:     a.Ingest,
		Settings:   settings,
		Sessions:   a.PG,
		PG:         a.PG,
		PublicURL:  public,
		MetricsKey: cfg.MetricsKey,
		// Settings page: retention, OTLP snippet, immediate key revocation
		// and target reloads.
		RetentionDays:  cfg.RetentionDays,
		OTLPHTTPAddr:   a.OTLPHTTPAddr,
		OTLPGRPCAddr:   a.OTLPGRPCAddr,
		KeysChanged:    a.Keys.Forget,
		TargetsChanged: a.Scraper.Reload,
		Outbound:       cfg.Outbound,
	}
	app := web.New(deps)
	a.Alerts = &alerts.AlertEvaluator{Queries: a.Queries, PG: a.PG, Settings: settings,
		Share: web.AlertShareFunc(deps), PublicURL: public, Log: log,
		Client: cfg.Outbound.Client(10 * time.Second)}
	a.workers.Add(1)
	go func() { defer a.workers.Done(); a.Alerts.Run(workCtx) }()
	a.Episodes = &analysis.EpisodeDetector{Queries: a.Queries, PG: a.PG, Settings: settings, Log: log, Progress: asm}
	a.workers.Add(1)
	go func() { defer a.workers.Done(); a.Episodes.Run(workCtx) }()
	a.serveHTTP(lns.http, app)
	if lns.otlpHTTP != nil {
		a.serveHTTP(lns.otlpHTTP, a.Ingest.HTTPHandler())
	}
	if lns.grpc != nil {
		a.grpc = grpc.NewServer(a.Ingest.GRPCServerOptions()...)
		a.Ingest.RegisterGRPC(a.grpc)
		go func() {
			if err := a.grpc.Serve(lns.grpc); err != nil {
				a.errc <- fmt.Errorf("otlp grpc: %w", err)
			}
		}()
	}
	ok = true
	return a, nil
}

// listeners are the server's bound ports; otlpHTTP and grpc are nil when
// their address is empty (disabled).
type listeners struct {
	http, otlpHTTP, grpc net.Listener
}

func bindListeners(cfg *config.Config) (*listeners, error) {
	var l listeners
	var err error
	if l.http, err = listen(cfg.HTTPAddr, "TOKENPATH_HTTP_ADDR"); err != nil {
		return nil, err
	}
	if cfg.OTLPHTTPAddr != "" {
		if l.otlpHTTP, err = listen(cfg.OTLPHTTPAddr, "TOKENPATH_OTLP_HTTP_ADDR"); err != nil {
			l.close()
			return nil, err
		}
	}
	if cfg.OTLPGRPCAddr != "" {
		if l.grpc, err = listen(cfg.OTLPGRPCAddr, "TOKENPATH_OTLP_GRPC_ADDR"); err != nil {
			l.close()
			return nil, err
		}
	}
	return &l, nil
}

// close releases ports that were bound but never served.
func (l *listeners) close() {
	for _, ln := range []net.Listener{l.http, l.otlpHTTP, l.grpc} {
		if ln != nil {
			ln.Close()
		}
	}
}

func listen(addr, env string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s (%s): %w", addr, env, err)
	}
	return ln, nil
}

func (a *App) serveHTTP(ln net.Listener, h http.Handler) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	a.servers = append(a.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.errc <- fmt.Errorf("http %s: %w", ln.Addr(), err)
		}
	}()
}

// openStores starts/opens PostgreSQL and ClickHouse and migrates both;
// ClickHouse migrations run under a Postgres advisory lock so several nodes
// starting at once take turns.
func (a *App) openStores(ctx context.Context) error {
	cfg, log := a.Config, a.Log
	pgURL := cfg.DatabaseURL
	if pgURL == "" {
		t0 := time.Now()
		emb, err := postgres.StartEmbedded(ctx, cfg.PostgresDir(), log)
		if err != nil {
			return fmt.Errorf("start embedded postgres: %w", err)
		}
		a.embedded = emb
		pgURL = emb.URL()
		log.Info("embedded postgres started", "dir", cfg.PostgresDir(), "took", time.Since(t0).Round(time.Millisecond))
	}
	pg, err := postgres.Open(ctx, pgURL)
	if err != nil {
		return err
	}
	a.PG = pg
	if err := pg.Migrate(ctx); err != nil {
		return err
	}
	if cfg.BootstrapKey != "" {
		if _, err := pg.EnsureProjectWithKey(ctx, "default", cfg.BootstrapKey); err != nil {
			return fmt.Errorf("bootstrap key: %w", err)
		}
	}
	t0 := time.Now()
	ch, err := clickhouse.Open(ctx, clickhouse.Config{
		URL: cfg.ClickHouseURL, DataDir: cfg.ClickHouseDir(), Cluster: cfg.ClickHouseCluster,
		RetentionDays: cfg.RetentionDays, MaxExecutionTime: cfg.QueryTimeout,
	}, log)
	if err != nil {
		return err
	}
	a.CH = ch
	if err := pg.WithLock(ctx, postgres.LockClickHouseMigrations, ch.Migrate); err != nil {
		return fmt.Errorf("migrate clickhouse: %w", err)
	}
	log.Info("clickhouse ready", "embedded", ch.Embedded(), "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// Err delivers a listener's fatal error.
func (a *App) Err() <-chan error { return a.errc }

// Stop shuts down in reverse order: stop accepting, drain workers (the
// pipeline flushes what it acknowledged), close stores, stop PostgreSQL.
func (a *App) Stop(ctx context.Context) {
	a.stopOnce.Do(func() {
		shutdownCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for _, s := range a.servers {
			if err := s.Shutdown(shutdownCtx); err != nil {
				a.Log.Warn("http shutdown", "err", err)
			}
		}
		if a.grpc != nil {
			stopped := make(chan struct{})
			go func() { a.grpc.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-shutdownCtx.Done():
				a.grpc.Stop()
			}
		}
		if a.cancel != nil {
			a.cancel()
		}
		a.workers.Wait()
		if a.CH != nil {
			if err := a.CH.Close(); err != nil {
				a.Log.Error("close clickhouse", "err", err)
			}
		}
		if a.PG != nil {
			a.PG.Close()
		}
		if a.embedded != nil {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := a.embedded.Stop(stopCtx); err != nil {
				a.Log.Error("stop embedded postgres", "err", err)
			}
		}
	})
}

// Run starts the server and blocks until ctx is done or a listener fails.
func Run(ctx context.Context, cfg *config.Config) error {
	log := NewLogger(cfg)
	t0 := time.Now()
	a, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	log.Info("tokenpath ready", "ui", a.HTTPAddr, "otlp_http", a.OTLPHTTPAddr, "otlp_grpc", a.OTLPGRPCAddr,
		"startup", time.Since(t0).Round(time.Millisecond).String())
	if cfg.Demo {
		key, err := a.StartDemo(ctx)
		if err != nil {
			a.Stop(context.Background())
			return err
		}
		fmt.Fprintf(os.Stderr, "\n  Tokenpath is running with demo traffic.\n  Open %s and log in with the API key:\n\n      %s\n\n  Send your own OTLP to %s (header Authorization: Bearer <key>). Ctrl-C stops everything.\n\n",
			"http://"+loopback(a.HTTPAddr), key, "http://"+loopback(a.OTLPHTTPAddr))
	}
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-a.Err():
	}
	a.Stop(context.Background())
	log.Info("stopped")
	return runErr
}

// publicURL is the base of share links: TOKENPATH_PUBLIC_URL, else the
// bound UI address as a local client would dial it.
func (a *App) publicURL() string {
	if a.Config.PublicURL != "" {
		return strings.TrimRight(a.Config.PublicURL, "/")
	}
	return "http://" + loopback(a.HTTPAddr)
}

// loopback turns a listen address like ":8080" or "0.0.0.0:8080" into one
// a local client can dial.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
