package web

// Stubs for diagnose_page.go, compare_page.go and share.go; replaced as
// those pages land.

import "github.com/labstack/echo/v4"

func (s *Server) diagnosePage(c echo.Context) error    { return notYet(c) }
func (s *Server) comparePage(c echo.Context) error     { return notYet(c) }
func (s *Server) createShareForm(c echo.Context) error { return notYet(c) }
func (s *Server) sharesPage(c echo.Context) error      { return notYet(c) }
func (s *Server) revokeShare(c echo.Context) error     { return notYet(c) }
func (s *Server) sharedSnapshot(c echo.Context) error  { return notYet(c) }
func (s *Server) apiCreateShare(c echo.Context) error  { return notYet(c) }
