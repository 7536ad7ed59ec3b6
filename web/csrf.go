package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

const (
	ctxCSRF = "csrf"
	// csrfCookie carries the form token of a browser without a session
	// (the login form); once logged in, the token derives from the session.
	csrfCookie = "tp_csrf"
)

// errCrossSite and errFormToken are the refusals of a state change.
var (
	errCrossSite = echo.NewHTTPError(http.StatusForbidden, "this form was sent from another site; open Tokenpath directly and try again")
	errFormToken = echo.NewHTTPError(http.StatusForbidden, "the form expired or came from another site; reload the page and try again")
)

// sessionCSRFToken is the form token of a logged-in browser: an HMAC keyed
// by the session id, which only the browser holding the HttpOnly session
// cookie knows. A same-site page can set cookies but cannot compute it.
func sessionCSRFToken(sessionID string) string {
	m := hmac.New(sha256.New, []byte(sessionID))
	m.Write([]byte("tokenpath form token"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrf refuses state changes from other sites in two independent ways.
// First, http.CrossOriginProtection refuses any non-GET request a browser
// marks as cross-origin (Sec-Fetch-Site, or an Origin that is not the
// Host): pages on another port or a sibling subdomain are same-site but
// cross-origin, so SameSite cookies alone do not stop them. Second, a
// cookie-authenticated request must carry the form token (field _csrf or
// header X-CSRF-Token) tied to its session. Only an /api/ request with a
// Bearer key goes without the token: requireKey authenticates such a
// request by that key alone and never falls back to the session cookie.
func csrf() echo.MiddlewareFunc {
	origin := http.NewCrossOriginProtection()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			token := formToken(c)
			c.Set(ctxCSRF, token)
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				return next(c)
			}
			if err := origin.Check(r); err != nil {
				return errCrossSite
			}
			if strings.HasPrefix(r.URL.Path, "/api/") {
				if r.Header.Get("Authorization") != "" {
					return next(c)
				}
				if _, err := c.Cookie(sessionCookie); err != nil {
					return next(c) // requireKey answers 401: the key is what is missing
				}
			}
			sent := r.Header.Get("X-CSRF-Token")
			if sent == "" {
				sent = c.FormValue("_csrf")
			}
			if sent == "" || subtle.ConstantTimeCompare([]byte(sent), []byte(token)) != 1 {
				return errFormToken
			}
			return next(c)
		}
	}
}

// formToken is the token this browser's forms carry: derived from the
// session cookie when there is one, else the tp_csrf cookie's value (set
// here for a page when missing), which protects the login form.
func formToken(c echo.Context) string {
	if ck, err := c.Cookie(sessionCookie); err == nil && ck.Value != "" {
		return sessionCSRFToken(ck.Value)
	}
	if ck, err := c.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	if !isPage(c) {
		return "" // the API, probes and assets render no forms
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	c.SetCookie(&http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: secureCookie(c), MaxAge: 86400})
	return tok
}
