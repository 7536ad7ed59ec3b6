package web

import (
	"github.com/labstack/echo/v4"
)

// pageRoutes lists every logged-in page. Each page lives in its own file
// (<page>_page.go with views/<page>.templ).
func (s *Server) pageRoutes(g *echo.Group) {
	// overview_page.go, requests_page.go, settings_page.go, slos_page.go
	g.GET("/", s.overviewPage)
	g.GET("/requests", s.requestsPage)
	g.GET("/requests/:trace", s.requestDetailPage)
	g.GET("/trace", s.openTrace) // the header's trace ID box
	g.GET("/settings", s.settingsPage)
	g.POST("/settings/keys", s.createKey)
	g.POST("/settings/keys/:id/revoke", s.revokeKey)
	g.POST("/settings/targets", s.createTarget)
	g.POST("/settings/targets/:id/delete", s.deleteTarget)
	g.POST("/settings/prices", s.savePrices)
	g.POST("/settings/server-mappings", s.saveServerMappings) // server_mappings.go
	g.GET("/slos", s.slosPage)
	g.POST("/slos", s.createSLO)
	g.POST("/slos/:id/delete", s.deleteSLO)
	g.POST("/slos/alerts", s.saveAlertRule)
	g.POST("/slos/objectives", s.saveObjective)
	g.POST("/slos/:id/rules", s.saveSLORules)

	// diagnose_page.go, compare_page.go, share.go
	g.GET("/diagnose", s.diagnosePage)
	g.GET("/diagnose/results", s.diagnoseResults)
	g.GET("/compare", s.comparePage)
	g.POST("/share", s.createShareForm)
	g.GET("/shares", s.sharesPage)
	g.POST("/shares/:id/revoke", s.revokeShare)
}

// publicRoutes need no login: shared snapshots.
func (s *Server) publicRoutes(e *echo.Echo) {
	e.GET("/s/:token", s.sharedSnapshot)
	e.GET("/s/:token/chart.png", s.sharedChart)
}

// apiShareRoutes are the share endpoints of /api/v1.
func (s *Server) apiShareRoutes(api *echo.Group) {
	api.POST("/share", s.apiCreateShare)
}
