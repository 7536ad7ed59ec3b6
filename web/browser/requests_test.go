package browser_test

import (
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

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
