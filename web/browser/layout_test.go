package browser_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

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
