package browser_test

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chartChecks reads, for every rendered chart of the page, what a reader
// sees before touching it: the legend's values, the value axes' tick
// labels, and the event labels' boxes against each other and the plot.
const chartChecksJS = `[...document.querySelectorAll("[data-chart]")].map(function (c) {
	var over = c.querySelector(".u-over").getBoundingClientRect();
	return {
		id: c.dataset.chart,
		legend: [...c.querySelectorAll(".u-legend .u-series:not(.u-off) .u-value")].map(v => v.textContent.trim()),
		ticks: ["yTicks", "y2Ticks", "y3Ticks"].map(k => c.dataset[k] || ""),
		plot: [over.left, over.right],
		markers: [...c.querySelectorAll(".chart-marker:not([hidden])")].map(function (m) {
			var r = m.getBoundingClientRect();
			return {text: m.textContent, count: +m.dataset.count, box: [r.left, r.top, r.right, r.bottom]};
		})
	};
})`

type chartMarker struct {
	Text  string    `json:"text"`
	Count int       `json:"count"`
	Box   []float64 `json:"box"`
}

type chartSeen struct {
	ID      string        `json:"id"`
	Legend  []string      `json:"legend"`
	Ticks   []string      `json:"ticks"`
	Plot    []float64     `json:"plot"`
	Markers []chartMarker `json:"markers"`
}

// tickLabel is a value-axis label as the pages write figures.
var tickLabel = regexp.MustCompile(`^(\d+(?:\.\d+)?) (ms|s|%)$|^(\d+)$`)

// checkCharts asserts what every chart must hold before any hover, and
// returns how many event markers the page shows.
func checkCharts(t *testing.T, where string, charts []chartSeen) int {
	t.Helper()
	markers := 0
	for _, c := range charts {
		// The legend shows the latest value before a hover, never "—".
		if len(c.Legend) < 2 {
			t.Errorf("%s %s: legend has %d entries", where, c.ID, len(c.Legend))
		}
		for _, v := range c.Legend {
			if v == "" || v == "—" || v == "--" {
				t.Errorf("%s %s: a legend value reads %q before any hover (legend %q)", where, c.ID, v, c.Legend)
			}
		}
		if !strings.HasPrefix(c.Legend[0], "latest, ") {
			t.Errorf("%s %s: the legend's time reads %q before a hover, want \"latest, <time>\"", where, c.ID, c.Legend[0])
		}
		// Ticks step by 1, 2 or 5 × 10^n in the unit shown.
		for axis, joined := range c.Ticks {
			if joined == "" {
				continue
			}
			var vals []float64
			for _, l := range strings.Split(joined, "|") {
				m := tickLabel.FindStringSubmatch(l)
				if m == nil {
					t.Errorf("%s %s: axis %d tick %q is not a plain figure (%q)", where, c.ID, axis+1, l, joined)
					continue
				}
				num := m[1]
				if num == "" {
					num = m[3]
				}
				v, _ := strconv.ParseFloat(num, 64)
				if m[2] == "s" {
					v *= 1000
				}
				vals = append(vals, v)
			}
			for i := 1; i < len(vals); i++ {
				if !roundStep(vals[i] - vals[i-1]) {
					t.Errorf("%s %s: axis %d ticks %q step by %g, not 1, 2 or 5 × 10^n", where, c.ID, axis+1, joined, vals[i]-vals[i-1])
					break
				}
			}
		}
		// Event labels: inside the plot area (so never over the y-axis)
		// and never over each other.
		for i, m := range c.Markers {
			markers++
			if m.Box[0] < c.Plot[0]-0.5 || m.Box[2] > c.Plot[1]+0.5 {
				t.Errorf("%s %s: event label %q spans x %.0f–%.0f, outside the plot %.0f–%.0f", where, c.ID, m.Text, m.Box[0], m.Box[2], c.Plot[0], c.Plot[1])
			}
			for _, o := range c.Markers[:i] {
				if m.Box[0] < o.Box[2] && o.Box[0] < m.Box[2] && m.Box[1] < o.Box[3] && o.Box[1] < m.Box[3] {
					t.Errorf("%s %s: event labels %q %v and %q %v overlap", where, c.ID, o.Text, o.Box, m.Text, m.Box)
				}
			}
			if m.Count > 1 && m.Text != strconv.Itoa(m.Count)+" events" && m.Text != strconv.Itoa(m.Count) {
				t.Errorf("%s %s: a marker of %d events reads %q", where, c.ID, m.Count, m.Text)
			}
		}
	}
	return markers
}

// roundStep reports whether d is 1, 2 or 5 × 10^n.
func roundStep(d float64) bool {
	if d <= 0 {
		return false
	}
	mant := d / math.Pow(10, math.Floor(math.Log10(d)+1e-9))
	for _, m := range []float64{1, 2, 5} {
		if math.Abs(mant-m) < 1e-6 {
			return true
		}
	}
	return false
}

// The diagnosis's charts tell the story before a hover, at a desktop's
// width and a phone's, over the cold start (scale-ups and new instances
// close together) and the KV saturation.
func (s *suite) testChartStory(t *testing.T) {
	tb := s.loggedInTab(t)
	defer tb.do(chromedp.EmulateViewport(viewportWidth, viewportHeight))
	for _, size := range [][2]int64{{viewportWidth, viewportHeight}, {390, 844}} {
		tb.do(chromedp.EmulateViewport(size[0], size[1]))
		for name, phase := range map[string]string{"cold start": diagnosePath("rag-chat", s.data.cold), "KV saturation": diagnosePath("rag-chat", s.data.kv)} {
			tb.open(phase)
			tb.do(chromedp.WaitVisible(chromedp.CSS(".verdict .sentence")))
			if s.waitCharts(tb) == 0 {
				t.Fatalf("%s: the diagnosis has no chart", name)
			}
			where := name + " at " + strconv.FormatInt(size[0], 10) + " px"
			n := checkCharts(t, where, eval[[]chartSeen](tb, chartChecksJS))
			if name == "cold start" && n == 0 {
				t.Errorf("%s: no scaling-event marker on the charts", where)
			}
			tb.checkClean()
		}
	}
	s.waitCharts(tb)
}

// On a phone the overview's first screen holds every service's verdict;
// the totals come after them.
func (s *suite) testPhoneOverview(t *testing.T) {
	tb := s.loggedInTab(t)
	tb.do(chromedp.EmulateViewport(390, 844))
	defer tb.do(chromedp.EmulateViewport(viewportWidth, viewportHeight))
	tb.open("/?last=1h")
	tb.do(chromedp.WaitVisible(chromedp.CSS("table.services")))
	rows := tb.count("table.services tbody tr")
	tb.do(chromedp.Poll[chromedp.Void](`document.querySelectorAll("table.services tbody tr .badge").length === document.querySelectorAll("table.services tbody tr").length`,
		chromedp.WithPollingTimeout(90*time.Second), chromedp.WithPollingInterval(500*time.Millisecond)))
	boxes := eval[[][]float64](tb, `[...document.querySelectorAll("table.services tbody tr .badge")].map(b => { const r = b.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })`)
	if len(boxes) != rows || rows == 0 {
		t.Fatalf("%d verdict badges for %d services", len(boxes), rows)
	}
	for i, b := range boxes {
		if b[1] < 0 || b[3] > 844 || b[0] < 0 || b[2] > 390 {
			t.Errorf("at 390×844 service %d's verdict is at %v, off the first screen", i+1, b)
		}
	}
	if kpi, badge := eval[float64](tb, `document.querySelector(".kpis").getBoundingClientRect().top`), boxes[0][1]; kpi < badge {
		t.Errorf("at 390 px the totals (top %.0f) come before the verdicts (top %.0f)", kpi, badge)
	}
	s.screenshot(tb, "overview-phone")
	tb.checkClean()
}
