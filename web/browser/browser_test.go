// Package browser_test drives the Tokenpath UI in headless Chromium
// against a whole in-process server (real embedded ClickHouse, a
// PostgreSQL schema) seeded with demo traffic that carries planted
// incidents and one hostile trace. Every page it opens must render its
// figures, log no console error and break no CSP rule; screenshots land
// in artifacts/screenshots/ for a human to look at.
package browser_test

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

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

// parseMs reads a figure as the pages print it ("850 ms", "1.9 s");
// ok is false for "—".
func parseMs(s string) (float64, bool) {
	s = strings.TrimSpace(strings.NewReplacer("\u2009", "", "\u202f", "").Replace(s))
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{" ms", 1}, {" s", 1000}, {" min", 60000}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f * u.scale, err == nil
		}
	}
	return 0, false
}

func (s *suite) testRequests(t *testing.T) {
	tb := s.loggedInTab(t)
	q := url.Values{"service": {"rag-chat"}, "from": {rfc(s.data.kv.From)}, "to": {rfc(s.data.kv.To)}}
	tb.open("/requests?" + q.Encode())
	tb.do(chromedp.WaitVisible(chromedp.CSS("table.requests tbody tr")))
	ttfts := func() []string {
		return eval[[]string](tb, `[...document.querySelectorAll("table.requests tbody tr td.num.strong")].map(td => td.textContent.trim())`)
	}
	before := ttfts()
	if len(before) < 10 {
		t.Fatalf("only %d request rows for rag-chat over the KV window", len(before))
	}
	services := eval[[]string](tb, `[...new Set([...document.querySelectorAll("table.requests tbody tr td:nth-child(2)")].map(td => td.textContent.trim()))]`)
	for _, svc := range services {
		// "rag-chat → vllm-llama": the caller, then the server.
		if svc != "rag-chat" && !strings.HasPrefix(svc, "rag-chat →") {
			t.Errorf("service filter rag-chat shows service %q", svc)
		}
	}
	// The filter fields line up: every row starts at the form's left
	// edge, and typed and chosen fields stand the same height.
	fields := eval[[][]float64](tb, `[...document.querySelectorAll("form.filters .field")].map(f => { const r = f.getBoundingClientRect(), c = f.querySelector("input, select").getBoundingClientRect(); return [r.left, r.top, c.height]; })`)
	if len(fields) < 6 {
		t.Fatalf("%d filter fields, want 6", len(fields))
	}
	formLeft := eval[float64](tb, `(f => f.getBoundingClientRect().left + parseFloat(getComputedStyle(f).paddingLeft))(document.querySelector("form.filters"))`)
	for i, f := range fields {
		newRow := i == 0 || f[1] > fields[i-1][1]+1
		if newRow && math.Abs(f[0]-formLeft) > 1 {
			t.Errorf("filter field %d starts a row at x = %.0f, the form's content at %.0f", i, f[0], formLeft)
		}
		if math.Abs(f[2]-fields[0][2]) > 1 {
			t.Errorf("filter field %d is %.0f px high, the first %.0f", i, f[2], fields[0][2])
		}
	}
	s.screenshot(tb, "requests")
	tb.checkClean()

	// At 1280 px the whole row shows, a cold start's tag included; on
	// narrower screens secondary columns give way. At every width down to
	// 720 px the table needs no scrolling, TTFT shows, and every row's
	// cells (a managed API's "bundled in TTFT" spans three) fill the
	// headers shown, no more, no less.
	cold := "/requests?" + url.Values{"cold_start": {"true"}, "from": {rfc(s.data.cold.From)}, "to": {rfc(s.data.cold.To)}}.Encode()
	mixed := "/requests?" + url.Values{"from": {rfc(s.data.from)}, "to": {rfc(s.data.to)}}.Encode()
	for _, w := range []int64{viewportWidth, 1100, 800, 720} {
		tb.do(chromedp.EmulateViewport(w, viewportHeight))
		for _, page := range []struct{ path, row string }{{cold, "td.flags .tag-cold"}, {mixed, "td.bundled"}} {
			tb.open(page.path)
			tb.do(chromedp.WaitVisible(chromedp.CSS("table.requests tbody tr " + page.row)))
			if sw := eval[[]float64](tb, `(e => [e.scrollWidth, e.clientWidth])(document.querySelector("table.requests").closest(".table-wrap"))`); sw[0] > sw[1]+1 {
				t.Errorf("%s at %d px: the table is %v px wide in %v px", page.path, w, sw[0], sw[1])
			}
			shown := eval[[]string](tb, `[...document.querySelectorAll("table.requests thead th")].filter(th => th.offsetParent !== null).map(th => th.textContent.trim())`)
			if !slices.ContainsFunc(shown, func(h string) bool { return strings.HasPrefix(h, "TTFT") }) {
				t.Errorf("%s at %d px: the headers shown %q lack TTFT", page.path, w, shown)
			}
			spans := eval[[]float64](tb, `[...document.querySelectorAll("table.requests tbody tr")].map(tr => [...tr.cells].filter(td => td.offsetParent !== null || td.getClientRects().length > 0).reduce((n, td) => n + td.colSpan, 0))`)
			for i, n := range spans {
				if int(n) != len(shown) {
					t.Errorf("%s at %d px: row %d spans %v columns under %d headers shown", page.path, w, i, n, len(shown))
					break
				}
			}
		}
	}
	tb.do(chromedp.EmulateViewport(viewportWidth, viewportHeight))
	tb.checkClean()

	// Sort by TTFT: the header link swaps the table in place (htmx).
	tb.do(chromedp.Click(chromedp.CSS(`table.requests thead th a[href*="sort=ttft"]`)))
	tb.waitJS("TTFT sort", `(function () {
		var a = document.querySelector('table.requests thead th[aria-sort="descending"] a, table.requests thead th[aria-sort="ascending"] a');
		return a && a.textContent.indexOf("TTFT") === 0;
	})()`)
	order := eval[string](tb, `document.querySelector('table.requests thead th[aria-sort="descending"], table.requests thead th[aria-sort="ascending"]').getAttribute("aria-sort")`)
	if !strings.Contains(eval[string](tb, "location.search"), "sort=ttft") {
		t.Errorf("the sorted table's URL was not pushed: %s", tb.location())
	}
	after := ttfts()
	if slices.Equal(before, after) {
		t.Errorf("sorting by TTFT did not change the order: %q", after)
	}
	var vals []float64
	for _, a := range after {
		if v, ok := parseMs(a); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) < 10 {
		t.Fatalf("TTFT cells after sorting are not figures: %q", after)
	}
	sorted := slices.IsSortedFunc(vals, func(a, b float64) int {
		if order == "descending" {
			a, b = b, a
		}
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	if !sorted {
		t.Errorf("TTFT column is not %s after sorting: %q", order, after)
	}
	s.screenshot(tb, "requests-sorted-ttft")
	tb.checkClean()
}

func (s *suite) testRequestDetail(t *testing.T) {
	rows := apiRequests(t, s.srv, windowQuery("rag-chat", s.data.kv))
	var slow apiRow
	for _, r := range rows {
		if r.TTFT != nil && (slow.TTFT == nil || *r.TTFT > *slow.TTFT) {
			slow = r
		}
	}
	if slow.TraceID == "" {
		t.Fatalf("no rag-chat request with a TTFT in the KV window")
	}
	tb := s.loggedInTab(t)
	// The header's trace ID box opens it, pasted in capitals.
	tb.open("/requests")
	tb.do(chromedp.SendKeys("#trace-lookup", " "+strings.ToUpper(slow.TraceID)), chromedp.Submit("#trace-lookup"))
	tb.waitJS("the trace ID box opens the trace", `location.pathname === "/requests/`+slow.TraceID+`"`)
	tb.do(chromedp.WaitVisible(chromedp.CSS("table.waterfall-table")))
	if got := tb.text("h1 .trace-id"); got != slow.TraceID {
		t.Errorf("trace heading %q, want %s", got, slow.TraceID)
	}
	if n := tb.count("table.waterfall-table tbody tr"); n < 2 {
		t.Errorf("waterfall has %d spans, want the app span and the LLM call at least", n)
	}
	if n := tb.count("table.waterfall-table rect.wf-seg"); n < 2 {
		t.Errorf("the LLM call bar has %d component segments, want its split (queue, prefill, decode …)", n)
	}
	if n := tb.count("section.llm-call table.components tbody tr"); n == 0 {
		t.Errorf("no component table for the LLM call")
	}
	// Spans sit right of their parents, and the inference server's span
	// (under the call) shows its own split.
	type wfRow struct {
		Left   float64 `json:"left"`
		Depth  int     `json:"depth"`
		Segs   int     `json:"segs"`
		Server bool    `json:"server"`
	}
	wf := eval[[]wfRow](tb, `[...document.querySelectorAll("table.waterfall-table tbody tr")].map(tr => {
		const th = tr.querySelector("th.wf-name"), m = th.className.match(/depth-(\d+)/);
		return {left: th.querySelector("a").getBoundingClientRect().left, depth: m ? +m[1] : 0,
			segs: tr.querySelectorAll("rect.wf-seg").length,
			server: [...th.querySelectorAll("a.tag")].some(a => a.textContent.trim() === "server side")};
	})`)
	left := map[int]float64{}
	servers := 0
	for _, r := range wf {
		if l, ok := left[r.Depth]; ok && math.Abs(l-r.Left) > 1 {
			t.Errorf("spans at depth %d start at %.0f and %.0f px", r.Depth, l, r.Left)
		}
		left[r.Depth] = r.Left
		if r.Server {
			servers++
			if r.Segs < 2 {
				t.Errorf("the inference server's span has %d segments, want its queue, prefill and decode", r.Segs)
			}
		}
	}
	for d := 1; d <= 2; d++ {
		if left[d]-left[d-1] < 8 {
			t.Errorf("spans at depth %d start %.1f px right of depth %d, want a visible step (%v)", d, left[d]-left[d-1], d-1, wf)
		}
	}
	if servers == 0 {
		t.Errorf("no inference server span marked in the waterfall: %v", wf)
	}
	parts := eval[[]string](tb, `[...document.querySelectorAll("section.llm-call table.components tbody th")].map(th => th.textContent.trim())`)
	for _, want := range []string{"Queue", "Prefill", "Decode", "TTFT"} {
		if !slices.Contains(parts, want) {
			t.Errorf("the call's component table %q lacks %s", parts, want)
		}
	}
	s.screenshot(tb, "request-detail")
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

func (s *suite) testSLOs(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.open("/slos")
	tb.do(chromedp.WaitVisible(chromedp.ID("slo-threshold")))
	// Text boxes and selects side by side stand the same height and sit
	// as far below their labels, so a row's labels line up.
	if sizes := eval[[]string](tb, `[...document.querySelectorAll("form.slo-form .field")].filter(f => f.querySelector("input, select")).map(f => {
		var c = f.querySelector("input, select").getBoundingClientRect(), l = f.querySelector("label").getBoundingClientRect();
		return Math.round(c.height) + " px high, " + Math.round(c.top - l.top) + " px below its label";
	})`); len(sizes) < 6 || len(slices.Compact(slices.Clone(sizes))) != 1 {
		t.Errorf("the SLO form's controls are %q, want them all alike", sizes)
	}
	tb.do(
		chromedp.SendKeys(chromedp.ID("slo-service"), "rag-chat"),
		chromedp.SetValue(chromedp.ID("slo-metric"), "ttft"),
		chromedp.SetValue(chromedp.ID("slo-percentile"), "95"),
		chromedp.SendKeys(chromedp.ID("slo-threshold"), "800"),
		chromedp.SetValue(chromedp.ID("slo-window"), "1h"),
		chromedp.Click(chromedp.CSS(`form.slo-form button[type=submit]`)),
	)
	tb.waitJS("SLO row", `document.querySelectorAll("table.slos tbody tr").length > 0`)
	row := eval[string](tb, `document.querySelector("table.slos tbody tr").textContent.replace(/\s+/g, " ")`)
	if !strings.Contains(row, "rag-chat") || !strings.Contains(row, "800") {
		t.Errorf("new SLO row %q does not show rag-chat and 800 ms", row)
	}
	if tb.count("table.slos tbody tr .slo-state") == 0 {
		t.Errorf("the SLO has no met/violated state: %q", row)
	}
	s.waitCharts(tb)
	s.screenshot(tb, "slos")
	tb.checkClean()
}

func (s *suite) testSettingsKeys(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.open("/settings")
	tb.do(
		chromedp.WaitVisible(chromedp.ID("key-name")),
		chromedp.SendKeys(chromedp.ID("key-name"), "browser-test key"),
		chromedp.Click(chromedp.CSS(`form[action="/settings/keys"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(".new-key")),
	)
	newKey := tb.text(".new-key pre")
	if !strings.HasPrefix(newKey, "tp_") || len(newKey) < 20 {
		t.Fatalf("the new key shown is %q", newKey)
	}
	s.screenshot(tb, "settings-new-key")
	tb.checkClean()

	// Shown once: a reload of the page no longer has it.
	tb.open("/settings")
	if strings.Contains(tb.bodyText(), newKey) {
		t.Errorf("the new key is still shown after a reload")
	}
	rowJS := `[...document.querySelectorAll("#keys tbody tr")].find(tr => tr.cells[0].textContent.indexOf("browser-test key") >= 0)`
	if !eval[bool](tb, "!!"+rowJS) {
		t.Fatalf("the new key is not listed")
	}
	// A row with controls centres its text on them, not on their top edge:
	// a model's name beside its price inputs.
	if off := eval[float64](tb, `(function () {
		var tr = [...document.querySelectorAll("table.prices tbody tr")].find(tr => tr.cells[0].querySelector("input[type=hidden]"));
		var t = tr.cells[0].querySelector("span").getBoundingClientRect(), b = tr.cells[1].querySelector("input").getBoundingClientRect();
		return Math.abs((t.top + t.bottom) / 2 - (b.top + b.bottom) / 2);
	})()`); off > 2 {
		t.Errorf("a model's name sits %.1f px off the middle of its price input", off)
	}
	// The key works for the API until it is revoked.
	if code := apiStatus(s.srv, newKey); code != 200 {
		t.Errorf("the new key gets HTTP %d from the API, want 200", code)
	}
	tb.do(chromedp.Evaluate[chromedp.Void](`(` + rowJS + `).querySelector("form button[type=submit]").click()`))
	tb.waitJS("revoked row", `(function () { var tr = `+rowJS+`; return tr && tr.classList.contains("revoked"); })()`)
	if d := tb.takeDialogs(); len(d) != 1 || !strings.Contains(d[0], "Revoke key browser-test key") {
		t.Errorf("revoke asked %q, want one confirmation naming the key", d)
	}
	if status := eval[string](tb, `(`+rowJS+`).cells[4].textContent.trim()`); !strings.HasPrefix(status, "Revoked") {
		t.Errorf("revoked key's status reads %q", status)
	}
	if code := apiStatus(s.srv, newKey); code != 401 {
		t.Errorf("a revoked key gets HTTP %d from the API, want 401", code)
	}
	s.screenshot(tb, "settings")
	tb.checkClean()
}

func (s *suite) testShare(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.open(diagnosePath("rag-chat", s.data.kv))
	tb.do(chromedp.WaitVisible(chromedp.CSS(".verdict .sentence")))
	sentence := tb.text(".verdict .sentence")
	tb.do(chromedp.Click(chromedp.CSS(`form.share-form button[type=submit]`)))
	tb.waitPath("/shares")
	tb.do(chromedp.WaitVisible(chromedp.ID("created-url")))
	link := run(tb, chromedp.Value(chromedp.ID("created-url")))
	u, err := url.Parse(link)
	if err != nil || !strings.HasPrefix(u.Path, "/s/") {
		t.Fatalf("share link %q is not a /s/<token> URL", link)
	}
	s.screenshot(tb, "shares-created")
	tb.checkClean()

	// Anyone with the link: a fresh browser context, no cookies.
	anon := s.newTab(t)
	anon.open(u.Path)
	if c := anon.cookies(); slices.Contains(c, "tp_session") {
		t.Fatalf("the anonymous tab has a session: %v", c)
	}
	anon.do(chromedp.WaitVisible(chromedp.CSS(".verdict .sentence")))
	if got := anon.text(".verdict .sentence"); got != sentence {
		t.Errorf("shared snapshot says %q, the live page said %q", got, sentence)
	}
	ogTitle := eval[string](anon, `(document.querySelector('meta[property="og:title"]') || {}).content || ""`)
	if !strings.HasPrefix(ogTitle, "rag-chat: ") || !strings.Contains(ogTitle, " UTC") {
		t.Errorf("the snapshot's og:title %q does not name the service and the window", ogTitle)
	}
	// The unfurl's picture, fetched as a chat app would, without cookies.
	img := eval[string](anon, `(document.querySelector('meta[property="og:image"]') || {}).content || ""`)
	if !strings.HasPrefix(img, "http") || !strings.HasSuffix(img, u.Path+"/chart.png") {
		t.Errorf("og:image = %q, want the absolute URL of %s/chart.png", img, u.Path)
	} else {
		size := run(anon, chromedp.Evaluate[[]int](`fetch(`+strconv.Quote(img)+`, {credentials: "omit"}).then(r => r.ok ? r.blob() : null)
			.then(b => b && b.size > 1000 ? createImageBitmap(b).then(i => [b.size, i.width, i.height]) : [b ? b.size : 0, 0, 0])`, chromedp.EvalAwaitPromise))
		if size[0] <= 1000 || size[1] != 1200 || size[2] != 630 {
			t.Errorf("og:image answers %d bytes of a %dx%d picture, want a 1200x630 PNG", size[0], size[1], size[2])
		}
	}
	if eval[int](anon, `document.querySelectorAll("nav.main").length`) != 0 {
		t.Errorf("the snapshot shows the app navigation to a logged-out reader")
	}
	if anon.count(".snapshot-banner") == 0 {
		t.Errorf("the snapshot does not say it is a frozen snapshot")
	}
	s.waitCharts(anon)
	s.screenshot(anon, "share-snapshot")
	anon.checkClean()

	// Revoke it from /shares.
	tb.open("/shares")
	rowJS := fmt.Sprintf(`[...document.querySelectorAll("table.shares tbody tr.share-active")].find(tr => tr.querySelector("a[href^='/diagnose']") && tr.querySelector("a[href^='/diagnose']").getAttribute("href") === %q)`,
		diagnosePath("rag-chat", s.data.kv))
	if !eval[bool](tb, "!!"+rowJS) {
		t.Logf("shares page: %s", tb.bodyText())
		t.Fatalf("the new link is not listed as active on /shares")
	}
	tb.do(chromedp.Evaluate[chromedp.Void](`(` + rowJS + `).querySelector("form button[type=submit]").click()`))
	tb.waitJS("revoked share", `document.querySelectorAll("table.shares tbody tr.share-revoked").length > 0 && location.search.indexOf("revoked=") >= 0`)
	if d := tb.takeDialogs(); len(d) != 1 {
		t.Errorf("revoking a share asked %d confirmations (%q), want 1", len(d), d)
	}
	s.screenshot(tb, "shares")
	tb.checkClean()

	anon.expectStatus(404)
	if code := anon.openStatus(u.Path); code != 404 {
		t.Errorf("a revoked link answers HTTP %d, want 404", code)
	}
	if h := anon.text("main h1"); h != "Not found" {
		t.Errorf("a revoked link shows %q, want the not-found page", h)
	}
	if strings.Contains(anon.bodyText(), sentence) {
		t.Errorf("a revoked link still shows the diagnosis")
	}
	s.screenshot(anon, "share-revoked-404")
	anon.checkClean()
}

// apiStatus is the status /api/v1/services answers a key with.
func apiStatus(srv *apptest.Server, key string) int {
	req, _ := newAPIRequest(srv, "/api/v1/services", key)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (s *suite) testXSS(t *testing.T) {
	tb := s.loggedInTab(t)
	hostileQ := url.Values{"service": {hostileService}, "from": {rfc(s.data.from)}, "to": {rfc(s.data.to.Add(time.Minute))}}
	pages := []struct {
		name, path string
		texts      []string
	}{
		{"overview", "/?last=1h", []string{hostileService, hostileModel}},
		{"requests", "/requests?" + url.Values{"from": {rfc(s.data.from)}, "to": {rfc(s.data.to.Add(time.Minute))}}.Encode(), []string{hostileService}},
		{"requests-filtered", "/requests?" + hostileQ.Encode(), []string{hostileService, hostileModel}},
		{"request-detail", "/requests/" + s.data.hostileTrace, []string{hostileService, hostileAttr, hostileSQL, hostileModel, "<b>pod</b>"}},
		{"diagnose", "/diagnose?" + hostileQ.Encode(), []string{hostileService}},
		{"compare", "/compare?" + url.Values{"service": {hostileService}}.Encode(), []string{hostileService}},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			tb.t = t
			tb.open(p.path)
			// Open every disclosure so attribute tables are rendered text.
			tb.do(chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("details").forEach(d => d.open = true)`))
			if got := eval[string](tb, `typeof window.__xss`); got != "undefined" {
				t.Errorf("hostile markup ran: window.__xss is %s", got)
			}
			if n := eval[int](tb, `document.querySelectorAll('img[src="x"], svg[onload], script:not([src]):not([type="application/json"])').length`); n != 0 {
				t.Errorf("%d hostile elements were parsed into the DOM", n)
			}
			body := tb.bodyText()
			for _, want := range p.texts {
				if !strings.Contains(body, want) {
					t.Errorf("the literal %q is not shown as text", want)
				}
			}
			if p.name == "request-detail" && !strings.Contains(body, "caf") {
				t.Errorf("the invalid UTF-8 attribute is missing")
			}
			s.screenshot(tb, "xss-"+p.name)
			tb.checkClean()
		})
	}
}

func (s *suite) testKeyboardAndTheme(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.open("/settings")
	// The first Tab from the top of the page reaches the skip link, which
	// becomes visible.
	tb.do(chromedp.KeyEvent(kb.Tab))
	if cls := eval[string](tb, `document.activeElement.className`); cls != "skip" {
		t.Fatalf("first Tab focuses %q (%s), want the skip link", cls, eval[string](tb, `document.activeElement.outerHTML.slice(0, 120)`))
	}
	if left := eval[float64](tb, `document.activeElement.getBoundingClientRect().left`); left < 0 {
		t.Errorf("the focused skip link is off screen (left %v)", left)
	}
	s.screenshot(tb, "keyboard-skip-link")
	// Further Tabs reach the main navigation.
	reached := false
	for i := 0; i < 5 && !reached; i++ {
		tb.do(chromedp.KeyEvent(kb.Tab))
		reached = eval[bool](tb, `!!document.activeElement.closest("nav.main")`)
	}
	if !reached {
		t.Errorf("Tab never reached the main navigation; focus is on %s", eval[string](tb, `document.activeElement.outerHTML.slice(0, 120)`))
	}
	// Enter on the skip link moves focus target to main.
	tb.do(chromedp.Focus(chromedp.CSS("a.skip")), chromedp.KeyEvent(kb.Enter))
	tb.waitJS("skip to #content", `location.hash === "#content"`)

	// The theme toggle flips data-theme on <html> and remembers it.
	first := eval[string](tb, `document.documentElement.getAttribute("data-theme") || ""`)
	tb.do(chromedp.Click(chromedp.ID("theme-toggle")))
	second := eval[string](tb, `document.documentElement.getAttribute("data-theme") || ""`)
	if second == first || (second != "dark" && second != "light") {
		t.Errorf("theme toggle: data-theme %q → %q", first, second)
	}
	tb.open("/slos")
	if got := eval[string](tb, `document.documentElement.getAttribute("data-theme") || ""`); got != second {
		t.Errorf("the theme is not remembered across pages: %q, want %q", got, second)
	}
	tb.do(chromedp.Click(chromedp.ID("theme-toggle")))
	if third := eval[string](tb, `document.documentElement.getAttribute("data-theme")`); third == second {
		t.Errorf("the second toggle did not switch back from %q", second)
	}
	tb.checkClean()
}

func (s *suite) testResponsive(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.do(chromedp.EmulateViewport(720, 1000))
	for _, p := range []struct{ name, path string }{
		{"overview", "/?last=1h"},
		{"diagnose", diagnosePath("rag-chat", s.data.kv)},
		{"requests", "/requests"},
	} {
		tb.open(p.path)
		s.waitCharts(tb)
		sw := eval[float64](tb, `document.documentElement.scrollWidth`)
		iw := eval[float64](tb, `window.innerWidth`)
		if sw > iw+1 {
			wide := eval[string](tb, `[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest(".table-wrap")).slice(0, 5).map(e => e.tagName + "." + e.className).join(", ")`)
			t.Errorf("%s at 720 px: page is %v px wide (viewport %v); sticking out: %s", p.name, sw, iw, wide)
		}
		// Tables drop secondary columns rather than scroll (a chart's
		// numbers, behind "Show the numbers", may scroll).
		wide := eval[[]string](tb, `[...document.querySelectorAll(".table-wrap")].filter(e => !e.closest("details") && e.scrollWidth > e.clientWidth + 1).map(e => (e.closest("section, details")?.querySelector("h2, summary")?.textContent.trim() || "?") + ": " + e.scrollWidth + " px in " + e.clientWidth)`)
		for _, w := range wide {
			t.Errorf("%s at 720 px: a table scrolls: %s", p.name, w)
		}
		png := run(tb, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(s.shots, p.name+"-720.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		tb.do(chromedp.EmulateViewport(720, 1000))
		tb.checkClean()
	}
}

// The pages say "Times in UTC"; the charts must agree for a reader whose
// browser is in another zone. The legend shows the hovered bucket's time
// with the same formatter as the axis.
func (s *suite) testChartsInUTC(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Kolkata"})
		return err
	}))
	tb.open(diagnosePath("rag-chat", s.data.kv))
	if off := eval[int](tb, `new Date(0).getTimezoneOffset()`); off != -330 {
		t.Fatalf("the time-zone override did not apply (offset %d min)", off)
	}
	s.waitCharts(tb)
	box := eval[[]float64](tb, `(function () {
		var o = document.querySelector("[data-chart] .u-over");
		o.scrollIntoView({block: "center"});
		var r = o.getBoundingClientRect();
		return [r.left + r.width / 2, r.top + r.height / 2];
	})()`)
	tb.do(chromedp.MouseEvent(chromedp.MouseMoved, box[0], box[1]))
	tb.waitJS("legend time", `/\d:\d\d/.test(document.querySelector("[data-chart] .u-legend .u-series:first-child .u-value").textContent)`)
	shown := eval[string](tb, `document.querySelector("[data-chart] .u-legend .u-series:first-child .u-value").textContent`)
	m := regexp.MustCompile(`(?i)(\d{1,2}):(\d{2})(?::\d{2})?\s*([ap]m)?`).FindStringSubmatch(shown)
	if m == nil {
		t.Fatalf("legend time %q has no clock time", shown)
	}
	h, _ := strconv.Atoi(m[1])
	mi, _ := strconv.Atoi(m[2])
	switch strings.ToLower(m[3]) {
	case "pm":
		if h != 12 {
			h += 12
		}
	case "am":
		if h == 12 {
			h = 0
		}
	}
	got := h*60 + mi
	ok := false
	for tm := s.data.kv.From.Add(-time.Minute); !tm.After(s.data.kv.To.Add(time.Minute)); tm = tm.Add(time.Minute) {
		if tm.UTC().Hour()*60+tm.UTC().Minute() == got {
			ok = true
		}
	}
	if !ok {
		t.Errorf("in a browser set to Asia/Kolkata the chart legend reads %q for the window %s–%s UTC: the charts use the browser's zone, the page says UTC",
			shown, s.data.kv.From.Format("15:04"), s.data.kv.To.Format("15:04"))
	}
	// Written as the pages write times: 24-hour, day before month.
	// (The window's days: it may cross midnight UTC.)
	day, lastDay := s.data.kv.From.UTC().Format("2 Jan"), s.data.kv.To.UTC().Format("2 Jan")
	if !regexp.MustCompile(`^\d{1,2} [A-Z][a-z]{2} \d{2}:\d{2}:\d{2}$`).MatchString(shown) || !strings.HasPrefix(shown, day+" ") && !strings.HasPrefix(shown, lastDay+" ") {
		t.Errorf("legend time %q, want the form %q", shown, day+" 14:05:00")
	}
	ticks := strings.Split(eval[string](tb, `document.querySelector("[data-chart]").dataset.xTicks || ""`), "|")
	tick := regexp.MustCompile(`^\d{2}:\d{2}(:\d{2})?(\n\d{1,2} [A-Z][a-z]{2})?$`)
	for _, l := range ticks {
		if !tick.MatchString(l) {
			t.Errorf("x-axis label %q of %q, want 24-hour HH:MM or HH:MM:SS (the day under the first)", l, ticks)
		}
	}
	if !strings.HasSuffix(ticks[0], "\n"+day) && !strings.HasSuffix(ticks[0], "\n"+lastDay) {
		t.Errorf("the first x-axis label %q does not name the day %s", ticks[0], day)
	}
	tb.checkClean()
}

// A page load must not log a 404: Chromium asks for /favicon.ico unless
// the page names an icon. (Logged out, the request is redirected to the
// login page, so the check runs logged in.)
func (s *suite) testFavicon(t *testing.T) {
	tb := s.loggedInTab(t)
	icon := eval[string](tb, `(document.querySelector('link[rel~="icon"]') || {}).href || ""`)
	status := run(tb, chromedp.Evaluate[int](`fetch("/favicon.ico", {redirect: "manual"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	tb.expectStatus(404)
	tb.checkClean()
	if icon == "" && status == 404 {
		t.Errorf("no <link rel=icon> in the layout and GET /favicon.ico is 404: every first page view logs a console error (add e.g. <link rel=\"icon\" href=\"data:,\"> or serve /favicon.ico)")
	}
}

// On a phone the header keeps the brand and its buttons on one row, and
// the requests filters fold under their summary, so the table starts on
// the first screen; they stay open when one is set, and on wider screens
// there is nothing to fold.
func (s *suite) testPhone(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.do(chromedp.EmulateViewport(390, 800))
	defer tb.do(chromedp.EmulateViewport(1280, 900))
	tb.open("/requests")
	header := eval[[]float64](tb, `(function () {
		var top = e => document.querySelector(e).getBoundingClientRect().top;
		return [document.querySelector("header.top").getBoundingClientRect().height, top("header .brand"), top("#theme-toggle"), top("header form.inline button")];
	})()`)
	if header[0] > 180 || math.Abs(header[2]-header[1]) > 12 || math.Abs(header[3]-header[1]) > 12 {
		t.Errorf("at 390 px the header is %.0f px high (want ≤ 180) with the brand at %.0f, Theme at %.0f and Log out at %.0f (want one row)", header[0], header[1], header[2], header[3])
	}
	if eval[bool](tb, `document.querySelector("details.filters-box").open`) {
		t.Errorf("at 390 px the filters are open with none set")
	}
	if top := eval[float64](tb, `document.querySelector("table.requests tbody tr").getBoundingClientRect().top`); top > 800 {
		t.Errorf("at 390 px the first request row starts at %.0f px, below the first screen (800)", top)
	}
	tb.do(chromedp.Click(chromedp.CSS("details.filters-box > summary")))
	tb.waitJS("filters opened", `document.getElementById("f-service").getBoundingClientRect().height > 0`)
	tb.open("/requests?service=rag-chat")
	if !eval[bool](tb, `document.querySelector("details.filters-box").open`) {
		t.Errorf("at 390 px the filters fold away while one is set (service=rag-chat)")
	}
	// The diagnosis puts its verdict, not its pickers, on the first screen.
	tb.open(diagnosePath("rag-chat", s.data.kv))
	tb.do(chromedp.WaitVisible(chromedp.CSS(".verdict .sentence")))
	if open, top := eval[bool](tb, `!!(document.querySelector("details.filters-box") || {}).open`), eval[float64](tb, `document.querySelector(".verdict .sentence").getBoundingClientRect().top`); open || top > 600 {
		t.Errorf("at 390 px the diagnosis's pickers are open %v and its verdict starts at %.0f px (want folded, and the verdict within 600)", open, top)
	}
	// A trace: the waterfall's axis labels do not overlap, and a call's
	// notes are not squeezed to a letter a line.
	if rows := apiRequests(t, s.srv, windowQuery("rag-chat", s.data.kv)); len(rows) > 0 {
		tb.open("/requests/" + rows[0].TraceID)
		tb.do(chromedp.WaitVisible(chromedp.CSS("table.waterfall-table")))
		overlaps := eval[[]string](tb, `(function () {
			var ts = [...document.querySelectorAll("svg.wf-axis text")].filter(t => getComputedStyle(t).display !== "none").map(t => [t.textContent, t.getBoundingClientRect()]), out = [];
			for (var i = 1; i < ts.length; i++) if (ts[i][1].left < ts[i-1][1].right) out.push(ts[i-1][0] + " / " + ts[i][0]);
			return out;
		})()`)
		if len(overlaps) > 0 {
			t.Errorf("at 390 px the waterfall's axis labels overlap: %q", overlaps)
		}
		if w := eval[float64](tb, `Math.min(...[...document.querySelectorAll("table.components td:last-child")].map(td => td.getBoundingClientRect().width))`); w < 150 {
			t.Errorf("at 390 px a call's notes are %.0f px wide, want ≥ 150", w)
		}
	} else {
		t.Errorf("no rag-chat request in the KV window to open")
	}
	tb.do(chromedp.EmulateViewport(1280, 900))
	tb.open("/requests")
	if open, shown := eval[bool](tb, `document.querySelector("details.filters-box").open`), eval[float64](tb, `document.querySelector("details.filters-box > summary").getBoundingClientRect().height`); !open || shown > 0 {
		t.Errorf("at 1280 px the filters are open %v and their summary %.0f px high, want open with no summary", open, shown)
	}
	tb.checkClean()
}
