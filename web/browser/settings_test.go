package browser_test

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tokenpath/tokenpath/app/apptest"
)

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
