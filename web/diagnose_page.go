package web

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/share"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// servicesLookback is how far back the service and model pickers look.
const servicesLookback = 7 * 24 * time.Hour

// diagnosePage is GET /diagnose: the verdict, its evidence, the component
// charts and tables, and the slowest requests of one window. Every bit of
// state is in the URL.
func (s *Server) diagnosePage(c echo.Context) error {
	ctx := c.Request().Context()
	project := projectOf(c)
	now := time.Now().UTC()
	params, perr := share.ParseDiagnose(c.QueryParams(), now)
	services, err := s.deps.Queries.Services(ctx, project, now.Add(-servicesLookback))
	if err != nil {
		return s.internal(err)
	}
	code := http.StatusOK
	var v views.DiagnoseView
	if perr != nil {
		msg, ok := shareInputError(perr)
		if !ok {
			return s.internal(perr)
		}
		code = http.StatusBadRequest
		v = views.DiagnoseView{Live: true, Heading: subjectHeading(params.Service, params.Model), Error: msg}
	} else {
		data := &share.DiagnoseData{Params: params}
		if c.QueryParam("wait") != "" {
			if data, err = s.shares().Diagnose(ctx, project, params); err != nil {
				return s.internal(err)
			}
		}
		v = diagnoseView(data, true)
		if c.QueryParam("wait") == "" {
			// The frame answers at once; the diagnosis (up to two request
			// samples of 20k and 10k rows, half a second on a big window)
			// follows through htmx for exactly the window the frame names.
			v.ResultsHref = "/diagnose/results?" + params.Query(false).Encode()
			v.WaitHref = params.Path() + "&wait=1"
		}
		v.ModelNote = modelNote(services, params.Service, params.Model)
		v.Episodes = s.episodes(ctx, project, params.Service, episodeContext(params.Window), now)
		v.Share = shareBox(c, params.Path(), "Freeze this diagnosis into a link anyone can open, without logging in")
	}
	v.Controls = diagnoseControls(params, services)
	return s.renderPageOrPart(c, code, s.page(c, "Diagnosis · "+subjectHeading(params.Service, params.Model), "diagnose"),
		views.DiagnosePage, views.DiagnoseBody, v)
}

// diagnoseResults answers the diagnose page's htmx request for the
// diagnosis of the window its frame names. A failure shows in place of the
// diagnosis (htmx swaps only successful answers), the frame stays usable.
func (s *Server) diagnoseResults(c echo.Context) error {
	ctx := c.Request().Context()
	params, err := share.ParseDiagnose(c.QueryParams(), time.Now().UTC())
	var v views.DiagnoseView
	if err != nil {
		msg, ok := shareInputError(err)
		if !ok {
			return s.internal(err)
		}
		v.Error = msg
	} else if data, err := s.shares().Diagnose(ctx, projectOf(c), params); err != nil {
		if ctx.Err() != nil {
			return nil // the browser went away
		}
		s.deps.Log.Error("diagnose page", "err", err, "request_id", requestID(c))
		v.Error = "The diagnosis could not run (request id " + requestID(c) + " in the server log). Reload the page to try again."
	} else {
		v = diagnoseView(data, true)
	}
	return render(c, http.StatusOK, views.DiagnoseResultsPart(v))
}

// renderPageOrPart renders the whole page, or only its body for an htmx
// request (which swaps #page-body); a history restore needs the page.
func (s *Server) renderPageOrPart(c echo.Context, code int, p views.Page, page func(views.Page, views.DiagnoseView) templ.Component,
	body func(views.DiagnoseView) templ.Component, v views.DiagnoseView) error {
	c.Response().Header().Add("Vary", "HX-Request")
	if isHTMXPart(c) {
		return render(c, code, body(v))
	}
	return render(c, code, page(p, v))
}

func isHTMXPart(c echo.Context) bool {
	h := c.Request().Header
	return h.Get("HX-Request") == "true" && h.Get("HX-History-Restore-Request") != "true"
}

// inputError returns the user-facing message of a request the user must
// fix.
func shareInputError(err error) (string, bool) {
	var ie *share.InputError
	if errors.As(err, &ie) {
		return ie.Msg, true
	}
	return "", false
}

func subjectHeading(service, model string) string {
	h := service
	if h == "" {
		h = "all services"
	}
	if model != "" {
		h += " · " + model
	}
	return h
}

// modelNote warns when the model has no recent traffic on the service: an
// empty diagnosis then has an obvious reason.
func modelNote(services []analysis.ServiceInfo, service, model string) string {
	if service == "" || model == "" {
		return ""
	}
	for _, si := range services {
		if si.Service == service {
			for _, m := range si.Models {
				if m == model {
					return ""
				}
			}
			return fmt.Sprintf("%s has served no requests for model %s in the last 7 days.", service, model)
		}
	}
	return ""
}

// shareBox is the "Share snapshot" form of the live page at path (a
// diagnosis, a comparison or a trace); summary is its button's tooltip.
func shareBox(c echo.Context, path, summary string) *views.ShareBox {
	tok, _ := c.Get(ctxCSRF).(string)
	return &views.ShareBox{CSRF: tok, Path: path, Expiry: expiryOptions(), Summary: summary}
}

func expiryOptions() []views.PickOption {
	out := make([]views.PickOption, len(share.ExpiryChoices))
	for i, e := range share.ExpiryChoices {
		out[i] = views.PickOption{Value: e.Value, Label: e.Label, Selected: e.Value == "30d"}
	}
	return out
}

// pickerOptions lists services and the models of the chosen service (all
// models without one), keeping a chosen value that has no recent traffic.
func pickerOptions(services []analysis.ServiceInfo, service, model string) (svc, models []views.PickOption) {
	svc = []views.PickOption{{Value: "", Label: "All services", Selected: service == ""}}
	modelSet := map[string]bool{}
	found := false
	for _, si := range services {
		label := si.Service
		switch si.Role {
		case "server":
			label += " (inference server)"
		case "both":
			label += " (client and server)"
		}
		svc = append(svc, views.PickOption{Value: si.Service, Label: label, Selected: si.Service == service})
		found = found || si.Service == service
		if service == "" || si.Service == service {
			for _, m := range si.Models {
				modelSet[m] = true
			}
		}
	}
	if service != "" && !found {
		svc = append(svc, views.PickOption{Value: service, Label: service + " (no recent traffic)", Selected: true})
	}
	if model != "" {
		modelSet[model] = true
	}
	names := make([]string, 0, len(modelSet))
	for m := range modelSet {
		names = append(names, m)
	}
	sort.Strings(names)
	models = []views.PickOption{{Value: "", Label: "All models", Selected: model == ""}}
	for _, m := range names {
		models = append(models, views.PickOption{Value: m, Label: m, Selected: m == model})
	}
	return svc, models
}

// localValue writes a time for a datetime-local input (UTC, seconds).
func datetimeLocal(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05")
}

func diagnoseControls(p share.DiagnoseParams, services []analysis.ServiceInfo) *views.Pickers {
	c := &views.Pickers{Action: "/diagnose"}
	c.Services, c.Models = pickerOptions(services, p.Service, p.Model)
	if p.Last != "" {
		c.Hidden = append(c.Hidden, views.HiddenField{Name: "last", Value: p.Last})
	} else if !p.Window.From.IsZero() {
		c.Hidden = append(c.Hidden, views.HiddenField{Name: "from", Value: share.FormatTime(p.Window.From)},
			views.HiddenField{Name: "to", Value: share.FormatTime(p.Window.To)})
	}
	if !p.Baseline.IsZero() {
		c.Hidden = append(c.Hidden, views.HiddenField{Name: "baseline_from", Value: share.FormatTime(p.Baseline.From)},
			views.HiddenField{Name: "baseline_to", Value: share.FormatTime(p.Baseline.To)})
	}
	c.Range.Label = "Last"
	for _, l := range share.LastOptions {
		q := url.Values{}
		if p.Service != "" {
			q.Set("service", p.Service)
		}
		if p.Model != "" {
			q.Set("model", p.Model)
		}
		q.Set("last", l)
		c.Range.Options = append(c.Range.Options, views.RangeOption{Label: l, Href: "/diagnose?" + q.Encode(), Current: p.Last == l})
	}
	c.CustomOpen = p.Last == "" || !p.Baseline.IsZero()
	c.Fields = []views.WindowField{
		{Name: "from", Label: "From", Value: datetimeLocal(p.Window.From), Group: "window"},
		{Name: "to", Label: "To", Value: datetimeLocal(p.Window.To), Group: "window"},
		{Name: "baseline_from", Label: "From", Value: datetimeLocal(p.Baseline.From), Group: "baseline, optional"},
		{Name: "baseline_to", Label: "To", Value: datetimeLocal(p.Baseline.To), Group: "baseline, optional"},
	}
	c.CustomNote = "Times are UTC. Leave the baseline empty to compare with the 3× window before."
	return c
}

// diagnoseView turns a diagnosis into the page's view model; live pages
// link to other pages, shared snapshots do not.
func diagnoseView(data *share.DiagnoseData, live bool) views.DiagnoseView {
	d, p := data.Diagnosis, data.Params
	v := views.DiagnoseView{
		Live:    live,
		Heading: subjectHeading(p.Service, p.Model),
		Verdict: string(d.Verdict), Summary: d.Summary,
		Confidence: d.Confidence, ConfidenceText: views.HumanPct(d.Confidence),
		HasBaseline: d.Answers.Compare != nil,
		Empty:       d.Requests == 0,
	}
	win := d.Window
	if win.IsZero() {
		win = p.Window
	}
	v.WindowText = "Window: " + views.HumanRange(win.From, win.To) + " (" + views.HumanDuration(win.Duration()) + ")"
	if p.Last != "" && live {
		v.WindowText = "Window: the last " + views.HumanDuration(win.Duration()) + ", " + views.HumanRange(win.From, win.To)
	}
	base := d.Baseline
	if base.IsZero() {
		base = p.EffectiveBaseline()
	}
	how := "the " + views.HumanDuration(base.Duration()) + " before"
	switch g := data.Guard; {
	case !p.Baseline.IsZero():
		how = "chosen"
	case g.NoClean:
		how = "none: the time before the window is an episode, so the window is judged on its own"
	case g.Moved:
		how = "the clean stretch before, earlier episodes left out"
	}
	if from := d.BaselineDataFrom; from != nil {
		// Say why the baseline holds few requests: data starts inside it.
		// To the second, as compare and the CLI say it.
		how += "; its requests start at " + views.HumanClockSeconds(*from)
		if from.Format("2006-01-02") != base.From.UTC().Format("2006-01-02") {
			how += " on " + from.Format("2 Jan")
		}
	}
	v.BaselineText = "Baseline: " + views.HumanRange(base.From, base.To) + " (" + how + ")"

	v.CountsText = fmt.Sprintf("%s in the window, %s in the baseline", countNoun(d.Requests, "request"), countNoun(d.BaselineRequests, "request"))
	if d.RequestsEstimated {
		v.CountsText = "About " + v.CountsText
	}
	if !v.HasBaseline && d.Requests > 0 {
		v.CountsText += " — too few to compare with, so the window is judged on its own"
	}
	v.CountsText += "."
	if d.AnalyzedRequests > 0 && d.AnalyzedRequests < d.Requests {
		v.CountsText += fmt.Sprintf(" Percentiles and evidence come from a uniform sample of %s of them; counts and rates are scaled to the whole window.",
			views.HumanInt(d.AnalyzedRequests))
		if d.RequestsEstimated {
			v.CountsText += " The counts themselves are the stored sample's size scaled up (within about a percent)."
		}
	}
	for _, e := range d.Evidence {
		v.Evidence = append(v.Evidence, views.Finding{N: e.N, Text: e.Text})
	}
	v.Coverage = coverageRows(data.Coverage)
	q := url.Values{}
	if p.Service != "" {
		q.Set("service", p.Service)
	}
	if p.Model != "" {
		q.Set("model", p.Model)
	}
	slow := url.Values{}
	for k, vs := range q {
		slow[k] = vs
	}
	slow.Set("from", share.FormatTime(win.From))
	slow.Set("to", share.FormatTime(win.To))
	slow.Set("slow", "true")
	slow.Set("sort", "ttft")
	v.SlowHref = "/requests?" + slow.Encode()
	cmp := share.CompareParams{Service: p.Service, Model: p.Model, A: base, B: win}
	v.CompareHref = cmp.Path()

	v.Answers = answersView(d, v.CompareHref, data.Guard.ObjectiveMs > 0)
	v.Charts = diagnoseCharts(d)
	v.Events = eventLines(d.Series)
	v.Components = componentRows(d)
	v.BubbleUp = bubbleRows(d.BubbleUp)
	if live {
		for i, b := range d.BubbleUp {
			v.BubbleUp[i].Href = bubbleHref(slow, b)
		}
	}
	v.BubbleNote = "Nothing stands out: no instance, model, route, tenant or prompt size is over-represented among the slow requests."
	for _, r := range data.Slowest {
		v.Slowest = append(v.Slowest, slowRow(r))
	}
	return v
}

// countNoun counts n of a noun: "1 request", "5 526 requests".
func countNoun(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return views.HumanInt(n) + " " + noun + "s"
}

func answersView(d diagnose.Diagnosis, compareHref string, defaultObjective bool) []views.DiagAnswer {
	a := d.Answers
	var out []views.DiagAnswer
	cause := views.DiagAnswer{Question: "Why is it slow?", Status: views.VerdictLabel(string(a.Cause)), Tone: "bad"}
	switch {
	case d.Requests == 0:
		cause.Answer = "No requests to diagnose."
		cause.Status, cause.Tone = "", ""
	case a.Cause == diagnose.VerdictHealthy:
		cause.Tone = "good"
		cause.Answer = "Nothing moved beyond noise; see the evidence for the figures."
	default:
		cause.Answer = fmt.Sprintf("%s, with %s confidence; the evidence lists what supports it.", causeWords(a.Cause), views.HumanPct(d.Confidence))
	}
	out = append(out, cause)

	w := views.DiagAnswer{Question: "Is the workload prefill- or decode-heavy?", Answer: "No token counts or timings to tell."}
	if a.Workload != nil {
		w.Status, w.Tone, w.Answer = a.Workload.Kind+" by "+a.Workload.Basis, "neutral", a.Workload.Text
	}
	out = append(out, w)

	b := views.DiagAnswer{Question: "Is TTFT prefill-bound, or queueing or cold start?", Answer: "No slow requests with a time to first token to split."}
	if a.Bound != nil {
		b.Status, b.Tone, b.Answer = boundWords(a.Bound.Kind), "neutral", a.Bound.Text
	}
	out = append(out, b)

	slo := views.DiagAnswer{Question: "Does it meet the SLO?", Answer: "No SLO is set for this service and model.", Href: "/slos", HrefText: "Set one"}
	if a.SLO != nil {
		slo = views.DiagAnswer{Question: fmt.Sprintf("Does it meet the SLO at p%s?", percentileName(a.SLO.Percentile)), Answer: a.SLO.Text,
			Status: "met", Tone: "good"}
		if defaultObjective {
			// No TTFT SLO: the default objective stands in (analysis.GuardDiagnosis).
			slo.Question = "Does it meet the SLO? (none set: the default objective)"
			slo.Href, slo.HrefText = "/slos", "Set one"
		}
		if !a.SLO.Met {
			slo.Status, slo.Tone = "missed", "bad"
		}
	}
	out = append(out, slo)

	dec := views.DiagAnswer{Question: "Is decode memory- or compute-bound?", Answer: "No inter-token latency recorded (non-streaming calls, or no output tokens)."}
	if a.Decode != nil {
		dec.Status, dec.Tone, dec.Answer = a.Decode.Kind, "neutral", a.Decode.Text
	}
	out = append(out, dec)

	cmp := views.DiagAnswer{Question: "What changed against the baseline?",
		Answer: "The baseline has too few requests to compare with; the window is judged on its own."}
	if a.Compare != nil {
		cmp.Answer, cmp.Href, cmp.HrefText = share.CompareSentence(*a.Compare), compareHref, "Compare the two windows"
		switch {
		case len(a.Compare.Worse) > 0:
			cmp.Status, cmp.Tone = fmt.Sprintf("%d worse", len(a.Compare.Worse)), "bad"
		case len(a.Compare.Better) > 0:
			cmp.Status, cmp.Tone = fmt.Sprintf("%d better", len(a.Compare.Better)), "good"
		default:
			cmp.Status, cmp.Tone = "no change", "neutral"
		}
	}
	out = append(out, cmp)

	cost := views.DiagAnswer{Question: "What does a task cost?", Answer: "No model prices are set, so cost per task is unknown.",
		Href: "/settings", HrefText: "Set prices"}
	if c := a.Cost; c != nil {
		cost.Answer = fmt.Sprintf("%s per task on average, p95 %s, over %s (a task is a whole trace, retries and agent loops included); %s LLM calls per task, up to %d.",
			views.HumanUSD(c.MeanUSD), views.HumanUSD(c.P95USD), countNoun(c.Tasks, "priced task"), views.HumanCount(math.Round(c.MeanCalls*10)/10), c.MaxCalls)
		if c.UnpricedTasks > 0 {
			cost.Answer += fmt.Sprintf(" %s left out: no price for %s.", countNoun(c.UnpricedTasks, "task"), strings.Join(c.UnpricedModels, ", "))
		}
		cost.Href = ""
	}
	out = append(out, cost)
	return out
}

// causeWords answers "Why is it slow?" with the verdict's own words.
func causeWords(v diagnose.Verdict) string {
	if w := v.CauseWords(); w != "" {
		return w
	}
	return "Unclear"
}

func boundWords(kind string) string {
	switch kind {
	case "cold_start":
		return "cold-start-bound"
	case "bundled":
		return "bundled"
	}
	return kind + "-bound"
}

// pctName names a 0..1 percentile: 0.95 → "95", 0.999 → "99.9".
func percentileName(q float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", q*100), ".0")
}

// chartPart is one part of a request on the component chart.
type chartPart struct {
	key, label, color, swatch, hint string
}

// chartParts are the parts of a request, bottom to top.
var chartParts = []chartPart{
	{diagnose.ComponentPreInference, "Pre-inference", "--c-pre", "sw-pre", "app work before the call"},
	{diagnose.ComponentColdStartWait, "Cold-start wait", "--c-cold", "sw-cold", "held for a new instance"},
	{diagnose.ComponentQueue, "Queue", "--c-queue", "sw-queue", "waiting for a slot on the server"},
	{diagnose.ComponentPrefill, "Prefill", "--c-prefill", "sw-prefill", "reading the prompt"},
	{diagnose.ComponentNetwork, "Network", "--c-network", "sw-network", "server to client, gateways"},
	{diagnose.ComponentDecode, "Decode", "--c-decode", "sw-decode", "writing the answer"},
}

func diagnoseCharts(d diagnose.Diagnosis) []views.DiagChart {
	if len(d.Series) == 0 {
		return nil
	}
	width := time.Duration(d.BucketSeconds * float64(time.Second))
	per := views.HumanDuration(width)
	xs := make([]*float64, len(d.Series))
	for i, b := range d.Series {
		xs[i] = telemetry.Ptr(float64(b.Start.Unix()))
	}
	markers := chartMarkers(d.Series)

	// One line per part at p95, with TTFT p95 drawn thick over them. Lines,
	// not a stack: p95s of parts do not add up, and a stack of them is
	// dominated by its largest part (decode, often a minute) and flattens
	// the queue that grew from 20 ms to 2 s. A line that rises with TTFT
	// names the cause. Decode is after the first token, so it starts
	// hidden (one click in the legend) unless it is the verdict.
	parts := views.DiagChart{ID: "chart-parts", Title: "What grew: TTFT p95 and the p95 of each part",
		Caption: "p95 of each part per " + per + " bucket, one line each, with TTFT p95 drawn thick. A part whose line rises with TTFT explains it. " +
			"Decode (after the first token) is hidden until you click it in the legend. Dashed lines mark scaling events and new instances.",
		Spec: views.DiagChartSpec{YLabel: "p95", YUnit: "ms", Markers: markers, Data: [][]*float64{xs}}}
	parts.TableCaption = "Table: p95 of each part per " + per + " bucket"
	parts.Head = []string{"Bucket (UTC)", "Requests"}
	var used []chartPart
	for _, cp := range chartParts {
		col := make([]*float64, len(d.Series))
		seen := false
		for i, b := range d.Series {
			if v, ok := b.P95[cp.key]; ok {
				col[i], seen = telemetry.Ptr(v), true
			}
		}
		if !seen {
			continue
		}
		used = append(used, cp)
		hidden := cp.key == diagnose.ComponentDecode && d.Verdict != diagnose.VerdictDecode
		parts.Spec.Series = append(parts.Spec.Series, views.DiagSeries{Label: cp.label, Color: cp.color, Axis: 1, Hidden: hidden})
		parts.Spec.Data = append(parts.Spec.Data, col)
		parts.Head = append(parts.Head, cp.label+" p95")
	}
	ttftP95 := make([]*float64, len(d.Series))
	for i, b := range d.Series {
		ttftP95[i] = b.TTFT.P95
	}
	parts.Spec.Series = append(parts.Spec.Series, views.DiagSeries{Label: "TTFT p95", Color: "--ink", Axis: 1, Bold: true})
	parts.Spec.Data = append(parts.Spec.Data, ttftP95)
	parts.Head = append(parts.Head, "TTFT p95")
	for _, b := range d.Series {
		row := []string{bucketClock(b.Start, d.BucketSeconds), views.HumanInt(b.Requests)}
		for _, cp := range used {
			row = append(row, msOrDash(b.P95, cp.key))
		}
		row = append(row, views.HumanMsPtr(b.TTFT.P95))
		parts.Rows = append(parts.Rows, row)
	}

	// TTFT with the pressure gauges, each on its own right axis: a
	// percentage and a count share no scale.
	ttft := views.DiagChart{ID: "chart-ttft", Title: "TTFT p99 against KV cache and waiting requests",
		Caption: "Left axis: time to first token per " + per + " bucket. Right axes: the inference server's KV-cache usage (0–100 %) and requests waiting (a count), the highest sample in the bucket.",
		Spec: views.DiagChartSpec{YLabel: "TTFT", YUnit: "ms", Y2Label: "KV cache %", Y2Unit: "pct", Y3Label: "waiting", Y3Unit: "count", Markers: markers,
			Series: []views.DiagSeries{
				{Label: "TTFT p99", Color: "--accent", Axis: 1},
				{Label: "TTFT p50", Color: "--c-pre", Axis: 1, Dash: true},
			}}}
	p99 := make([]*float64, len(d.Series))
	p50 := make([]*float64, len(d.Series))
	kv := make([]*float64, len(d.Series))
	wait := make([]*float64, len(d.Series))
	hasKV, hasWait := false, false
	for i, b := range d.Series {
		p99[i], p50[i] = b.TTFT.P99, b.TTFT.P50
		if b.KVCacheUsage != nil {
			kv[i], hasKV = telemetry.Ptr(math.Round(*b.KVCacheUsage*1000)/10), true
		}
		if b.RequestsWaiting != nil {
			wait[i], hasWait = b.RequestsWaiting, true
		}
	}
	ttft.Spec.Data = [][]*float64{xs, p99, p50}
	if hasKV {
		ttft.Spec.Series = append(ttft.Spec.Series, views.DiagSeries{Label: "KV cache %", Color: "--c-queue", Axis: 2})
		ttft.Spec.Data = append(ttft.Spec.Data, kv)
	}
	if hasWait {
		ttft.Spec.Series = append(ttft.Spec.Series, views.DiagSeries{Label: "Requests waiting", Color: "--c-network", Axis: 3, Dash: true})
		ttft.Spec.Data = append(ttft.Spec.Data, wait)
	}
	if !hasKV {
		ttft.Spec.Y2Label, ttft.Spec.Y2Unit = "", ""
	}
	if !hasWait {
		ttft.Spec.Y3Label, ttft.Spec.Y3Unit = "", ""
	}
	if !hasKV && !hasWait {
		ttft.Caption += " No KV-cache or waiting-request metrics were recorded for this service (scrape the inference server's /metrics, or it is a managed API)."
	}
	ttft.TableCaption = "Table: TTFT, KV cache and waiting requests per " + per + " bucket"
	ttft.Head = []string{"Bucket (UTC)", "Requests", "TTFT p50", "TTFT p99", "KV cache", "Waiting", "Running", "Replicas", "Cold starts"}
	for _, b := range d.Series {
		row := []string{bucketClock(b.Start, d.BucketSeconds), views.HumanInt(b.Requests), views.HumanMsPtr(b.TTFT.P50), views.HumanMsPtr(b.TTFT.P99),
			gaugePct(b.KVCacheUsage), gaugeCount(b.RequestsWaiting), gaugeCount(b.RequestsRunning), replicasText(b.Replicas), views.HumanInt(b.ColdStarts)}
		ttft.Rows = append(ttft.Rows, row)
	}
	return []views.DiagChart{parts, ttft}
}

func msOrDash(m map[string]float64, key string) string {
	if v, ok := m[key]; ok {
		return views.HumanMs(v)
	}
	return views.NoValue
}

func gaugePct(p *float64) string {
	if p == nil {
		return views.NoValue
	}
	return views.HumanPct(*p)
}

func gaugeCount(p *float64) string {
	if p == nil {
		return views.NoValue
	}
	return views.HumanCount(*p)
}

func replicasText(p *int32) string {
	if p == nil {
		return views.NoValue
	}
	return views.HumanInt(int(*p))
}

// maxMarkers keeps the chart legible; the event list has them all.
const maxMarkers = 12

// chartMarkers marks scale events, started instances and the first cold
// starts of a run of buckets without an instance event.
func chartMarkers(series []diagnose.Bucket) []views.DiagMarker {
	var out []views.DiagMarker
	prevCold := false
	for _, b := range series {
		instanceEvent := false
		for _, e := range b.Events {
			label := markerLabel(e)
			if label == "" {
				continue
			}
			instanceEvent = instanceEvent || e.Kind == telemetry.EventInstanceStarted || e.Kind == telemetry.EventScale
			out = append(out, views.DiagMarker{T: float64(e.Time.Unix()), Label: label})
		}
		cold := b.ColdStarts > 0
		if cold && !prevCold && !instanceEvent {
			out = append(out, views.DiagMarker{T: float64(b.Start.Unix()), Label: "cold starts"})
		}
		prevCold = cold
	}
	if len(out) > maxMarkers {
		out = out[:maxMarkers]
	}
	return out
}

func markerLabel(e diagnose.EventMark) string {
	switch e.Kind {
	case telemetry.EventScale:
		if e.FromReplicas != nil && e.ToReplicas != nil {
			return fmt.Sprintf("scale %d→%d", *e.FromReplicas, *e.ToReplicas)
		}
		return "scale"
	case telemetry.EventInstanceStarted:
		if e.Instance != "" {
			return "new " + shortInstance(e.Instance)
		}
		return "new instance"
	}
	return ""
}

// shortInstance keeps a chart label short: a pod name's last part
// ("vllm-llama-kb2w5twskc-d7dnc" → "…d7dnc"); the event list has it whole.
func shortInstance(name string) string {
	if len(name) <= 14 {
		return name
	}
	if i := strings.LastIndexByte(name, '-'); i >= 0 && len(name)-i > 2 {
		return "…" + name[i+1:]
	}
	return "…" + name[len(name)-8:]
}

// bucketClock names a bucket by its start: to the second when buckets
// are shorter than a minute, so a table's rows read alike.
func bucketClock(t time.Time, widthSeconds float64) string {
	if widthSeconds < 60 {
		return views.HumanClockSeconds(t)
	}
	return views.HumanClock(t)
}

// maxEventLines bounds the event list under the charts.
const maxEventLines = 30

func eventLines(series []diagnose.Bucket) []string {
	var out []string
	for _, b := range series {
		for _, e := range b.Events {
			var line string
			switch e.Kind {
			case telemetry.EventScale:
				line = fmt.Sprintf("%s — scaled %s → %s replicas", views.HumanClockSeconds(e.Time), replicasText(e.FromReplicas), replicasText(e.ToReplicas))
			case telemetry.EventInstanceStarted:
				line = fmt.Sprintf("%s — instance %s started", views.HumanClockSeconds(e.Time), textOr(e.Instance, "(unnamed)"))
			default:
				line = fmt.Sprintf("%s — %s event", views.HumanClockSeconds(e.Time), e.Kind)
				if e.Instance != "" {
					line += " on " + e.Instance
				}
			}
			if e.Reason != "" {
				line += " (" + e.Reason + ")"
			}
			out = append(out, line)
		}
	}
	if n := len(out); n > maxEventLines {
		out = append(out[:maxEventLines-1], fmt.Sprintf("… and %d more", n-maxEventLines+1))
	}
	return out
}

func textOr(s, word string) string {
	if s == "" {
		return word
	}
	return s
}

// componentRows lists the parts (with their chart colour) and then the
// headline latencies, each now and against the baseline.
func componentRows(d diagnose.Diagnosis) []views.PartRow {
	dirs := map[string]string{}
	if d.Answers.Compare != nil {
		for _, ch := range d.Answers.Compare.Changes {
			dirs[ch.Name] = ch.Direction
		}
	}
	type row struct {
		key, name, hint, swatch string
		headline                bool
	}
	var rows []row
	for _, cp := range chartParts {
		rows = append(rows, row{cp.key, cp.label, cp.hint, cp.swatch, false})
	}
	rows = append(rows,
		row{diagnose.ComponentTTFT, "TTFT", "time to first token", "", true},
		row{diagnose.ComponentE2E, "End to end", "the whole model call", "", true},
		row{diagnose.ComponentITL, "ITL", "time per output token", "", true},
	)
	hasBase := d.Answers.Compare != nil
	var out []views.PartRow
	for _, r := range rows {
		st, ok := d.Components[r.key]
		if !ok || (st.Count == 0 && st.BaselineCount == 0) {
			continue
		}
		cr := views.PartRow{Name: r.name, Hint: r.hint, Swatch: r.swatch, Headline: r.headline,
			P50: views.HumanMsPtr(st.P50), P95: views.HumanMsPtr(st.P95), P99: views.HumanMsPtr(st.P99),
			BaselineP95: views.HumanMsPtr(st.BaselineP95), Delta: views.NoValue}
		if st.P95 != nil && st.BaselineP95 != nil {
			cr.Delta = views.HumanDeltaMs(*st.P95 - *st.BaselineP95)
			if *st.BaselineP95 > 0 {
				cr.Delta += " (" + views.HumanRatio(*st.P95 / *st.BaselineP95) + ")"
			}
		}
		if hasBase {
			cr.Direction = dirs[r.key]
			if cr.Direction == "" {
				cr.Direction = "unknown"
			}
			cr.DirectionWords = directionWords(cr.Direction)
			// The comparison judges the p95 of every request, which need
			// not move where the row's figures do: 2 % of requests held
			// 26 s leave the p95 of all at 0, and read "no change" beside
			// a 26 s p95. The cold-start wait's row shows the held
			// requests, so it is judged on theirs; a part only one side
			// has (a cold start's wait, a first self-hosted model) has no
			// p95 to set against and is new or gone.
			switch {
			case r.key == diagnose.ComponentColdStartWait && st.P95 != nil && st.BaselineP95 != nil:
				cr.Direction = diagnose.ComponentDirection(r.key, *st.BaselineP95, *st.P95)
				cr.DirectionWords = directionWords(cr.Direction)
			case st.Count > 0 && st.BaselineCount == 0:
				cr.Direction, cr.DirectionWords = "worse", "new in this window"
			case st.Count == 0 && st.BaselineCount > 0:
				cr.Direction, cr.DirectionWords = "better", "gone in this window"
			}
		}
		out = append(out, cr)
	}
	return out
}

func directionWords(dir string) string {
	switch dir {
	case "worse":
		return "worse"
	case "better":
		return "better"
	case "same":
		return "no change"
	case "changed":
		return "changed"
	}
	return "no data"
}

// bubbleParams are the requests list's parameters for bubble-up keys.
var bubbleParams = map[string]string{diagnose.KeyInstance: "instance", diagnose.KeyModel: "model", diagnose.KeyTenant: "tenant",
	diagnose.KeyRoute: "route", diagnose.KeyPromptLength: "prompt_length", diagnose.KeyColdStart: "cold_start"}

// bubbleHref lists the window's slow requests holding an attribution's
// value (slow: the query of them all), "" for a value the requests list
// cannot filter by (a raw span attribute, not a cold start).
func bubbleHref(slow url.Values, b diagnose.Attribution) string {
	param := bubbleParams[b.Key]
	if param == "" || (b.Key == diagnose.KeyColdStart && b.Value != "true") {
		return ""
	}
	q := maps.Clone(slow)
	q.Set(param, b.Value)
	return "/requests?" + q.Encode()
}

func bubbleRows(bs []diagnose.Attribution) []views.BubbleRow {
	var out []views.BubbleRow
	for _, b := range bs {
		r := views.BubbleRow{Attribute: attributeLabel(b.Key), Value: attributeValue(b.Key, b.Value),
			Slow: views.HumanPct(b.SlowShare), Fast: views.HumanPct(b.FastShare), Base: views.NoValue, SlowCount: b.SlowCount}
		if b.BaselineShare != nil {
			r.Base = views.HumanPct(*b.BaselineShare)
		}
		r.Sentence = fmt.Sprintf("%s of slow requests %s, against %s of the rest", views.HumanPct(b.SlowShare), attributePhrase(b.Key, b.Value), views.HumanPct(b.FastShare))
		out = append(out, r)
	}
	return out
}

func attributeLabel(key string) string {
	switch key {
	case diagnose.KeyInstance:
		return "Instance"
	case diagnose.KeyModel:
		return "Model"
	case diagnose.KeyTenant:
		return "Tenant"
	case diagnose.KeyRoute:
		return "Route"
	case diagnose.KeyPromptLength:
		return "Prompt length"
	case diagnose.KeyColdStart:
		return "Cold start"
	}
	return key
}

func attributeValue(key, value string) string {
	switch key {
	case diagnose.KeyPromptLength:
		return value + " tokens"
	case diagnose.KeyColdStart:
		if value == "true" {
			return "yes"
		}
		return "no"
	}
	return value
}

func attributePhrase(key, value string) string {
	switch key {
	case diagnose.KeyInstance:
		return "hit instance " + value
	case diagnose.KeyModel:
		return "used model " + value
	case diagnose.KeyTenant:
		return "came from tenant " + value
	case diagnose.KeyRoute:
		return "came through route " + value
	case diagnose.KeyPromptLength:
		return "had " + value + " token prompts"
	case diagnose.KeyColdStart:
		if value == "true" {
			return "were cold starts"
		}
		return "were not cold starts"
	}
	return fmt.Sprintf("had %s = %s", key, value)
}

func slowRow(r telemetry.LLMRequest) views.SlowRequestRow {
	row := views.SlowRequestRow{Start: r.Start.UTC().Format("15:04:05.000"), TraceID: r.TraceID, TraceHref: share.TracePath(r.TraceID),
		Service: r.Service, Instance: textOr(r.Instance, "unknown instance"),
		TTFT: views.HumanMsPtr(r.TTFT), Queue: views.HumanMsPtr(r.Queue), Prefill: views.HumanMsPtr(r.Prefill),
		Network: views.HumanMsPtr(r.Network), Decode: views.HumanMsPtr(r.Decode),
		InputTokens: views.NoValue, ColdStart: r.ColdStart, Error: r.Error}
	if r.InputTokens != nil {
		row.InputTokens = views.HumanTokens(float64(*r.InputTokens))
	}
	return row
}

// coverageRows lays out the window's coverage per service.
func coverageRows(cov []analysis.ServiceCoverage) []views.CoverageRow {
	rows := make([]views.CoverageRow, 0, len(cov))
	pct := func(c analysis.ServiceCoverage, n int64) string { return humanPct(c.Share(n)) }
	for _, c := range cov {
		producers := strings.Join(c.Producers, ", ")
		if producers == "" {
			producers = noValue
		}
		rows = append(rows, views.CoverageRow{Service: c.Service, Producers: producers, Requests: views.HumanInt(int(c.Requests)),
			ClientTTFT: pct(c, c.ClientTTFT), ServerSplit: pct(c, c.ServerSplit),
			Joined:    fmt.Sprintf("%d / %d / %d", c.JoinedBy["trace"], c.JoinedBy["id"], c.JoinedBy["match"]),
			Unmatched: views.HumanInt(int(c.UnmatchedServer)), Advice: c.Advice})
	}
	return rows
}
