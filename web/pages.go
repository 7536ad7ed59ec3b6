package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web/views"
)

// Sessions is the browser-session store (store/postgres).
type Sessions interface {
	CreateSession(ctx context.Context, key string, ttl time.Duration) (string, postgres.Session, error)
	SessionFor(ctx context.Context, id string) (postgres.Session, error)
	DeleteSession(ctx context.Context, id string) error
}

const (
	sessionCookie = "tp_session"
	sessionTTL    = 7 * 24 * time.Hour
)

// securityHeaders applies to every response: no inline script anywhere,
// no framing, no MIME sniffing.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		return next(c)
	}
}

func secureCookie(c echo.Context) bool {
	return c.Request().TLS != nil || c.Request().Header.Get("X-Forwarded-Proto") == "https"
}

// sessionFromCookie resolves the browser's session.
func (s *Server) sessionFromCookie(c echo.Context) (uint32, bool) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || ck.Value == "" || s.deps.Sessions == nil {
		return 0, false
	}
	sess, err := s.deps.Sessions.SessionFor(c.Request().Context(), ck.Value)
	if err != nil {
		if !errors.Is(err, postgres.ErrNoSession) {
			s.deps.Log.Error("session lookup", "err", err)
		}
		return 0, false
	}
	return uint32(sess.ProjectID), true
}

// requireSession sends a logged-out browser to the login page.
func (s *Server) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, ok := s.sessionFromCookie(c)
		if !ok {
			return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(c.Request().URL.RequestURI()))
		}
		c.Set(ctxProject, p)
		// Logged-in pages show secrets (the SLO page's webhook URL): no
		// cache, shared or local, may keep them.
		c.Response().Header().Set("Cache-Control", "no-store")
		return next(c)
	}
}

// page fills the layout's view model for a handler.
func (s *Server) page(c echo.Context, title, nav string) views.Page {
	tok, _ := c.Get(ctxCSRF).(string)
	p := views.Page{Title: title, Nav: nav, CSRF: tok, Version: assetVersion}
	if projectOf(c) != 0 {
		p.Project = "default"
	}
	if VendorMissing() {
		p.Notice = "Chart libraries are missing from this build (run `make build`); figures are shown as tables."
	}
	if s.deps.Ingest != nil && projectOf(c) != 0 {
		if err := s.deps.Ingest.Health(); err != nil {
			p.Notice = "Tokenpath is refusing telemetry right now, so new data is not arriving: " + err.Error()
		}
	}
	if projectOf(c) != 0 {
		if n := s.assemblyNotice(c.Request().Context(), time.Now()); n != "" {
			p.Notice = strings.TrimSpace(p.Notice + " " + n)
		}
	}
	return p
}

// assemblyNotice says when LLM requests trail the spans received, so that
// an engineer does not read a quiet last few minutes as recovery: under a
// burst above what the node assembles (README: ~37k spans/s on 2 cores)
// the assembler falls minutes behind and catches up afterwards.
func (s *Server) assemblyNotice(ctx context.Context, now time.Time) string {
	wm, behind := s.assemblyBehind(ctx, now)
	if !behind {
		return ""
	}
	return fmt.Sprintf("LLM requests are behind the spans received: they are assembled from spans that arrived up to %s UTC (%s); later requests are still being assembled and are not on this page yet.",
		humanTime(wm, now), humanAgo(wm, now))
}

// assemblyBehind returns the assembler's watermark and whether it trails
// now by analysis.BehindAfter or more.
func (s *Server) assemblyBehind(ctx context.Context, now time.Time) (time.Time, bool) {
	return analysis.AssemblyBehind(ctx, s.deps.Assembly, now)
}

// render writes a templ component with a status code.
func render(c echo.Context, code int, comp templ.Component) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(code)
	return comp.Render(c.Request().Context(), c.Response())
}

func (s *Server) loginPage(c echo.Context) error {
	if _, ok := s.sessionFromCookie(c); ok {
		return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next")))
	}
	return render(c, http.StatusOK, views.Login(s.page(c, "Log in", ""), "", safeNext(c.QueryParam("next"))))
}

func (s *Server) login(c echo.Context) error {
	key := strings.TrimSpace(c.FormValue("key"))
	next := safeNext(c.FormValue("next"))
	id, _, err := s.deps.Sessions.CreateSession(c.Request().Context(), key, sessionTTL)
	if err != nil {
		msg := "That API key is not valid (or was revoked)."
		code := http.StatusUnauthorized
		if !errors.Is(err, postgres.ErrUnknownKey) {
			s.deps.Log.Error("login", "err", err)
			msg, code = "Cannot check keys right now (PostgreSQL unreachable); try again shortly.", http.StatusServiceUnavailable
		}
		return render(c, code, views.Login(s.page(c, "Log in", ""), msg, next))
	}
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: secureCookie(c), Expires: time.Now().Add(sessionTTL)})
	return c.Redirect(http.StatusSeeOther, next)
}

func (s *Server) logout(c echo.Context) error {
	if ck, err := c.Cookie(sessionCookie); err == nil {
		_ = s.deps.Sessions.DeleteSession(c.Request().Context(), ck.Value)
	}
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, MaxAge: -1})
	return c.Redirect(http.StatusSeeOther, "/login")
}

// safeNext keeps post-login redirects on this site: a path with no
// scheme or host, and no control character or backslash, which browsers
// drop or read as "/" and so turn "/<TAB>/evil.example" into
// "//evil.example" (TestLoginRedirectStaysOnSite).
func safeNext(next string) string {
	if strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return "/"
	}
	return next
}

// isPage tells HTML pages from API/protocol paths for error rendering.
func isPage(c echo.Context) bool {
	p := c.Request().URL.Path
	return !strings.HasPrefix(p, "/api/") && p != "/healthz" && p != "/readyz" && p != "/metrics" && !strings.HasPrefix(p, "/static/")
}
