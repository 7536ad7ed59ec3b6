package web

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/share"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

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
		{Label: "TTFT from", Value: ttftSourceWords(r)},
		{Label: "Tokens from", Value: tokenSourceWords(r)},
	}
	if r.Preemptions != nil {
		v.Facts = append(v.Facts, views.Fact{Label: "Preemptions", Value: strconv.FormatInt(*r.Preemptions, 10)})
	}
	if r.Error {
		v.Facts = append(v.Facts, views.Fact{Label: "Error", Value: errorWords(r)})
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

// errorWords says how a failed call failed: "429 (rate limit)", or that
// its span named no error type.
func errorWords(r *telemetry.LLMRequest) string {
	if r.ErrorType == "" {
		return "failed; the span names no error type"
	}
	return r.ErrorType + " (" + diagnose.ErrorClassWords(r.ErrorType) + ")"
}
