// Package web serves Tokenpath's browser pages, REST API (/api/v1) and
// share links with echo and templ. Handlers build view models from the
// analysis and store packages and render them; no SQL lives here.
package web

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	// Metrics is Tokenpath's own Prometheus registry, served at /metrics.
	Metrics *prometheus.Registry
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
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	if d.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Metrics, promhttp.HandlerOpts{})))
	}
	return e
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
			status = http.StatusServiceUnavailable
			checks[name] = err.Error()
			continue
		}
		checks[name] = "ok"
	}
	return c.JSON(status, map[string]any{"ready": status == http.StatusOK, "checks": checks})
}
