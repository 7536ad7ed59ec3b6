package web

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/share"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// requestsPerPage is the requests table's page size.
const requestsPerPage = 50

// requestColumns are the requests table's columns in order; Sort names
// the analysis.SortColumns key ("" = not sortable).
var requestColumns = []struct {
	Label, Title, Sort string
	Num                bool
	Quiet              bool // the label is for screen readers only (views.SortColumn)
	Hide               string
}{
	{"Time", "Start of the LLM call (UTC)", "start", false, false, ""},
	{"Service", "Calling service", "", false, false, ""},
	{"Model", "", "", false, false, views.HideBelowMedium},
	{"Instance", "Inference instance that served it", "", false, false, views.HideBelowSmall},
	{"Pre-inf.", "Pre-inference: app work before the model call (retrieval, tools)", "pre_inference", true, false, views.HideBelowMedium},
	{"Queue", "Wait in the inference server's queue", "queue", true, false, ""},
	{"Prefill", "Reading the prompt", "prefill", true, false, ""},
	{"Network", "Client TTFT − server TTFT, both directions", "network", true, false, ""},
	{"Decode", "Writing the answer, first token to last", "decode", true, false, ""},
	{"TTFT", "Time to first token", "ttft", true, false, ""},
	{"E2E", "End to end, as the client saw it", "e2e", true, false, views.HideBelowMedium},
	{"ITL", "Inter-token latency (decode / (output tokens − 1))", "itl", true, false, views.HideBelowLarge},
	{"In tok.", "Input tokens", "input_tokens", true, false, views.HideBelowLarge},
	{"Out tok.", "Output tokens", "output_tokens", true, false, views.HideBelowLarge},
	{"Flags", "", "", false, true, ""}, // its tags say what they are
}

// requestsQuery is the requests page's state as read from the URL.
type requestsQuery struct {
	rng       pageRange
	filter    analysis.RequestFilter
	page      int
	sort      string
	ascending bool
}

func (s *Server) readRequestsQuery(c echo.Context, now time.Time) (requestsQuery, error) {
	rng, err := readPageRange(c, "1h", now)
	if err != nil {
		return requestsQuery{}, err
	}
	page, err := intParam(c, "page", 1, 1, 100_000)
	if err != nil {
		return requestsQuery{}, err
	}
	q := requestsQuery{rng: rng, page: page, sort: c.QueryParam("sort"), ascending: c.QueryParam("order") == "asc"}
	sortKey := q.sort
	if sortKey == "" {
		sortKey = "start"
	}
	q.filter = analysis.RequestFilter{Project: projectOf(c), From: rng.From, To: rng.To,
		Sort: sortKey, Desc: !q.ascending, Limit: requestsPerPage, Offset: (page - 1) * requestsPerPage}
	return q, readListFilter(c, &q.filter)
}

// readListFilter reads what a requests list is filtered and sorted by,
// alike on the page and in the API: service, model, instance, cold_start,
// slow, the other values a diagnosis's bubble-up names (tenant, route,
// prompt_length: one of diagnose.PromptLengths' labels) and f.Sort's
// column.
func readListFilter(c echo.Context, f *analysis.RequestFilter) error {
	f.Service, f.Model, f.Instance = c.QueryParam("service"), c.QueryParam("model"), c.QueryParam("instance")
	f.ColdStart, f.Slow = c.QueryParam("cold_start") == "true", c.QueryParam("slow") == "true"
	f.Tenant, f.Route, f.PromptLength = c.QueryParam("tenant"), c.QueryParam("route"), c.QueryParam("prompt_length")
	if _, ok := diagnose.PromptLengthNamed(f.PromptLength); f.PromptLength != "" && !ok {
		return badRequest("prompt_length=%q is not one of %s", f.PromptLength, strings.Join(promptLengthLabels(), ", "))
	}
	if _, ok := analysis.SortColumns[f.Sort]; f.Sort != "" && !ok {
		return badRequest("sort=%q is not one of %s", f.Sort, strings.Join(slices.Sorted(maps.Keys(analysis.SortColumns)), ", "))
	}
	return nil
}

func promptLengthLabels() []string {
	var out []string
	for _, b := range diagnose.PromptLengths {
		out = append(out, b.Label)
	}
	return out
}

// values encodes the state back into URL parameters; paging and sorting
// are left out unless asked for.
func (q requestsQuery) values(withSort bool) url.Values {
	v := q.rng.query()
	for k, x := range map[string]string{"service": q.filter.Service, "model": q.filter.Model, "instance": q.filter.Instance,
		"tenant": q.filter.Tenant, "route": q.filter.Route, "prompt_length": q.filter.PromptLength} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if q.filter.ColdStart {
		v.Set("cold_start", "true")
	}
	if q.filter.Slow {
		v.Set("slow", "true")
	}
	if withSort && q.sort != "" {
		v.Set("sort", q.sort)
		if q.ascending {
			v.Set("order", "asc")
		}
	}
	return v
}

// requestsPage lists LLM requests with filters, sorting and paging in the
// URL. An htmx request for the results block gets just that block.
func (s *Server) requestsPage(c echo.Context) error {
	ctx := c.Request().Context()
	now := time.Now().UTC()
	q, err := s.readRequestsQuery(c, now)
	if err != nil {
		return err
	}
	reqs, total, err := s.deps.Queries.Requests(ctx, q.filter)
	if err != nil {
		return s.internal(err)
	}
	services, err := s.deps.Queries.Services(ctx, q.filter.Project, q.rng.From)
	if err != nil {
		return s.internal(err)
	}
	v := views.RequestsView{
		Page:    s.page(c, "Requests", "requests"),
		Range:   q.rng.rangeBar("/requests", q.values(true)),
		Filters: requestFilters(q, services),
		Results: requestsResults(q, reqs, total, now),
	}
	c.Response().Header().Add("Vary", "HX-Request, HX-Target")
	h := c.Request().Header
	if h.Get("HX-Request") == "true" && h.Get("HX-Target") == "requests-results" && h.Get("HX-History-Restore-Request") != "true" {
		return render(c, http.StatusOK, views.RequestsFragment(v))
	}
	return render(c, http.StatusOK, views.Requests(v))
}

// filtered says any of the list's filters (the form's fields) is set; the
// window and the sort are not filters.
func filtered(f analysis.RequestFilter) bool {
	return f.Service != "" || f.Model != "" || f.Instance != "" || f.ColdStart || f.Slow || f.Tenant != "" || f.Route != "" || f.PromptLength != ""
}

func requestFilters(q requestsQuery, services []analysis.ServiceInfo) views.RequestFilters {
	f := views.RequestFilters{Service: q.filter.Service, Model: q.filter.Model, Instance: q.filter.Instance,
		Tenant: q.filter.Tenant, Route: q.filter.Route, PromptLength: q.filter.PromptLength, PromptLengths: promptLengthLabels(),
		ColdStart: q.filter.ColdStart, Slow: q.filter.Slow, Filtered: filtered(q.filter)}
	models, instances := map[string]bool{}, map[string]bool{}
	for _, s := range services {
		f.Services = append(f.Services, s.Service)
		if q.filter.Service != "" && s.Service != q.filter.Service {
			continue
		}
		for _, m := range s.Models {
			models[m] = true
		}
		for _, i := range s.Instances {
			instances[i] = true
		}
	}
	f.Services = withCurrent(f.Services, q.filter.Service)
	f.Models = withCurrent(sortedKeys(models), q.filter.Model)
	f.Instances = withCurrent(sortedKeys(instances), q.filter.Instance)
	for k, vs := range q.rng.query() {
		f.Range = append(f.Range, views.HiddenField{Name: k, Value: vs[0]})
	}
	sort.Slice(f.Range, func(i, j int) bool { return f.Range[i].Name < f.Range[j].Name })
	if q.sort != "" {
		f.Sort = append(f.Sort, views.HiddenField{Name: "sort", Value: q.sort})
		if q.ascending {
			f.Sort = append(f.Sort, views.HiddenField{Name: "order", Value: "asc"})
		}
	}
	return f
}

// withCurrent keeps a filter value from the URL selectable even when it
// has no traffic in the range.
func withCurrent(options []string, current string) []string {
	if current == "" {
		return options
	}
	for _, o := range options {
		if o == current {
			return options
		}
	}
	out := append([]string{current}, options...)
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func requestsResults(q requestsQuery, reqs []telemetry.LLMRequest, count analysis.Count, now time.Time) views.RequestsResults {
	r := views.RequestsResults{}
	base := q.values(false)
	current := q.sort
	if current == "" {
		current = "start"
	}
	for _, col := range requestColumns {
		sc := views.SortColumn{Label: col.Label, Title: col.Title, Num: col.Num, Quiet: col.Quiet, Hide: col.Hide}
		if col.Sort != "" {
			v := url.Values{}
			for k, x := range base {
				v[k] = x
			}
			v.Set("sort", col.Sort)
			sc.AriaSort = "none"
			if col.Sort == current {
				// Clicking the current column flips its order.
				if q.ascending {
					sc.AriaSort, sc.Arrow = "ascending", " ▲"
				} else {
					sc.AriaSort, sc.Arrow = "descending", " ▼"
					v.Set("order", "asc")
				}
			}
			sc.Href = "/requests?" + v.Encode()
			if sc.Title == "" {
				sc.Title = "Sort by " + col.Label
			} else {
				sc.Title += " — click to sort"
			}
		}
		r.Columns = append(r.Columns, sc)
	}
	for i := range reqs {
		r.Rows = append(r.Rows, requestRow(&reqs[i], now))
	}
	first := q.filter.Offset + 1
	last := q.filter.Offset + len(reqs)
	total := count.N
	// An estimated total (a busy window's count read from the stored
	// sample) says so, and so does the page count it gives.
	about := ""
	if count.Estimated {
		about = "about "
	}
	pages := max(1, (total+requestsPerPage-1)/requestsPerPage)
	switch {
	case total == 0:
		r.Summary = "No requests"
	case len(reqs) == 0:
		r.Summary = fmt.Sprintf("Page %d is past the end: %s%s", q.page, about, countNoun(total, "request"))
	default:
		r.Summary = fmt.Sprintf("%s–%s of %s%s", humanInt(int64(first)), humanInt(int64(last)), about, countNoun(total, "request"))
	}
	r.PageLabel = fmt.Sprintf("Page %s of %s%s", humanInt(int64(q.page)), about, humanInt(int64(pages)))
	f := q.filter
	if filtered(f) {
		r.Empty = "No requests match these filters in " + strings.ToLower(q.rng.label()[:1]) + q.rng.label()[1:] + ". Widen the range or reset the filters."
	} else {
		r.Empty = "No LLM requests in " + strings.ToLower(q.rng.label()[:1]) + q.rng.label()[1:] + ". Pick a longer range, or send traces (see Settings → Send data)."
	}
	if f.Slow {
		of := "the range's requests"
		switch {
		case f.Service != "" && f.Model != "":
			of += " of " + f.Service + " and " + f.Model
		case f.Service != "":
			of += " of " + f.Service
		case f.Model != "":
			of += " of " + f.Model
		}
		r.Note = "Slow: TTFT (or E2E without TTFT) above the p90 of " + of + ", as a diagnosis counts them; the other filters pick among those."
	}
	pageHref := func(p int) string {
		v := q.values(true)
		if p > 1 {
			v.Set("page", strconv.Itoa(p))
		}
		return "/requests?" + v.Encode()
	}
	if q.page > 1 {
		r.PrevHref = pageHref(min(q.page-1, pages))
	}
	// An estimate may fall short of the real total: a full page always
	// has a next one then.
	if q.page < pages || (count.Estimated && len(reqs) == q.filter.Limit) {
		r.NextHref = pageHref(q.page + 1)
	}
	return r
}

func requestRow(q *telemetry.LLMRequest, now time.Time) views.RequestRow {
	row := views.RequestRow{
		Href: "/requests/" + q.TraceID + "#call-" + q.SpanID, Time: humanTime(q.Start, now),
		TimeFull: q.Start.UTC().Format("2006-01-02 15:04:05.000 UTC"),
		Service:  q.Service, Model: shortModel(orNone(q.Model)), ModelFull: orNone(q.Model),
		Instance: clipMiddle(q.Instance, instanceChars), InstanceFull: q.Instance,
		PreInference: views.HumanMsPtr(q.PreInference), Queue: views.HumanMsPtr(q.Queue), Prefill: views.HumanMsPtr(q.Prefill), Network: views.HumanMsPtr(q.Network),
		Decode: views.HumanMsPtr(q.Decode), TTFT: views.HumanMsPtr(q.TTFT), E2E: views.HumanMsPtr(q.E2E), ITL: views.HumanMsPtr(q.ITL),
		InputTokens: humanTokens(q.InputTokens), OutputTokens: humanTokens(q.OutputTokens),
		ColdStart: q.ColdStart, Error: q.Error, Bundled: bundled(q),
	}
	if q.ServerService != "" && q.ServerService != q.Service {
		row.Service = q.Service + " → " + q.ServerService
	}
	return row
}

// instanceChars is about how much of an instance name a table row shows.
const instanceChars = 18

// shortModel drops a model name's organisation ("meta-llama/Llama-3.1-8B"
// → "Llama-3.1-8B"): the rest tells models apart in a table.
func shortModel(m string) string {
	if i := strings.LastIndexByte(m, '/'); i >= 0 && i < len(m)-1 {
		return m[i+1:]
	}
	return m
}

// clipMiddle shortens a name to about n characters, keeping its head and
// its last dash-separated part: pods of one deployment share the head and
// differ in the tail ("vllm-llama-rnsx4p229s-qf7wj" → "vllm-llama…qf7wj").
func clipMiddle(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	tail := r[len(r)-min(8, n/2):]
	if i := strings.LastIndexByte(s, '-'); i >= 0 && utf8.RuneCountInString(s[i+1:]) <= min(8, n/2) {
		tail = []rune(s[i+1:])
	}
	head := r[:max(n-len(tail)-1, 0)]
	if i := lastRune(head, '-'); i > 0 && i >= len(head)/2 {
		head = head[:i] // end on a whole part, unless that loses most of it
	}
	return string(head) + "…" + string(tail)
}

func lastRune(r []rune, c rune) int {
	for i := len(r) - 1; i >= 0; i-- {
		if r[i] == c {
			return i
		}
	}
	return -1
}

// bundled reports a managed-API call: no inference-server span, so queue,
// prefill and network are inside the provider (and its TTFT, when known).
func bundled(q *telemetry.LLMRequest) bool {
	return q.ServerService == "" && q.Queue == nil && q.Prefill == nil && q.Network == nil
}

// queuePrefill is the server's queue and prefill as one figure (TTFT −
// network) when a server span gave a TTFT but no queue time (SGLang, whose
// prefill includes the wait): the two are bundled, never shown as prefill.
func queuePrefill(q *telemetry.LLMRequest) (float64, bool) {
	if q.ServerService == "" || q.Queue != nil || q.Prefill != nil || q.TTFT == nil || q.Network == nil {
		return 0, false
	}
	return *q.TTFT - *q.Network, true
}

// requestDetailPage shows one trace: waterfall, component tables, span
// attributes.
func (s *Server) requestDetailPage(c echo.Context) error {
	id, ok := traceID(c.Param("trace"))
	if !ok || len(c.Param("trace")) != 32 {
		return echo.NewHTTPError(http.StatusNotFound, notATraceID(c.Param("trace")))
	}
	spans, reqs, err := s.deps.Queries.Trace(c.Request().Context(), projectOf(c), id)
	if err != nil {
		return s.internal(err)
	}
	if len(spans) == 0 && len(reqs) == 0 {
		msg := "There is no trace " + id + " in this project."
		if s.deps.RetentionDays > 0 {
			msg += fmt.Sprintf(" It may be older than the retention (%s), or still arriving.", countNoun(s.deps.RetentionDays, "day"))
		}
		return echo.NewHTTPError(http.StatusNotFound, msg)
	}
	joins, err := s.deps.Queries.FillJoins(c.Request().Context(), projectOf(c), id, spans, reqs)
	if err != nil {
		return s.internal(err)
	}
	v := traceDetailView(id, spans, reqs, time.Now().UTC(), true)
	if len(reqs) == 0 && len(joins.TakenBy) > 0 {
		v.Note = takenNote(joins.TakenBy)
	}
	v.Share = shareBox(c, share.TracePath(id), "Freeze this trace into a link anyone can open, without logging in; it outlives the spans' retention")
	v.Page = s.page(c, "Trace "+id[:8]+"…", "requests")
	return render(c, http.StatusOK, views.RequestDetail(v))
}

// openTrace answers the header's trace ID box: it sends the browser to
// the trace's page, or says what a trace ID looks like.
func (s *Server) openTrace(c echo.Context) error {
	raw := c.QueryParam("id")
	id, ok := traceID(raw)
	if !ok {
		return badRequest("%s", notATraceID(raw))
	}
	return c.Redirect(http.StatusSeeOther, "/requests/"+id)
}

// traceID reads a trace ID as people paste it: any case, spaces around,
// and the 16 hex digits of a 64-bit Jaeger or Zipkin ID, which OTLP pads
// with zeros to 32.
func traceID(raw string) (string, bool) {
	id := strings.ToLower(strings.TrimSpace(raw))
	if len(id) == 16 {
		id = strings.Repeat("0", 16) + id
	}
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" || id == strings.Repeat("0", 32) {
		return "", false
	}
	return id, true
}

func notATraceID(raw string) string {
	return fmt.Sprintf("%q is not a trace ID: a trace ID is 32 hexadecimal digits (or 16, for a 64-bit one), like 4bf92f3577b34da6a3ce929d0e0e4736.", raw)
}

// traceDetailView lays a trace out: spans in tree order on one time line, the
// LLM calls' components on their spans.
func traceDetailView(id string, spans []telemetry.Span, reqs []telemetry.LLMRequest, now time.Time, live bool) views.RequestDetailView {
	v := views.RequestDetailView{TraceID: id, Live: live}
	sort.SliceStable(reqs, func(i, j int) bool {
		if reqs[i].CallIndex != reqs[j].CallIndex {
			return reqs[i].CallIndex < reqs[j].CallIndex
		}
		return reqs[i].Start.Before(reqs[j].Start)
	})
	// The time line covers every span and every call (a call's pre-inference
	// starts at its root, which may be a span of another export still on its
	// way).
	var t0, t1 time.Time
	extend := func(a, b time.Time) {
		if t0.IsZero() || a.Before(t0) {
			t0 = a
		}
		if b.After(t1) {
			t1 = b
		}
	}
	for i := range spans {
		extend(spans[i].Start, spans[i].End)
	}
	for i := range reqs {
		r := &reqs[i]
		end := r.Start
		if r.E2E != nil {
			end = r.Start.Add(msDuration(*r.E2E))
		}
		extend(r.Start, end)
	}
	total := t1.Sub(t0)
	if total <= 0 {
		total = time.Millisecond
	}
	pct := func(t time.Time) float64 { return clampPct(float64(t.Sub(t0)) / float64(total) * 100) }

	callOf := map[string]*telemetry.LLMRequest{}
	for i := range reqs {
		callOf[reqs[i].SpanID] = &reqs[i]
	}
	services := map[string]bool{}
	var root *telemetry.Span
	ordered := orderSpans(spans)
	for _, sp := range ordered {
		if sp.depth == 0 && sp.span.ParentSpanID == "" {
			root = sp.span
			break
		}
	}
	before := callsBefore(root, reqs)
	if root == nil && len(ordered) > 0 {
		root = ordered[0].span
	}
	for _, sp := range ordered {
		services[sp.span.Service] = true
		var b beforeCall
		if c := callOf[sp.span.SpanID]; c != nil {
			b = before[c.SpanID]
		}
		row := waterfallRow(sp, callOf[sp.span.SpanID], b, t0, total, pct)
		if row.CallAnchor == "" && sp.span.LLM.Role == telemetry.LLMServer {
			serverSegments(&row, sp.span, pct)
			if c := servedCall(sp.span, reqs); c != nil {
				row.CallAnchor = "call-" + c.SpanID
			}
		}
		v.Rows = append(v.Rows, row)
		sv := spanView(sp.span, t0)
		sv.ServerSide = row.CallAnchor != "" && !row.LLM
		v.Spans = append(v.Spans, sv)
	}
	for i := range reqs {
		services[reqs[i].Service] = true
		v.Calls = append(v.Calls, callView(&reqs[i], i, before[reqs[i].SpanID], now))
	}
	v.Axis = []views.AxisTick{
		{X: "0%", Label: "0", Anchor: "start"},
		{X: "25%", Label: diagnose.FormatMs(ms(total) / 4), Anchor: "middle", Minor: true},
		{X: "50%", Label: diagnose.FormatMs(ms(total) / 2), Anchor: "middle"},
		{X: "75%", Label: diagnose.FormatMs(ms(total) * 3 / 4), Anchor: "middle", Minor: true},
		{X: "100%", Label: diagnose.FormatMs(ms(total)), Anchor: "end"},
	}
	v.Legend = []views.LegendItem{
		{Class: "seg-span", Label: "span"}, {Class: "seg-pre", Label: "pre-inference (own time before the call)"},
		{Class: "seg-earlier", Label: "earlier model calls (not pre-inference)"}, {Class: "seg-cold", Label: "cold-start wait"},
		{Class: "seg-queue", Label: "queue"}, {Class: "seg-prefill", Label: "prefill"}, {Class: "seg-network", Label: "network"},
		{Class: "seg-ttft", Label: "TTFT (bundled by a managed API)"}, {Class: "seg-decode", Label: "decode"},
	}
	names := sortedKeys(services)
	v.Facts = []views.Fact{
		{Label: "Started", Value: t0.UTC().Format("2006-01-02 15:04:05.000 UTC")},
		{Label: "Duration", Value: diagnose.FormatMs(ms(total))},
		{Label: "Spans", Value: humanInt(int64(len(spans)))},
		{Label: "LLM calls", Value: humanInt(int64(len(reqs)))},
		{Label: "Services", Value: strings.Join(names, ", ")},
	}
	if root != nil {
		v.Facts = append([]views.Fact{{Label: "Root span", Value: root.Name}}, v.Facts...)
	}
	hasLLMSpan := false
	for i := range spans {
		hasLLMSpan = hasLLMSpan || spans[i].LLM.IsLLM()
	}
	switch {
	case len(spans) == 0:
		v.Note = "The spans of this trace are no longer stored (or have not arrived); only its decomposed LLM calls are shown."
	case hasLLMSpan && len(reqs) == 0:
		v.Note = "The LLM calls of this trace are still being assembled; reload in a few seconds for their components."
	}
	return v
}

// orderedSpan is a span with its nesting depth, in depth-first start order.
type orderedSpan struct {
	span  *telemetry.Span
	depth int
}

// orderSpans nests spans under their parents; spans whose parent is not
// in the trace (yet) start a tree of their own.
func orderSpans(spans []telemetry.Span) []orderedSpan {
	byID := map[string]*telemetry.Span{}
	for i := range spans {
		byID[spans[i].SpanID] = &spans[i]
	}
	children := map[string][]*telemetry.Span{}
	var roots []*telemetry.Span
	for i := range spans {
		s := &spans[i]
		if p, ok := byID[s.ParentSpanID]; ok && s.ParentSpanID != "" && p != s {
			children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(xs []*telemetry.Span) {
		sort.SliceStable(xs, func(i, j int) bool { return xs[i].Start.Before(xs[j].Start) })
	}
	byStart(roots)
	out := make([]orderedSpan, 0, len(spans))
	seen := map[string]bool{}
	var walk func(s *telemetry.Span, depth int)
	walk = func(s *telemetry.Span, depth int) {
		if seen[s.SpanID] { // a parent cycle in bad data must not loop
			return
		}
		seen[s.SpanID] = true
		out = append(out, orderedSpan{span: s, depth: depth})
		kids := children[s.SpanID]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	for i := range spans { // whatever a cycle left out
		if !seen[spans[i].SpanID] {
			walk(&spans[i], 0)
		}
	}
	return out
}

// maxDepthClass is the deepest indentation the CSS knows (.depth-1 …).
const maxDepthClass = 8

func depthClass(depth int) string {
	if depth == 0 {
		return ""
	}
	return "depth-" + strconv.Itoa(min(depth, maxDepthClass))
}

func waterfallRow(sp orderedSpan, call *telemetry.LLMRequest, before beforeCall, t0 time.Time, total time.Duration, pct func(time.Time) float64) views.WaterfallRow {
	s := sp.span
	x := pct(s.Start)
	w := max(clampPct(float64(s.Duration())/float64(total)*100), 0.2)
	row := views.WaterfallRow{
		Anchor: "span-" + s.SpanID, Name: s.Name, Service: s.Service,
		DepthClass: depthClass(sp.depth),
		X:          pctAttr(x), W: pctAttr(min(w, 100-x)),
		Offset: "+" + diagnose.FormatMs(ms(s.Start.Sub(t0))), Duration: diagnose.FormatMs(ms(s.Duration())),
		Error: s.StatusCode == "error", LLM: call != nil,
	}
	row.Label = fmt.Sprintf("%s (%s): starts at %s, lasts %s", s.Name, s.Service, row.Offset, row.Duration)
	if call == nil {
		return row
	}
	row.CallAnchor = "call-" + call.SpanID
	seg := func(class, name string, from time.Time, msLen *float64) time.Time {
		return addSegment(&row, pct, class, name, from, msLen)
	}
	preInferenceSegments(&row, call, before, pct)
	pos := seg("seg-cold", "Cold-start wait", call.Start, call.ColdStartWait)
	if call.Queue != nil || call.Prefill != nil || call.Network != nil {
		pos = seg("seg-queue", "Queue", pos, call.Queue)
		pos = seg("seg-prefill", "Prefill", pos, call.Prefill)
		pos = seg("seg-network", "Network", pos, call.Network)
	} else if call.TTFT != nil {
		pos = seg("seg-ttft", "TTFT (bundled)", pos, call.TTFT)
	}
	if call.TTFT != nil {
		// Decode starts at the first token, whatever parts of TTFT are known.
		pos = call.Start.Add(msDuration(*call.TTFT))
	}
	seg("seg-decode", "Decode", pos, call.Decode)
	labelSegments(&row)
	return row
}

// addSegment draws msLen milliseconds from from on row's bar and returns
// where the segment ends; an unknown or empty length draws nothing.
func addSegment(row *views.WaterfallRow, pct func(time.Time) float64, class, name string, from time.Time, msLen *float64) time.Time {
	if msLen == nil || *msLen <= 0 {
		return from
	}
	to := from.Add(msDuration(*msLen))
	if a, b := pct(from), pct(to); b > a {
		row.Segments = append(row.Segments, views.Segment{Class: class, X: pctAttr(a), W: pctAttr(b - a),
			Title: name + " " + diagnose.FormatMs(*msLen)})
	}
	return to
}

// labelSegments names a row's segments in its accessible label.
func labelSegments(row *views.WaterfallRow) {
	var parts []string
	for _, sg := range row.Segments {
		parts = append(parts, sg.Title)
	}
	if len(parts) > 0 {
		row.Label += "; " + strings.Join(parts, ", ")
	}
}

// serverSegments draws an inference server's span split as the server
// timed it, on its own clock: queue and prefill from the span's start,
// decode from its first token. The call's bar above it (the client span)
// shows the same parts as assembled, with the network between them; the
// server's bar shows where in its own span they fell.
func serverSegments(row *views.WaterfallRow, s *telemetry.Span, pct func(time.Time) float64) {
	l := &s.LLM
	msOf := func(d *time.Duration) *float64 {
		if d == nil {
			return nil
		}
		v := ms(*d)
		return &v
	}
	prefill := msOf(l.PrefillTime)
	if prefill == nil && l.ServerTTFT != nil && l.QueueTime != nil {
		d := *l.ServerTTFT - *l.QueueTime
		prefill = msOf(&d)
	}
	pos := addSegment(row, pct, "seg-queue", "Queue", s.Start, msOf(l.QueueTime))
	addSegment(row, pct, "seg-prefill", "Prefill", pos, prefill)
	// Decode starts at the first token; without it, it ends with the span.
	if d := l.DecodeTime; d != nil {
		from := s.End.Add(-*d)
		if l.ServerTTFT != nil {
			from = s.Start.Add(*l.ServerTTFT)
		}
		addSegment(row, pct, "seg-decode", "Decode", from, msOf(d))
	}
	labelSegments(row)
}

// servedCall is the trace's LLM call an inference server's span served:
// the call on its parent span, or the trace's only call.
func servedCall(s *telemetry.Span, reqs []telemetry.LLMRequest) *telemetry.LLMRequest {
	for i := range reqs {
		if reqs[i].SpanID == s.ParentSpanID {
			return &reqs[i]
		}
	}
	if len(reqs) == 1 {
		return &reqs[0]
	}
	return nil
}

func callView(r *telemetry.LLMRequest, i int, before beforeCall, now time.Time) views.LLMCallView {
	title := fmt.Sprintf("#%d %s", i+1, orNone(r.Model))
	if r.Service != "" {
		title += " · " + r.Service
	}
	q := url.Values{}
	svc := r.Service
	if r.ServerService != "" {
		svc = r.ServerService
	}
	q.Set("service", svc)
	if r.Model != "" {
		q.Set("model", r.Model)
	}
	// The diagnosis window: the hour around the call.
	q.Set("from", r.Start.Add(-30*time.Minute).UTC().Format(time.RFC3339))
	q.Set("to", r.Start.Add(30*time.Minute).UTC().Format(time.RFC3339))
	v := views.LLMCallView{Anchor: "call-" + r.SpanID, SpanAnchor: "span-" + r.SpanID, Title: title,
		ColdStart: r.ColdStart, Error: r.Error, Bundled: bundled(r), DiagnoseHref: "/diagnose?" + q.Encode()}
	serving := r.Service
	if r.ServerService != "" && r.ServerService != r.Service {
		serving += " → " + r.ServerService
	}
	v.Facts = []views.Fact{
		{Label: "Started", Value: humanTime(r.Start, now)},
		{Label: "Path", Value: serving},
		{Label: "Provider", Value: orNone(r.Provider)},
		{Label: "Instance", Value: orNone(r.Instance)},
		{Label: "Tokens in / out", Value: humanTokens(r.InputTokens) + " / " + humanTokens(r.OutputTokens)},
		{Label: "ITL", Value: views.HumanMsPtr(r.ITL)},
		{Label: "Joined", Value: joinWords(r)},
	}
	share := func(p *float64) string {
		if p == nil || r.E2E == nil || *r.E2E <= 0 {
			return noValue
		}
		return humanPct(*p / *r.E2E)
	}
	add := func(name, class string, p *float64, note string) {
		v.Components = append(v.Components, views.ComponentFigure{Name: name, Class: class, Value: views.HumanMsPtr(p), Share: share(p), Note: note})
	}
	// Pre-inference happens before the call starts, so it has no share of
	// the call's E2E.
	v.Components = append(v.Components, views.ComponentFigure{Name: "Pre-inference", Class: "seg-pre", Value: views.HumanMsPtr(r.PreInference),
		Share: noValue, Note: earlierCallsNote(before)})
	if r.ColdStartWait != nil {
		add("Cold-start wait", "seg-cold", r.ColdStartWait, "held until a new instance was ready")
	}
	if v.Bundled {
		bundledNote := "inside the provider's TTFT"
		v.Components = append(v.Components,
			views.ComponentFigure{Name: "Queue", Class: "seg-queue", Value: "bundled", Share: noValue, Note: bundledNote},
			views.ComponentFigure{Name: "Prefill", Class: "seg-prefill", Value: "bundled", Share: noValue, Note: bundledNote},
			views.ComponentFigure{Name: "Network", Class: "seg-network", Value: "bundled", Share: noValue, Note: bundledNote})
	} else if qp, ok := queuePrefill(r); ok {
		note := "queue+prefill " + views.HumanMs(qp) + ": the server counts its queue wait in prefill (SGLang) — not split"
		v.Components = append(v.Components,
			views.ComponentFigure{Name: "Queue", Class: "seg-queue", Value: "bundled", Share: noValue, Note: note},
			views.ComponentFigure{Name: "Prefill", Class: "seg-prefill", Value: "bundled", Share: noValue, Note: note})
		add("Network", "seg-network", r.Network, "client TTFT − server TTFT, both directions")
	} else {
		add("Queue", "seg-queue", r.Queue, "waiting for a slot in the inference server")
		add("Prefill", "seg-prefill", r.Prefill, "reading the prompt")
		add("Network", "seg-network", r.Network, "client TTFT − server TTFT, both directions")
	}
	add("Decode", "seg-decode", r.Decode, "first token to last")
	add("TTFT", "seg-ttft", r.TTFT, "time to first token (the parts above up to decode)")
	add("E2E", "seg-span", r.E2E, "the whole call as the client saw it")
	return v
}

func spanView(s *telemetry.Span, t0 time.Time) views.SpanView {
	v := views.SpanView{Anchor: "span-" + s.SpanID, Name: s.Name, Service: s.Service, Error: s.StatusCode == "error", LLM: s.LLM.IsLLM()}
	v.Facts = []views.Fact{
		{Label: "Span id", Value: s.SpanID},
		{Label: "Parent", Value: orNone(s.ParentSpanID)},
		{Label: "Kind", Value: orNone(s.Kind)},
		{Label: "Start", Value: s.Start.UTC().Format("15:04:05.000000") + " (+" + diagnose.FormatMs(ms(s.Start.Sub(t0))) + ")"},
		{Label: "Duration", Value: diagnose.FormatMs(ms(s.Duration()))},
		{Label: "Status", Value: orNone(s.StatusCode)},
	}
	if s.Instance != "" {
		v.Facts = append(v.Facts, views.Fact{Label: "Instance", Value: s.Instance})
	}
	if s.StatusMessage != "" {
		v.Facts = append(v.Facts, views.Fact{Label: "Status message", Value: s.StatusMessage})
	}
	if role := s.LLM.Role.String(); role != "" {
		v.Facts = append(v.Facts, views.Fact{Label: "LLM role", Value: role})
	}
	v.Attributes = sortedFacts(s.Attributes)
	v.Resource = sortedFacts(s.Resource)
	for i, name := range s.EventNames {
		at := ""
		if i < len(s.EventTimes) {
			at = "+" + diagnose.FormatMs(ms(s.EventTimes[i].Sub(s.Start))) + " into the span"
		}
		v.Events = append(v.Events, views.Fact{Label: name, Value: at})
	}
	return v
}

func sortedFacts(m map[string]string) []views.Fact {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]views.Fact, len(keys))
	for i, k := range keys {
		out[i] = views.Fact{Label: k, Value: m[k]}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func clampPct(x float64) float64 { return max(0, min(100, x)) }

// pctAttr writes an SVG length in percent.
func pctAttr(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) + "%" }

// joinWords says how a request's client call and server span were paired.
func joinWords(r *telemetry.LLMRequest) string {
	server := ""
	if r.ServerSpanID != "" {
		server = " to server span " + r.ServerSpanID + " of trace " + r.ServerTraceID
	}
	switch r.Join {
	case telemetry.JoinTrace:
		return "by trace context"
	case telemetry.JoinID:
		return "by id (gen_ai.request.id = gen_ai.response.id)" + server
	case telemetry.JoinMatch:
		return "by a unique match of input tokens, model, address and time" + server
	case "":
		if r.ServerService != "" && r.ServerService == r.Service {
			return "not joined: a server span with no client call found"
		}
		if r.ServerService == "" {
			return "not joined: no server span found for this call"
		}
	}
	return noValue
}

// takenNote tells, on the page of a trace whose server span counts in a
// request of another trace, where that request is.
func takenNote(taken []analysis.TakenSpan) string {
	t := taken[0]
	how := "by id"
	if t.Join == telemetry.JoinMatch {
		how = "by a unique match"
	}
	return fmt.Sprintf("The server span %s of this trace arrived without trace context; it was joined %s to the LLM call %s of trace %s, and is counted there.",
		t.ServerSpanID, how, t.SpanID, t.TraceID)
}
