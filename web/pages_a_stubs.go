package web

// Stubs for the pages of overview_page.go, requests_page.go,
// settings_page.go and slos_page.go; replaced as those pages land.

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

func notYet(c echo.Context) error {
	return echo.NewHTTPError(http.StatusNotImplemented, "this page is not built yet")
}

func (s *Server) overviewPage(c echo.Context) error      { return notYet(c) }
func (s *Server) requestsPage(c echo.Context) error      { return notYet(c) }
func (s *Server) requestDetailPage(c echo.Context) error { return notYet(c) }
func (s *Server) settingsPage(c echo.Context) error      { return notYet(c) }
func (s *Server) createKey(c echo.Context) error         { return notYet(c) }
func (s *Server) revokeKey(c echo.Context) error         { return notYet(c) }
func (s *Server) createTarget(c echo.Context) error      { return notYet(c) }
func (s *Server) deleteTarget(c echo.Context) error      { return notYet(c) }
func (s *Server) savePrices(c echo.Context) error        { return notYet(c) }
func (s *Server) slosPage(c echo.Context) error          { return notYet(c) }
func (s *Server) createSLO(c echo.Context) error         { return notYet(c) }
func (s *Server) deleteSLO(c echo.Context) error         { return notYet(c) }
func (s *Server) saveAlertRule(c echo.Context) error     { return notYet(c) }
