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
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// requestsPerPage is the requests table's page size.
const requestsPerPage = 50

// requestColumns are the requests table's columns in order; Sort names
// the analysis.SortColumns key ("" = not sortable). A list of cold starts
// (coldView) adds the Cold wait column (Cold) and hides the columns with
// a ColdHide class below it instead, so the table still fits its width.
var requestColumns = []struct {
	Label, Title, Sort string
	Num                bool
	Quiet              bool // the label is for screen readers only (views.SortColumn)
	Hide               string
	Cold               bool
	ColdHide           string
}{
	{"Time", "Start of the LLM call (UTC)", "start", false, false, "", false, ""},
	{"Service", "Calling service", "", false, false, "", false, ""},
	{"Model", "", "", false, false, views.HideBelowMedium, false, ""},
	{"Instance", "Inference instance that served it", "", false, false, views.HideBelowSmall, false, ""},
	{"Pre-inf.", "Pre-inference: app work before the model call (retrieval, tools)", "pre_inference", true, false, views.HideBelowMedium, false, views.HideBelowWide},
	{"Cold wait", "Cold-start wait: held until a new instance was ready", "cold_start_wait", true, false, views.HideBelowMedium, true, ""},
	{"Queue", "Wait in the inference server's queue", "queue", true, false, "", false, ""},
	{"Prefill", "Reading the prompt", "prefill", true, false, "", false, ""},
	{"Network", "Client TTFT − server TTFT, both directions", "network", true, false, "", false, ""},
	{"Decode", "Writing the answer, first token to last", "decode", true, false, "", false, ""},
	{"TTFT", "Time to first token", "ttft", true, false, "", false, ""},
	{"E2E", "End to end, as the client saw it", "e2e", true, false, views.HideBelowMedium, false, ""},
	{"ITL", "Inter-token latency (decode / (output tokens − 1))", "itl", true, false, views.HideBelowLarge, false, ""},
	{"In tok.", "Input tokens", "input_tokens", true, false, views.HideBelowLarge, false, views.HideBelowWide},
	{"Out tok.", "Output tokens", "output_tokens", true, false, views.HideBelowLarge, false, views.HideBelowWide},
	{"Flags", "", "", false, true, "", false, ""}, // its tags say what they are
}

// minColdWaitParam filters the list to requests held at least that many
// milliseconds while a new instance started (at most maxColdWaitMs, a day).
const (
	minColdWaitParam = "min_cold_start_wait_ms"
	maxColdWaitMs    = 86_400_000
)

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
// min_cold_start_wait_ms, slow, the other values a diagnosis's bubble-up
// names (tenant, route, prompt_length: one of diagnose.PromptLengths'
// labels) and f.Sort's column.
func readListFilter(c echo.Context, f *analysis.RequestFilter) error {
	f.Service, f.Model, f.Instance = c.QueryParam("service"), c.QueryParam("model"), c.QueryParam("instance")
	f.ColdStart, f.Slow = c.QueryParam("cold_start") == "true", c.QueryParam("slow") == "true"
	wait, err := intParam(c, minColdWaitParam, 0, 0, maxColdWaitMs)
	if err != nil {
		return err
	}
	f.MinColdStartWait = float64(wait)
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
	if q.filter.MinColdStartWait > 0 {
		v.Set(minColdWaitParam, strconv.Itoa(int(q.filter.MinColdStartWait)))
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
	if err := s.deps.Queries.FillDetails(ctx, q.filter.Project, reqs); err != nil {
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
	return f.Service != "" || f.Model != "" || f.Instance != "" || f.ColdStart || f.MinColdStartWait > 0 || f.Slow ||
		f.Tenant != "" || f.Route != "" || f.PromptLength != ""
}

func requestFilters(q requestsQuery, services []analysis.ServiceInfo) views.RequestFilters {
	f := views.RequestFilters{Service: q.filter.Service, Model: q.filter.Model, Instance: q.filter.Instance,
		Tenant: q.filter.Tenant, Route: q.filter.Route, PromptLength: q.filter.PromptLength, PromptLengths: promptLengthLabels(),
		ColdStart: q.filter.ColdStart, Slow: q.filter.Slow, Filtered: filtered(q.filter)}
	if q.filter.MinColdStartWait > 0 {
		f.MinColdStartWait = strconv.Itoa(int(q.filter.MinColdStartWait))
	}
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

// coldView says the list is of cold starts: filtered to them, or sorted
// by how long they were held.
func coldView(q requestsQuery) bool {
	return q.filter.ColdStart || q.filter.MinColdStartWait > 0 || q.sort == "cold_start_wait"
}

func requestsResults(q requestsQuery, reqs []telemetry.LLMRequest, count analysis.Count, now time.Time) views.RequestsResults {
	r := views.RequestsResults{ColdWait: coldView(q), PreInfHide: views.HideBelowMedium, TokensHide: views.HideBelowLarge}
	if r.ColdWait {
		r.PreInfHide, r.TokensHide = views.HideBelowWide, views.HideBelowWide
	}
	base := q.values(false)
	current := q.sort
	if current == "" {
		current = "start"
	}
	for _, col := range requestColumns {
		if col.Cold && !r.ColdWait {
			continue
		}
		sc := views.SortColumn{Label: col.Label, Title: col.Title, Num: col.Num, Quiet: col.Quiet, Hide: col.Hide}
		if r.ColdWait && col.ColdHide != "" {
			sc.Hide = col.ColdHide
		}
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
		PreInference: views.HumanMsPtr(q.PreInference), ColdStartWait: views.HumanMsPtr(q.ColdStartWait), Queue: views.HumanMsPtr(q.Queue), Prefill: views.HumanMsPtr(q.Prefill), Network: views.HumanMsPtr(q.Network),
		Decode: views.HumanMsPtr(q.Decode), TTFT: views.HumanMsPtr(q.TTFT), E2E: views.HumanMsPtr(q.E2E), ITL: views.HumanMsPtr(q.ITL),
		InputTokens: humanTokens(q.InputTokens), OutputTokens: humanTokens(q.OutputTokens),
		ColdStart: q.ColdStart, Error: q.Error, Bundled: bundled(q), TTFTFrom: "TTFT from " + ttftSourceWords(q),
	}
	if q.Join == telemetry.JoinID || q.Join == telemetry.JoinMatch {
		row.Join = q.Join
	}
	if q.Error {
		row.ErrorTitle = errorWords(q)
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
