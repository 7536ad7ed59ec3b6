// Package web serves Tokenpath's browser pages, REST API (/api/v1) and
// share links with echo and templ. Handlers build view models from the
// analysis and store packages and render them; no SQL lives here.
package web

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/outbound"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web/views"
)

// Pinger is a store that can say whether it answers.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Deps are what the web layer needs from the rest of the server.
type Deps struct {
	Log *slog.Logger
	// Stores are checked by /readyz, by name.
	Stores map[string]Pinger
	// Ingest reports why telemetry is being refused, if it is (optional):
	// pages show it as a banner and /readyz lists it, without turning
	// not-ready (the UI and the API still work).
	Ingest interface{ Health() error }
	// Assembly says how far assembled LLM requests trail the spans received
	// (optional): pages show a notice when they are behind.
	Assembly analysis.Progress
	// Metrics is Tokenpath's own Prometheus registry, served at /metrics.
	Metrics *prometheus.Registry
	// MetricsKey, when set, is the bearer token /metrics requires
	// (TOKENPATH_METRICS_KEY).
	MetricsKey string
	Queries    Queries
	Keys       Keys
	Events     EventIntake
	Settings   Settings // optional: SLOs and price table
	Sessions   Sessions
	// PG is the relational store; pages declare the small interfaces they
	// use from it in their own files.
	PG *postgres.Store
	// PublicURL prefixes share links and alert links.
	PublicURL string
	// RetentionDays is how long events are kept (TOKENPATH_RETENTION_DAYS),
	// shown read-only on the settings page.
	RetentionDays int
	// OTLPHTTPAddr and OTLPGRPCAddr are the OTLP listen addresses; their
	// ports go into the "send your data" snippets.
	OTLPHTTPAddr, OTLPGRPCAddr string
	// KeysChanged runs after an API key is revoked (auth.Cache.Forget), so
	// the revocation takes effect on this node at once; optional.
	KeysChanged func()
	// TargetsChanged runs after scrape targets change (Scraper.Reload);
	// optional.
	TargetsChanged func()
	// Outbound is the hosts scrape targets and webhooks may reach
	// (TOKENPATH_OUTBOUND_ALLOW): forms refuse others, and the webhook
	// test posts through it. nil allows every host.
	Outbound *outbound.Policy
}

// Settings supplies per-project SLOs and model prices.
type Settings interface {
	SLOAndPrices(ctx context.Context, project uint32, service, model string) (*diagnose.SLO, map[string]diagnose.Price)
}

// Server holds the handlers' dependencies.
type Server struct {
	deps Deps
}

// New builds the echo app with every route.
func New(d Deps) *echo.Echo {
	s := &Server{deps: d}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Use(middleware.Recover())
	e.Use(middleware.RequestID())
	e.Use(securityHeaders)
	e.Use(interactive)
	e.Use(middleware.BodyLimit("8M"))
	e.Use(csrf())
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/static/*", serveStatic())

	loginLimit := middleware.RateLimiter(middleware.NewRateLimiterMemoryStoreWithConfig(
		middleware.RateLimiterMemoryStoreConfig{Rate: 0.2, Burst: 10, ExpiresIn: 10 * time.Minute}))
	e.GET("/login", s.loginPage)
	e.POST("/login", s.login, loginLimit)
	e.POST("/logout", s.logout)
	s.publicRoutes(e)
	s.pageRoutes(e.Group("", s.requireSession))

	api := e.Group("/api/v1", s.requireKey)
	api.GET("/requests", s.apiRequests)
	api.GET("/diagnose", s.apiDiagnose)
	api.GET("/series", s.apiSeries)
	api.GET("/compare", s.apiCompare)
	api.GET("/services", s.apiServices)
	api.GET("/traces/:id", s.apiTrace)
	api.GET("/coverage", s.apiCoverage)
	api.GET("/episodes", s.apiEpisodes) // api_episodes.go
	api.GET("/objectives", s.apiObjectives)
	api.PUT("/objectives", s.apiSetObjective)
	api.POST("/events", s.apiEvents)
	api.GET("/settings/server-mappings", s.apiServerMappings) // server_mappings.go
	api.PUT("/settings/server-mappings", s.apiPutServerMappings)
	s.apiShareRoutes(api)
	e.HTTPErrorHandler = s.errorHandler
	if d.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Metrics, promhttp.HandlerOpts{})), metricsKey(d.MetricsKey))
	}
	return e
}

// interactive marks the statements of every request as ones a person waits
// for: on the embedded engine they may take the connection that inserts
// and assembler passes leave free, so pages answer during an ingest peak,
// which is when incidents happen.
func interactive(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		c.SetRequest(r.WithContext(clickhouse.Interactive(r.Context())))
		return next(c)
	}
}

// healthz says the process is up; it checks nothing else.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz says whether every store answers within two seconds.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	status := http.StatusOK
	checks := map[string]string{}
	for name, p := range s.deps.Stores {
		if err := p.Ping(ctx); err != nil {
			// The store's error names hosts and ports; /readyz is open.
			s.deps.Log.Error("readiness check", "store", name, "err", err)
			status = http.StatusServiceUnavailable
			checks[name] = "not answering (the server log has the error)"
			continue
		}
		checks[name] = "ok"
	}
	if s.deps.Ingest != nil {
		checks["ingest"] = "ok"
		if err := s.deps.Ingest.Health(); err != nil {
			checks["ingest"] = err.Error()
		}
	}
	return c.JSON(status, map[string]any{"ready": status == http.StatusOK, "checks": checks})
}

// errorHandler answers pages with an HTML error page and everything else
// (API, protocol endpoints) with {"error": …}.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code, msg := http.StatusInternalServerError, "internal error (request id "+requestID(c)+" in the server log)"
	var he *echo.HTTPError
	var store storeFailure
	switch {
	case errors.As(err, &he):
		code = he.Code
		msg = fmt.Sprint(he.Message)
	case errors.As(err, &store):
		s.deps.Log.Error("request failed", "err", err, "path", c.Path(), "request_id", requestID(c))
		code, msg = store.answer(requestID(c))
	default:
		s.deps.Log.Error("unhandled error", "err", err, "path", c.Path(), "request_id", requestID(c))
	}
	if code == http.StatusNotFound && msg == "Not Found" {
		msg = "There is nothing at " + c.Request().URL.Path + "."
	}
	if isPage(c) && c.Request().Method == http.MethodGet {
		_ = render(c, code, views.ErrorPage(s.page(c, views.StatusTitle(code), ""), code, msg))
		return
	}
	_ = c.JSON(code, apiError{Error: msg})
}

// metricsKey makes /metrics answer only "Authorization: Bearer <key>"
// when a key is set; unset, /metrics is open, which is how Prometheus
// scrapes by default: its labels name projects, services and target ids,
// never URLs (TestMetricsExposeNoTargetURLs).
func metricsKey(key string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if key == "" {
				return next(c)
			}
			sent, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(sent), []byte(key)) != 1 {
				c.Response().Header().Set("WWW-Authenticate", `Bearer realm="tokenpath metrics"`)
				return echo.NewHTTPError(http.StatusUnauthorized, "/metrics needs Authorization: Bearer <TOKENPATH_METRICS_KEY>")
			}
			return next(c)
		}
	}
}
