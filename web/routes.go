package web

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// pageRoutes lists every logged-in page. Each page lives in its own file
// (<page>_page.go with views/<page>.templ).
func (s *Server) pageRoutes(g *echo.Group) {
	g.GET("/", s.overviewPage)
}

func (s *Server) overviewPage(c echo.Context) error {
	return c.Redirect(http.StatusSeeOther, "/requests")
}
