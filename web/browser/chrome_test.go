package browser_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// chromiumPath is Debian's chromium; .ci/run installs it when missing.
const chromiumPath = "/usr/bin/chromium"

// Viewport of every tab unless a test changes it.
const (
	viewportWidth  = 1280
	viewportHeight = 900
)

// cspProbe runs before any page script (DevTools-injected scripts are not
// subject to the page's CSP) and records every CSP violation, so a
// violation fails the test even if Chromium's console wording changes.
const cspProbe = `window.__tpCSP = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__tpCSP.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline") + " at " + e.sourceFile + ":" + e.lineNumber);
});`

// startBrowser launches one headless Chromium for the suite and returns
// a context whose children open tabs in it.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the browser tests need Chromium at %s (Debian package chromium; .ci/run installs it when missing): %v", chromiumPath, err)
	}
	if out, err := exec.Command(chromiumPath, "--version").CombinedOutput(); err != nil {
		t.Fatalf("%s does not run (.ci/run installs a working chromium): %v: %s", chromiumPath, err, out)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(viewportWidth, viewportHeight),
	)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(browserCtx); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return browserCtx
}

// tab is one page in its own browser context (its own cookie jar), with
// every console error, uncaught exception, failed load and CSP violation
// recorded.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string

	mu       sync.Mutex
	problems []string
	dialogs  []string
	// allowStatus are HTTP error statuses the test expects for a document
	// (a failed login, a revoked link): Chromium logs those as errors.
	allowStatus []int
}

// newTab opens a tab in a fresh browser context, logged out.
func (s *suite) newTab(t *testing.T) *tab {
	t.Helper()
	tb := &tab{t: t, base: s.base}
	ctx, cancel := chromedp.NewContext(s.browser, chromedp.WithNewBrowserContext(), chromedp.WithListener(tb.listen))
	t.Cleanup(cancel)
	tb.ctx = ctx
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(viewportWidth, viewportHeight),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspProbe})
			return err
		}),
	); err != nil {
		t.Fatalf("open tab: %v", err)
	}
	// Confirm dialogs (revoke buttons) are accepted, and remembered so a
	// test can check what they asked.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, ev.Message)
			tb.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return tb
}

// loggedInTab opens a tab and logs in through the form.
func (s *suite) loggedInTab(t *testing.T) *tab {
	t.Helper()
	tb := s.newTab(t)
	if s.session != "" {
		// The login form allows ten tries at once, then one per 5 s per
		// client, and the suite opens more logged-in tabs than that (a
		// fast run got 429s): later tabs carry the first login's session
		// (each tab has its own cookie jar).
		tb.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, network.SetCookies, network.SetCookiesParams{
				Cookies: []*network.CookieParam{{Name: "tp_session", Value: s.session, URL: s.base, HTTPOnly: true}}})
			return err
		}))
		tb.open("/shares")
		tb.checkClean()
		return tb
	}
	// Land on a light page: the overview diagnoses every service.
	tb.open("/login?next=%2Fshares")
	tb.do(
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), apptest.Key),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)),
	)
	tb.waitPath("/shares")
	tb.checkClean()
	res := run(tb, func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{tb.base}})
	})
	for _, c := range res.Cookies {
		if c.Name == "tp_session" {
			s.session = c.Value
		}
	}
	if s.session == "" {
		t.Fatal("logged in without a tp_session cookie")
	}
	return tb
}

// listen runs in the tab's event loop: it only records.
func (tb *tab) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var parts []string
		for _, a := range ev.Args {
			if a.Description != "" {
				parts = append(parts, a.Description)
			} else {
				parts = append(parts, string(a.Value))
			}
		}
		msg = "console." + string(ev.Type) + ": " + strings.Join(parts, " ")
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "uncaught exception: " + d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		msg += fmt.Sprintf(" at %s:%d", d.URL, d.LineNumber+1)
	case *cdplog.EventEntryAdded:
		e := ev.Entry
		csp := strings.Contains(e.Text, "Content Security Policy")
		if e.Level != cdplog.EntryLevelError && !csp {
			return
		}
		msg = fmt.Sprintf("log %s/%s: %s (%s)", e.Source, e.Level, e.Text, e.URL)
	default:
		return
	}
	tb.mu.Lock()
	tb.problems = append(tb.problems, msg)
	tb.mu.Unlock()
}

// do runs actions and fails the test on an error.
func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("browser: %v (page %s)", err, tb.location())
	}
}

// run runs one action with a value.
func run[T any](tb *tab, a chromedp.Action[T]) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.t.Fatalf("browser: %v (page %s)", err, tb.location())
	}
	return v
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](tb *tab, js string) T {
	tb.t.Helper()
	return run(tb, chromedp.Evaluate[T](js))
}

func (tb *tab) location() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 2*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "?"
	}
	return loc
}

// open navigates to a path of the server, requires HTTP 200 and waits for
// the parts the page loads after it (the diagnose page's diagnosis).
func (tb *tab) open(path string) {
	tb.t.Helper()
	if code := tb.openStatus(path); code != http.StatusOK {
		tb.t.Fatalf("GET %s: HTTP %d, want 200; page says: %.400s", path, code, tb.bodyText())
	}
	tb.waitJS("the parts "+path+" loads after it", `document.readyState === "complete" && !document.querySelector("[data-pending]")`)
}

// openStatus navigates (path or absolute URL) and returns the document's
// HTTP status.
func (tb *tab) openStatus(path string) int {
	tb.t.Helper()
	url := path
	if strings.HasPrefix(path, "/") {
		url = tb.base + path
	}
	ctx, cancel := context.WithTimeout(tb.ctx, 45*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(url))
	if d := time.Since(start); d > 2*time.Second {
		tb.t.Logf("slow page: %s took %s", path, d.Round(time.Millisecond))
	}
	if err != nil {
		tb.t.Fatalf("navigate to %s: %v", url, err)
	}
	if resp == nil {
		tb.t.Fatalf("navigate to %s: no response", url)
	}
	return int(resp.Status)
}

// waitPath waits until the tab's URL has the path (query ignored) and the
// document has loaded.
func (tb *tab) waitPath(path string) {
	tb.t.Helper()
	tb.waitJS("page "+path, fmt.Sprintf(`location.pathname === %q && document.readyState === "complete"`, path))
}

// waitJS waits until a JavaScript expression is truthy. It evaluates in a
// loop rather than with Poll so that a navigation in between (a form
// submit, a redirect) only costs one more round.
func (tb *tab) waitJS(what, js string) {
	tb.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+js+")"))
		cancel()
		if err == nil && ok {
			return
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	tb.t.Fatalf("waiting for %s: gave up after 20 s (last error %v) at %s; page says: %.300s", what, lastErr, tb.location(), tb.bodyText())
}

// text is the visible text of the first element matching a CSS selector.
func (tb *tab) text(css string) string {
	tb.t.Helper()
	return strings.TrimSpace(run(tb, chromedp.Text(chromedp.CSS(css))))
}

// count is how many elements match a CSS selector now.
func (tb *tab) count(css string) int {
	tb.t.Helper()
	return eval[int](tb, fmt.Sprintf(`document.querySelectorAll(%q).length`, css))
}

// textJS collects the text nodes of the page outside scripts and styles,
// as written in the HTML: innerText would apply text-transform, and
// textContent would include the JSON of the charts.
const textJS = `(function () {
	if (!document.body) return "";
	var out = [], w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	while (w.nextNode()) {
		var p = w.currentNode.parentElement;
		if (p && !p.closest("script, style, template")) out.push(w.currentNode.nodeValue);
	}
	return out.join(" ").replace(/\s+/g, " ");
})()`

// bodyText is the page's text (see textJS).
func (tb *tab) bodyText() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](textJS))
	if err != nil {
		return ""
	}
	return s
}

// expectStatus lets the console carry "status of N" for documents the
// test expects to fail.
func (tb *tab) expectStatus(code int) {
	tb.mu.Lock()
	tb.allowStatus = append(tb.allowStatus, code)
	tb.mu.Unlock()
}

// checkClean fails the test on any console error, uncaught exception or
// CSP violation since the last check, then starts over.
func (tb *tab) checkClean() {
	tb.t.Helper()
	// Let late errors (deferred scripts, chart rendering) arrive.
	_ = chromedp.Do(tb.ctx, chromedp.Sleep(100*time.Millisecond))
	csp, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[]string](`window.__tpCSP || []`))
	if err != nil {
		tb.t.Errorf("read CSP violations: %v", err)
	}
	tb.mu.Lock()
	problems := tb.problems
	tb.problems = nil
	allowed := tb.allowStatus
	tb.allowStatus = nil
	tb.mu.Unlock()
	for _, c := range csp {
		problems = append(problems, "CSP violation: "+c)
	}
	loc := tb.location()
	for _, p := range problems {
		if isExpectedStatus(p, allowed) {
			continue
		}
		tb.t.Errorf("%s: %s", loc, p)
	}
}

func isExpectedStatus(msg string, allowed []int) bool {
	// The missing favicon has a test of its own (testFavicon); it would
	// otherwise fail whichever test happens to load a page first.
	if strings.Contains(msg, "/favicon.ico") {
		return true
	}
	for _, code := range allowed {
		if strings.Contains(msg, fmt.Sprintf("status of %d", code)) {
			return true
		}
	}
	return false
}

// takeDialogs returns the confirm/alert messages seen since the last call.
func (tb *tab) takeDialogs() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	d := tb.dialogs
	tb.dialogs = nil
	return d
}

// screenshot saves a full-page PNG as artifacts/screenshots/<name>.png.
func (s *suite) screenshot(tb *tab, name string) {
	tb.t.Helper()
	// Charts render after DOMContentLoaded; fonts and layout settle.
	_ = chromedp.Do(tb.ctx, chromedp.Sleep(200*time.Millisecond))
	png := run(tb, chromedp.FullScreenshot(100))
	path := filepath.Join(s.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatalf("save screenshot: %v", err)
	}
	// Full-page capture can leave the viewport resized; put it back.
	tb.do(chromedp.EmulateViewport(viewportWidth, viewportHeight))
}

// cookies lists the names of the tab's cookies for the server.
func (tb *tab) cookies() []string {
	tb.t.Helper()
	res := run(tb, func(ctx context.Context, t *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{tb.base}})
	})
	var names []string
	for _, c := range res.Cookies {
		names = append(names, c.Name)
	}
	return names
}
