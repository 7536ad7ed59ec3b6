package web

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/share"
	"github.com/tokenpath/tokenpath/web/views"
)

// comparePage is GET /compare: one service over two windows (A before, B
// after), every figure at p50/p95/p99 with deltas and a word for better or
// worse.
func (s *Server) comparePage(c echo.Context) error {
	ctx := c.Request().Context()
	project := projectOf(c)
	now := time.Now().UTC()
	params, perr := share.ParseCompare(c.QueryParams(), now)
	services, err := s.deps.Queries.Services(ctx, project, now.Add(-servicesLookback))
	if err != nil {
		return s.internal(err)
	}
	code := http.StatusOK
	var v views.CompareView
	if perr != nil {
		msg, ok := shareInputError(perr)
		if !ok {
			return s.internal(perr)
		}
		code = http.StatusBadRequest
		v = views.CompareView{Live: true, Heading: subjectHeading(params.Service, params.Model), Error: msg}
	} else {
		data, err := s.shares().Compare(ctx, project, params)
		if err != nil {
			return s.internal(err)
		}
		v = compareView(data, true)
		v.Share = shareBox(c, params.Path(), "Freeze this comparison into a link anyone can open, without logging in")
	}
	v.Controls = compareControls(params, services)
	c.Response().Header().Add("Vary", "HX-Request")
	p := s.page(c, "Compare · "+subjectHeading(params.Service, params.Model), "compare")
	if isHTMXPart(c) {
		return render(c, code, views.CompareBody(v))
	}
	return render(c, code, views.ComparePage(p, v))
}

func compareControls(p share.CompareParams, services []analysis.ServiceInfo) *views.Pickers {
	c := &views.Pickers{Action: "/compare"}
	c.Services, c.Models = pickerOptions(services, p.Service, p.Model)
	if p.Preset != "" {
		c.Hidden = append(c.Hidden, views.HiddenField{Name: "preset", Value: p.Preset})
	} else if !p.A.From.IsZero() {
		for _, h := range []struct {
			name string
			t    time.Time
		}{{"a_from", p.A.From}, {"a_to", p.A.To}, {"b_from", p.B.From}, {"b_to", p.B.To}} {
			c.Hidden = append(c.Hidden, views.HiddenField{Name: h.name, Value: share.FormatTime(h.t)})
		}
	}
	for _, pr := range share.ComparePresets {
		q := url.Values{}
		if p.Service != "" {
			q.Set("service", p.Service)
		}
		if p.Model != "" {
			q.Set("model", p.Model)
		}
		q.Set("preset", pr.Name)
		c.Presets = append(c.Presets, views.RangeOption{Label: pr.Label, Href: "/compare?" + q.Encode(), Current: p.Preset == pr.Name})
	}
	c.CustomOpen = p.Preset == ""
	c.Fields = []views.WindowField{
		{Name: "a_from", Label: "From", Value: datetimeLocal(p.A.From), Group: "before"},
		{Name: "a_to", Label: "To", Value: datetimeLocal(p.A.To), Group: "before"},
		{Name: "b_from", Label: "From", Value: datetimeLocal(p.B.From), Group: "after"},
		{Name: "b_to", Label: "To", Value: datetimeLocal(p.B.To), Group: "after"},
	}
	c.CustomNote = "Times are UTC. Before is usually the window before a change (a deploy, a config flag), after the window since."
	return c
}

// compareMetric says how to show one comparison figure.
type compareMetric struct {
	label, hint, group string
}

var compareMetrics = map[string]compareMetric{
	diagnose.ComponentPreInference:  {"Pre-inference", "app work before the call", "latency"},
	diagnose.ComponentColdStartWait: {"Cold-start wait", "over every request, 0 when not held", "latency"},
	diagnose.MetricColdStarts:       {"Cold starts", "share of requests held while a new instance started", "latency"},
	diagnose.ComponentQueue:         {"Queue", "waiting for a slot on the server", "latency"},
	diagnose.ComponentPrefill:       {"Prefill", "reading the prompt", "latency"},
	diagnose.ComponentNetwork:       {"Network", "server to client", "latency"},
	diagnose.ComponentDecode:        {"Decode", "writing the answer", "latency"},
	diagnose.ComponentTTFT:          {"TTFT", "time to first token", "latency"},
	diagnose.ComponentE2E:           {"End to end", "the whole model call", "latency"},
	diagnose.ComponentITL:           {"ITL", "time per output token", "latency"},
	"tpot":                          {"Decode speed (TPOT)", "tokens per second, slow tail", "size"},
	"input_tokens":                  {"Input tokens", "per request", "size"},
	"output_tokens":                 {"Output tokens", "per request", "size"},
	"calls_per_task":                {"LLM calls per task", "a task is a whole trace", "task"},
	"cost_per_task":                 {"Cost per task", "at the configured prices", "task"},
	diagnose.MetricKVCacheUsage:     {"KV-cache usage", "samples of the gauge", "server"},
	diagnose.MetricRequestsWaiting:  {"Requests waiting", "samples of the gauge", "server"},
	diagnose.MetricRequestsRunning:  {"Requests running", "samples of the gauge", "server"},
}

var compareGroups = []struct{ key, id, title, note string }{
	{"latency", "cmp-latency", "Latency, by part of the request", "Each part is read on its own, so the parts do not add up to TTFT at p95."},
	{"size", "cmp-size", "Decode speed and request size", ""},
	{"task", "cmp-task", "Tasks and cost", ""},
	{"server", "cmp-server", "Inference server pressure", "Read from the servers' metrics: every sample in the window counts."},
}

func compareView(data *share.CompareData, live bool) views.CompareView {
	c, p := data.Comparison, data.Params
	v := views.CompareView{Live: live, Heading: subjectHeading(p.Service, p.Model),
		BeforeText: views.HumanRange(p.A.From, p.A.To) + " (" + views.HumanDuration(p.A.Duration()) + ")",
		AfterText:  views.HumanRange(p.B.From, p.B.To) + " (" + views.HumanDuration(p.B.Duration()) + ")",
		Empty:      c.BeforeRequests == 0 && c.AfterRequests == 0,
		Summary:    share.CompareSentence(c),
	}
	for _, pr := range share.ComparePresets {
		if pr.Name == p.Preset && live {
			v.Heading += " · " + pr.Label
		}
	}
	v.BeforeCount = "before: " + countNoun(c.BeforeRequests, "request")
	v.AfterCount = "after: " + countNoun(c.AfterRequests, "request")
	if c.RequestsEstimated {
		v.BeforeCount, v.AfterCount = "before: about "+countNoun(c.BeforeRequests, "request"), "after: about "+countNoun(c.AfterRequests, "request")
	}
	// A side whose data starts inside its window says where.
	if c.BeforeDataFrom != nil {
		v.BeforeCount += " from " + views.HumanClockSeconds(*c.BeforeDataFrom)
	}
	if c.AfterDataFrom != nil {
		v.AfterCount += " from " + views.HumanClockSeconds(*c.AfterDataFrom)
	}
	v.ErrorRates = "errors " + views.HumanPct(c.BeforeErrorRate) + " → " + views.HumanPct(c.AfterErrorRate)
	dq := url.Values{}
	if p.Service != "" {
		dq.Set("service", p.Service)
	}
	if p.Model != "" {
		dq.Set("model", p.Model)
	}
	dq.Set("from", share.FormatTime(p.B.From))
	dq.Set("to", share.FormatTime(p.B.To))
	dq.Set("baseline_from", share.FormatTime(p.A.From))
	dq.Set("baseline_to", share.FormatTime(p.A.To))
	v.DiagnoseHref = "/diagnose?" + dq.Encode()

	rows := map[string][]views.CompareRow{}
	for _, ch := range c.Changes {
		m, ok := compareMetrics[ch.Name]
		if !ok {
			m = compareMetric{label: diagnose.MetricLabel(ch.Name), group: "server"}
		}
		r := views.CompareRow{Name: m.label, Hint: m.hint, Direction: ch.Direction, DirectionWords: directionWords(ch.Direction),
			Before: [3]string{unitValue(ch.Before.P50, ch.Unit), unitValue(ch.Before.P95, ch.Unit), unitValue(ch.Before.P99, ch.Unit)},
			After:  [3]string{unitValue(ch.After.P50, ch.Unit), unitValue(ch.After.P95, ch.Unit), unitValue(ch.After.P99, ch.Unit)},
			Delta:  unitDelta(ch.Delta.P95, ch.Unit), Ratio: views.NoValue}
		if ch.Ratio.P95 != nil {
			r.Ratio = views.HumanRatio(*ch.Ratio.P95)
		}
		rows[m.group] = append(rows[m.group], r)
		line := views.CompareLine{Name: m.label, Text: fmt.Sprintf("p95 %s → %s (%s, %s)", r.Before[1], r.After[1], r.Delta, r.Ratio)}
		switch ch.Direction {
		case "worse":
			v.Worse = append(v.Worse, line)
		case "better":
			v.Better = append(v.Better, line)
		}
	}
	for _, g := range compareGroups {
		if len(rows[g.key]) > 0 {
			v.Groups = append(v.Groups, views.CompareGroup{ID: g.id, Title: g.title, Note: g.note, Rows: rows[g.key]})
		}
	}
	return v
}

// unitValue formats a comparison figure in its unit.
func unitValue(p *float64, unit string) string {
	if p == nil {
		return views.NoValue
	}
	x := *p
	switch unit {
	case "ms":
		return views.HumanMs(x)
	case "tokens":
		return views.HumanTokens(x)
	case "tok/s":
		return views.HumanCount(math.Round(x*10)/10) + " tok/s"
	case "usd":
		return views.HumanUSD(x)
	case "ratio":
		return views.HumanPct(x)
	}
	return views.HumanCount(math.Round(x*10) / 10)
}

// unitDelta formats a signed change in the figure's unit.
func unitDelta(p *float64, unit string) string {
	if p == nil {
		return views.NoValue
	}
	x := *p
	if unit == "ms" {
		return views.HumanDeltaMs(x)
	}
	if unit == "ratio" {
		// A change of a share is in percentage points, not percent.
		pts := views.HumanCount(math.Round(math.Abs(x)*1000) / 10)
		switch {
		case x > 0:
			return "+" + pts + " pts"
		case x < 0:
			return "−" + pts + " pts"
		}
		return "±0 pts"
	}
	abs := math.Abs(x)
	s := unitValue(&abs, unit)
	switch {
	case x > 0:
		return "+" + s
	case x < 0:
		return "−" + s
	}
	return "±" + s
}
