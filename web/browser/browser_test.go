// Package browser_test drives the Tokenpath UI in headless Chromium
// against a whole in-process server (real embedded ClickHouse, a
// PostgreSQL schema) seeded with demo traffic that carries planted
// incidents and one hostile trace. Every page it opens must render its
// figures, log no console error and break no CSP rule; screenshots land
// in artifacts/screenshots/ for a human to look at.
package browser_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/demo"
	"github.com/tokenpath/tokenpath/web/views"
)

// suite is what every browser test shares: one server, one seeded data
// set, one browser.
type suite struct {
	srv     *apptest.Server
	base    string
	data    seeded
	browser context.Context
	shots   string
	// session is the session cookie of the suite's first form login,
	// which later tabs reuse (see loggedInTab).
	session string
}

// TestBrowser runs the UI suite. The subtests share the server and the
// browser and run in order (the share test revokes what it created).
func TestBrowser(t *testing.T) {
	start := time.Now()
	s := &suite{}
	s.shots = screenshotDir(t)
	s.browser = startBrowser(t)
	t.Logf("chromium up in %s", time.Since(start).Round(time.Millisecond))
	s.srv = apptest.Start(t, apptest.Options{})
	s.base = "http://" + s.srv.HTTPAddr
	t.Logf("server up in %s", time.Since(start).Round(time.Millisecond))
	s.data = seed(t, s.srv)
	t.Logf("seeded %d LLM requests (%s) in %s", s.data.requests, s.data, time.Since(start).Round(time.Millisecond))

	t.Run("detector", s.testDetectorCatchesCSP)
	t.Run("login", s.testLogin)
	t.Run("overview", s.testOverview)
	t.Run("diagnose", s.testDiagnose)
	t.Run("chart_story", s.testChartStory)
	t.Run("requests", s.testRequests)
	t.Run("request_detail", s.testRequestDetail)
	t.Run("compare", s.testCompare)
	t.Run("slos", s.testSLOs)
	t.Run("cookie_tossing", s.testCookieTossing)
	t.Run("settings_keys", s.testSettingsKeys)
	t.Run("share", s.testShare)
	t.Run("xss", s.testXSS)
	t.Run("charts_utc", s.testChartsInUTC)
	t.Run("favicon", s.testFavicon)
	t.Run("keyboard_theme", s.testKeyboardAndTheme)
	t.Run("responsive_720", s.testResponsive)
	t.Run("phone", s.testPhone)
	t.Run("phone_overview", s.testPhoneOverview)
	t.Run("spoofing", s.testSpoofing)
}

// screenshotDir is <repo>/artifacts/screenshots (gitignored).
func screenshotDir(t *testing.T) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repo root not found from %s: %v", root, err)
	}
	dir := filepath.Join(root, "artifacts", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// diagnosePath is the live diagnosis of a service over a planted phase.
func diagnosePath(service string, p demo.Phase) string {
	return "/diagnose?" + windowQuery(service, p).Encode()
}

// The listener must catch what it is meant to: a CSP-blocked inline
// script and a console error. Without this a silent detector would pass
// every other test.
func (s *suite) testDetectorCatchesCSP(t *testing.T) {
	tb := s.newTab(t)
	tb.openStatus("/login")
	tb.do(chromedp.Evaluate[chromedp.Void](`(function () {
		var sc = document.createElement("script");
		sc.textContent = "window.__inline = 1";
		document.head.appendChild(sc);
		console.error("detector self-test");
	})()`))
	_ = chromedp.Do(tb.ctx, chromedp.Sleep(200*time.Millisecond))
	if got := eval[string](tb, `typeof window.__inline`); got != "undefined" {
		t.Errorf("an inline script ran despite the CSP (window.__inline is %s)", got)
	}
	csp := eval[[]string](tb, `window.__tpCSP`)
	tb.mu.Lock()
	problems := strings.Join(tb.problems, "\n")
	tb.problems = nil
	tb.mu.Unlock()
	if len(csp) == 0 {
		t.Errorf("the CSP probe saw no violation for a blocked inline script")
	}
	if !strings.Contains(problems, "detector self-test") {
		t.Errorf("console.error was not recorded; recorded: %q", problems)
	}
	if !strings.Contains(problems, "Content Security Policy") {
		t.Errorf("Chromium's CSP console message was not recorded; recorded: %q", problems)
	}
}

func (s *suite) testLogin(t *testing.T) {
	tb := s.newTab(t)
	// A logged-out browser is sent to the login form.
	tb.open("/")
	tb.waitPath("/login")
	tb.checkClean()

	tb.expectStatus(401)
	tb.do(
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), "tp_wrong_key_000000000000"),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.notice.error`)),
	)
	if msg := tb.text(`.notice.error`); !strings.Contains(msg, "not valid") {
		t.Errorf("wrong key: error message %q, want one saying the key is not valid", msg)
	}
	if slices.Contains(tb.cookies(), "tp_session") {
		t.Errorf("a wrong key got a session cookie")
	}
	s.screenshot(tb, "login-error")
	tb.checkClean()

	tb.do(
		chromedp.Clear(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), apptest.Key),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button[type=submit]`)),
	)
	tb.waitPath("/")
	if h := tb.text("main h1"); h != "Overview" {
		t.Errorf("after login the page heading is %q, want Overview", h)
	}
	if !slices.Contains(tb.cookies(), "tp_session") {
		t.Errorf("no session cookie after login; cookies: %v", tb.cookies())
	}
	tb.checkClean()
}

func (s *suite) testOverview(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.open("/?last=1h")
	tb.do(chromedp.WaitVisible(chromedp.CSS("table.services")))
	services := eval[[]string](tb, `[...document.querySelectorAll("table.services tbody th[scope=row] a.strong")].map(a => a.textContent.trim())`)
	for _, want := range []string{"rag-chat", "support-agent"} {
		if !slices.Contains(services, want) {
			t.Errorf("overview services %q lack %s", services, want)
		}
	}
	// Verdict badges load after the page (htmx, one diagnosis per service).
	tb.do(chromedp.Poll[chromedp.Void](`document.querySelectorAll("table.services .badge").length >= 3`,
		chromedp.WithPollingTimeout(90*time.Second), chromedp.WithPollingInterval(500*time.Millisecond)))
	badges := eval[[]string](tb, `[...document.querySelectorAll("table.services .badge")].map(b => b.textContent.trim())`)
	if len(badges) == 0 {
		t.Errorf("no verdict badge on the overview (services %q)", services)
	}
	for _, b := range badges {
		if !slices.Contains(verdictLabels, b) {
			t.Errorf("verdict badge %q is not a verdict label", b)
		}
	}
	if n := tb.count(".kpis .kpi-card"); n == 0 {
		t.Errorf("no headline figures on the overview")
	}
	s.waitCharts(tb)
	s.screenshot(tb, "overview")
	tb.checkClean()
}

// verdictLabels are the words a verdict badge may say.
var verdictLabels = func() []string {
	var out []string
	for _, v := range []string{"queueing", "prefill", "cold_start", "network", "pre_inference", "decode", "provider", "errors", "healthy", ""} {
		out = append(out, views.VerdictLabel(v))
	}
	return out
}()

// waitCharts waits until every [data-chart] holds a uPlot canvas.
func (s *suite) waitCharts(tb *tab) int {
	tb.t.Helper()
	n := tb.count("[data-chart]")
	if n == 0 {
		return 0
	}
	tb.waitJS("uPlot charts", `(function () {
		var charts = document.querySelectorAll("[data-chart]");
		return charts.length > 0 && [...charts].every(c => c.querySelector(".uplot canvas"));
	})()`)
	return n
}

func (s *suite) testDiagnose(t *testing.T) {
	var want apiDiagnosis
	apiGet(t, s.srv, "/api/v1/diagnose", windowQuery("rag-chat", s.data.kv), &want)
	if want.Summary == "" {
		t.Fatalf("the API gives no diagnosis summary for the KV window: %+v", want)
	}
	t.Logf("API verdict for the KV-saturation window: %s — %s", want.Verdict, want.Summary)
	if want.Verdict != "queueing" {
		t.Errorf("API verdict over the planted KV saturation is %q, want queueing", want.Verdict)
	}

	tb := s.loggedInTab(t)
	tb.open(diagnosePath("rag-chat", s.data.kv))
	tb.do(chromedp.WaitVisible(chromedp.CSS(".verdict .sentence")))
	if got := tb.text(".verdict .sentence"); got != want.Summary {
		t.Errorf("verdict sentence on the page:\n  %q\nAPI summary:\n  %q", got, want.Summary)
	}
	if got := tb.text(".verdict .badge"); got != views.VerdictLabel(want.Verdict) {
		t.Errorf("verdict badge %q, want %q", got, views.VerdictLabel(want.Verdict))
	}
	if n := tb.count("ol.evidence li"); n == 0 {
		t.Errorf("no evidence listed")
	}
	if n := s.waitCharts(tb); n == 0 {
		t.Errorf("the diagnosis has no chart")
	} else if c := tb.count("[data-chart] .uplot canvas"); c < n {
		t.Errorf("%d charts but %d canvases", n, c)
	}
	s.screenshot(tb, "diagnose")
	tb.checkClean()

	// Dark theme: the toggle re-renders the charts in the dark palette.
	tb.do(chromedp.Click(chromedp.ID("theme-toggle")))
	tb.waitJS("dark theme", `document.documentElement.getAttribute("data-theme") === "dark"`)
	s.waitCharts(tb)
	s.screenshot(tb, "diagnose-dark")
	tb.do(chromedp.Click(chromedp.ID("theme-toggle")))
	tb.waitJS("light theme", `document.documentElement.getAttribute("data-theme") === "light"`)
	tb.checkClean()

	// The cold-start window is told apart from the queueing one.
	var cold apiDiagnosis
	apiGet(t, s.srv, "/api/v1/diagnose", windowQuery("rag-chat", s.data.cold), &cold)
	tb.open(diagnosePath("rag-chat", s.data.cold))
	tb.do(chromedp.WaitVisible(chromedp.CSS(".verdict .sentence")))
	if got := tb.text(".verdict .sentence"); got != cold.Summary {
		t.Errorf("cold-start window: page says %q, API %q", got, cold.Summary)
	}
	if cold.Verdict != "cold_start" {
		t.Errorf("API verdict over the planted cold start is %q (%s), want cold_start", cold.Verdict, cold.Summary)
	}
	// Its default baseline begins before the seeded traffic: the header,
	// drawn before the diagnosis, learns where the data starts from it.
	if cold.BaselineDataFrom == nil {
		t.Errorf("the API does not say where the cold window's thin baseline starts (seeded %s)", s.data)
	} else if want := "its requests start at " + views.HumanClockSeconds(*cold.BaselineDataFrom); !strings.Contains(tb.text("#baseline-text"), want) {
		t.Errorf("the page's baseline line %q does not say %q", tb.text("#baseline-text"), want)
	}
	s.waitCharts(tb)
	s.screenshot(tb, "diagnose-cold-start")
	tb.checkClean()
}

func (s *suite) testCompare(t *testing.T) {
	// Before: healthy minutes ahead of the incident; after: the incident.
	before := demo.Phase{From: s.data.kv.From.Add(-9 * time.Minute), To: s.data.kv.From.Add(-3 * time.Minute)}
	q := url.Values{"service": {"rag-chat"},
		"a_from": {rfc(before.From)}, "a_to": {rfc(before.To)},
		"b_from": {rfc(s.data.kv.From)}, "b_to": {rfc(s.data.kv.To)}}
	tb := s.loggedInTab(t)
	tb.open("/compare?" + q.Encode())
	tb.do(chromedp.WaitVisible(chromedp.CSS(".compare-summary .sentence")))
	if got := tb.text(".compare-summary .sentence"); got == "" {
		t.Errorf("compare summary sentence is empty")
	}
	worse := eval[[]string](tb, `[...document.querySelectorAll(".worse-list li")].map(li => li.textContent.replace(/\s+/g, " ").trim())`)
	if len(worse) == 0 {
		t.Errorf("nothing listed as worse across a planted KV saturation")
	}
	joined := strings.Join(worse, " | ")
	if !strings.Contains(strings.ToLower(joined), "queue") {
		t.Errorf("queue time is not among what got worse: %s", joined)
	}
	deltas := eval[[]string](tb, `[...document.querySelectorAll("table.compare tbody tr.row-worse td:nth-child(8)")].map(td => td.textContent.trim())`)
	if len(deltas) == 0 {
		t.Errorf("no delta in the compare tables marked worse")
	}
	for _, d := range deltas {
		if !strings.HasPrefix(d, "+") && !strings.HasPrefix(d, "−") && !strings.HasPrefix(d, "-") {
			t.Errorf("delta %q has no sign", d)
		}
	}
	s.screenshot(tb, "compare")
	tb.checkClean()
}
