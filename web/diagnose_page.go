package web

import (
	"errors"
	"fmt"
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
	v.ServerMetricsNote = serverMetricsNote(d)
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
