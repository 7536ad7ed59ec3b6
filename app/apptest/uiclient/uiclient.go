// Package uiclient logs in to a running Tokenpath UI as a browser does, for
// the benchmarks and the reliability suite that drive the real binary.
package uiclient

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"time"
)

var csrfField = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// LogIn opens a session at base (http://host:port) with an API key through
// the login form and returns a client carrying its cookie. Redirects are
// not followed, so callers see every 303.
func LogIn(ctx context.Context, base, key string) (*http.Client, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Jar: jar, Timeout: 10 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/login", nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfField.FindSubmatch(body)
	if m == nil {
		return nil, errors.New("login page has no CSRF field")
	}
	form := url.Values{"key": {key}, "next": {"/"}, "_csrf": {html.UnescapeString(string(m[1]))}}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err = c.Do(req); err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("log in: HTTP %d", resp.StatusCode)
	}
	return c, nil
}
