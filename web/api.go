package web

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/ingest"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Queries is what pages and the API read (analysis.Queries).
type Queries interface {
	Requests(ctx context.Context, f analysis.RequestFilter) ([]telemetry.LLMRequest, analysis.Count, error)
	Services(ctx context.Context, project uint32, since time.Time) ([]analysis.ServiceInfo, error)
	Diagnose(ctx context.Context, d analysis.DiagnoseRequest) (diagnose.Diagnosis, error)
	DiagnoseWithSlowest(ctx context.Context, d analysis.DiagnoseRequest, n int) (diagnose.Diagnosis, []telemetry.LLMRequest, error)
	Series(ctx context.Context, d analysis.DiagnoseRequest) ([]diagnose.Bucket, float64, error)
	Compare(ctx context.Context, project uint32, a, b diagnose.Range, service, model string, prices map[string]diagnose.Price) (diagnose.Comparison, error)
	Trace(ctx context.Context, project uint32, traceID string) ([]telemetry.Span, []telemetry.LLMRequest, error)
	FillJoins(ctx context.Context, project uint32, traceID string, spans []telemetry.Span, reqs []telemetry.LLMRequest) (analysis.TraceJoins, error)
	FillDetails(ctx context.Context, project uint32, reqs []telemetry.LLMRequest) error
	Coverage(ctx context.Context, project uint32, from, to time.Time, service string) ([]analysis.ServiceCoverage, error)
}

// Keys resolves API keys to projects.
type Keys interface {
	ProjectForKey(ctx context.Context, key string) (int64, error)
}

// EventIntake accepts scaling events from the webhook (ingest.Receiver).
type EventIntake interface {
	IntakeEvents(ctx context.Context, project uint32, body []byte) (int, error)
}

// apiError is the JSON error body of every /api/v1 failure.
type apiError struct {
	Error string `json:"error"`
}

func badRequest(format string, args ...any) error {
	return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf(format, args...))
}

const ctxProject = "tokenpath.project"

// projectOf is the project the request was authenticated for.
func projectOf(c echo.Context) uint32 {
	p, _ := c.Get(ctxProject).(uint32)
	return p
}

// requireKey authenticates /api/v1 with "Authorization: Bearer <key>" or
// the browser's session cookie.
func (s *Server) requireKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		// A request that sends Authorization is authenticated by it alone,
		// never by the session cookie beside it: csrf lets such a request
		// skip the form token (TestBearerHeaderDoesNotSkipFormToken).
		if h := c.Request().Header.Get("Authorization"); h != "" {
			key, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || strings.TrimSpace(key) == "" {
				return echo.NewHTTPError(http.StatusUnauthorized, "malformed Authorization header: send Authorization: Bearer <key>")
			}
			p, err := s.deps.Keys.ProjectForKey(c.Request().Context(), strings.TrimSpace(key))
			if err != nil {
				if isUnknownKey(err) {
					return echo.NewHTTPError(http.StatusUnauthorized, "invalid or revoked API key")
				}
				s.deps.Log.Error("api key lookup", "err", err)
				return echo.NewHTTPError(http.StatusServiceUnavailable, "cannot check the API key right now; retry shortly")
			}
			c.Set(ctxProject, uint32(p))
			return next(c)
		}
		if p, ok := s.sessionProject(c); ok {
			c.Set(ctxProject, p)
			return next(c)
		}
		return echo.NewHTTPError(http.StatusUnauthorized, "missing API key: send Authorization: Bearer <key>")
	}
}

func (s *Server) sessionProject(c echo.Context) (uint32, bool) { return s.sessionFromCookie(c) }

func isUnknownKey(err error) bool { return errors.Is(err, postgres.ErrUnknownKey) }

// window parses from/to (RFC 3339) or last (a duration like 15m) into a
// range; the default is the last 15 minutes.
func window(c echo.Context, fromKey, toKey string, now time.Time) (diagnose.Range, error) {
	from, to := c.QueryParam(fromKey), c.QueryParam(toKey)
	r := diagnose.Range{To: now}
	if to != "" {
		t, err := time.Parse(time.RFC3339Nano, to)
		if err != nil {
			return r, badRequest("%s=%q is not an RFC 3339 time (e.g. 2026-12-02T14:00:00Z)", toKey, to)
		}
		r.To = t.UTC()
	}
	switch {
	case from != "":
		t, err := time.Parse(time.RFC3339Nano, from)
		if err != nil {
			return r, badRequest("%s=%q is not an RFC 3339 time (e.g. 2026-12-02T13:45:00Z)", fromKey, from)
		}
		r.From = t.UTC()
	case c.QueryParam("last") != "" && fromKey == "from":
		d, err := parseLast(c.QueryParam("last"))
		if err != nil {
			return r, err
		}
		r.From = r.To.Add(-d)
	default:
		r.From = r.To.Add(-15 * time.Minute)
	}
	// The engine's DateTime64(9) ends in 2262; no telemetry comes from
	// before 1970 or more than a day ahead of this clock.
	if earliest, latest := time.Unix(0, 0).UTC(), now.Add(24*time.Hour); r.From.Before(earliest) || r.To.After(latest) {
		return r, badRequest("the window must lie between %s and %s (a day past now)", earliest.Format(time.RFC3339), latest.UTC().Format(time.RFC3339))
	}
	if !r.From.Before(r.To) {
		return r, badRequest("%s must be before %s", fromKey, toKey)
	}
	if r.Duration() > analysis.MaxWindow {
		return r, badRequest("a window of %.1f days is too long: the limit is %d days", r.Duration().Hours()/24, int(analysis.MaxWindow.Hours()/24))
	}
	return r, nil
}

// parseLast accepts Go durations plus a "d" suffix for days.
func parseLast(v string) (time.Duration, error) {
	if strings.HasSuffix(v, "d") {
		n, err := strconv.Atoi(strings.TrimSuffix(v, "d"))
		// Bounded before multiplying: 10^6 days overflow a Duration.
		if err == nil && n > 0 && n <= 36500 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, badRequest("last=%q is not a duration (e.g. 15m, 1h, 7d)", v)
	}
	return d, nil
}

func intParam(c echo.Context, name string, def, lo, hi int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("%s=%q must be a whole number between %d and %d", name, v, lo, hi)
	}
	return n, nil
}

func (s *Server) requestFilter(c echo.Context) (analysis.RequestFilter, error) {
	w, err := window(c, "from", "to", time.Now())
	if err != nil {
		return analysis.RequestFilter{}, err
	}
	limit, err := intParam(c, "limit", 100, 1, 1000)
	if err != nil {
		return analysis.RequestFilter{}, err
	}
	offset, err := intParam(c, "offset", 0, 0, 1_000_000)
	if err != nil {
		return analysis.RequestFilter{}, err
	}
	f := analysis.RequestFilter{Project: projectOf(c), From: w.From, To: w.To, Limit: limit, Offset: offset,
		Sort: c.QueryParam("sort"), Desc: c.QueryParam("order") != "asc"}
	if f.Sort == "" && !f.Desc {
		f.Sort = "start" // order=asc alone: oldest first
	}
	return f, readListFilter(c, &f)
}

func (s *Server) apiRequests(c echo.Context) error {
	f, err := s.requestFilter(c)
	if err != nil {
		return err
	}
	reqs, total, err := s.deps.Queries.Requests(c.Request().Context(), f)
	if err != nil {
		return s.internal(err)
	}
	if err := s.deps.Queries.FillDetails(c.Request().Context(), f.Project, reqs); err != nil {
		return s.internal(err)
	}
	out := make([]requestJSON, len(reqs))
	for i, r := range reqs {
		out[i] = toRequestJSON(r)
	}
	body := map[string]any{"requests": out, "total": total.N}
	if total.Estimated {
		// A busy window's total is scaled up from the stored sample.
		body["total_estimated"] = true
	}
	return c.JSON(http.StatusOK, body)
}

func (s *Server) diagnoseRequest(c echo.Context) (analysis.DiagnoseRequest, error) {
	w, err := window(c, "from", "to", time.Now())
	if err != nil {
		return analysis.DiagnoseRequest{}, err
	}
	d := analysis.DiagnoseRequest{Project: projectOf(c), Window: w, Service: c.QueryParam("service"), Model: c.QueryParam("model")}
	if c.QueryParam("baseline_from") != "" || c.QueryParam("baseline_to") != "" {
		if c.QueryParam("baseline_from") == "" || c.QueryParam("baseline_to") == "" {
			return d, badRequest("give both baseline_from and baseline_to, or neither (default: the 3× window before)")
		}
		if d.Baseline, err = window(c, "baseline_from", "baseline_to", time.Now()); err != nil {
			return d, err
		}
	}
	d.SLO, d.Prices = s.sloAndPrices(c, d.Project, d.Service, d.Model)
	return d, nil
}

// guard moves a default baseline off earlier episodes and puts the
// service's objective under TTFT (analysis.GuardDiagnosis).
func (s *Server) guard(c echo.Context, d *analysis.DiagnoseRequest) analysis.BaselineGuard {
	if g, ok := s.deps.Settings.(analysis.DiagnosisGuard); ok {
		return g.GuardDiagnosis(c.Request().Context(), d)
	}
	return analysis.BaselineGuard{}
}

// sloAndPrices is filled in by the settings code when it exists.
func (s *Server) sloAndPrices(c echo.Context, project uint32, service, model string) (*diagnose.SLO, map[string]diagnose.Price) {
	if s.deps.Settings == nil {
		return nil, nil
	}
	return s.deps.Settings.SLOAndPrices(c.Request().Context(), project, service, model)
}

func (s *Server) apiDiagnose(c echo.Context) error {
	d, err := s.diagnoseRequest(c)
	if err != nil {
		return err
	}
	guard := s.guard(c, &d)
	out, err := s.deps.Queries.Diagnose(c.Request().Context(), d)
	if err != nil {
		return s.internal(err)
	}
	guard.Explain(&out)
	if wm, behind := s.assemblyBehind(c.Request().Context(), time.Now()); behind && out.Window.To.After(wm) {
		out.AssembledThrough = &wm
	}
	cov, err := s.deps.Queries.Coverage(c.Request().Context(), d.Project, out.Window.From, out.Window.To, d.Service)
	if err != nil {
		return s.internal(err)
	}
	if d.Service != "" && len(cov) == 1 {
		analysis.CoverageEvidence(&out, cov[0])
	}
	return c.JSON(http.StatusOK, diagnoseJSON{Diagnosis: out, Coverage: cov})
}

// diagnoseJSON is a diagnosis with the coverage of what it read.
type diagnoseJSON struct {
	diagnose.Diagnosis
	Coverage []analysis.ServiceCoverage `json:"coverage"`
}

// apiCoverage answers GET /api/v1/coverage?from&to[&service]: per service,
// the producers detected, the requests with a client TTFT and a server
// split, how they were joined, and what to turn on to cover more.
func (s *Server) apiCoverage(c echo.Context) error {
	w, err := window(c, "from", "to", time.Now())
	if err != nil {
		return err
	}
	cov, err := s.deps.Queries.Coverage(c.Request().Context(), projectOf(c), w.From, w.To, c.QueryParam("service"))
	if err != nil {
		return s.internal(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"from": w.From, "to": w.To, "services": cov})
}

func (s *Server) apiSeries(c echo.Context) error {
	d, err := s.diagnoseRequest(c)
	if err != nil {
		return err
	}
	buckets, width, err := s.deps.Queries.Series(c.Request().Context(), d)
	if err != nil {
		return s.internal(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"bucket_seconds": width, "series": buckets})
}

func (s *Server) apiCompare(c echo.Context) error {
	a, err := window(c, "a_from", "a_to", time.Now())
	if err != nil {
		return err
	}
	b, err := window(c, "b_from", "b_to", time.Now())
	if err != nil {
		return err
	}
	if c.QueryParam("a_from") == "" || c.QueryParam("b_from") == "" {
		return badRequest("compare needs a_from and b_from (RFC 3339); a_to and b_to default to now")
	}
	_, prices := s.sloAndPrices(c, projectOf(c), c.QueryParam("service"), c.QueryParam("model"))
	out, err := s.deps.Queries.Compare(c.Request().Context(), projectOf(c), a, b, c.QueryParam("service"), c.QueryParam("model"), prices)
	if err != nil {
		return s.internal(err)
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) apiServices(c echo.Context) error {
	since := time.Now().Add(-7 * 24 * time.Hour)
	if v := c.QueryParam("last"); v != "" {
		d, err := parseLast(v)
		if err != nil {
			return err
		}
		since = time.Now().Add(-d)
	}
	out, err := s.deps.Queries.Services(c.Request().Context(), projectOf(c), since)
	if err != nil {
		return s.internal(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"services": out})
}

func (s *Server) apiTrace(c echo.Context) error {
	id := strings.ToLower(c.Param("id"))
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return badRequest("trace id must be 32 hex characters")
	}
	spans, reqs, err := s.deps.Queries.Trace(c.Request().Context(), projectOf(c), id)
	if err != nil {
		return s.internal(err)
	}
	if len(spans) == 0 {
		return echo.NewHTTPError(http.StatusNotFound, "no trace "+id+" in this project")
	}
	joins, err := s.deps.Queries.FillJoins(c.Request().Context(), projectOf(c), id, spans, reqs)
	if err != nil {
		return s.internal(err)
	}
	out := make([]requestJSON, len(reqs))
	for i, r := range reqs {
		out[i] = toRequestJSON(r)
	}
	sj := make([]spanJSON, len(spans))
	for i := range spans {
		sj[i] = toSpanJSON(&spans[i])
	}
	taken := make([]takenJSON, len(joins.TakenBy))
	for i, t := range joins.TakenBy {
		taken[i] = takenJSON(t)
	}
	return c.JSON(http.StatusOK, map[string]any{"spans": sj, "requests": out, "joined_elsewhere": taken})
}

// takenJSON is a server span of a trace counted in a request of another
// trace (joined by id or match).
type takenJSON struct {
	ServerSpanID string `json:"server_span_id"`
	TraceID      string `json:"trace_id"`
	SpanID       string `json:"span_id"`
	Join         string `json:"join"`
}

// spanJSON is one span of a trace in the public API shape: the names of
// the request shape, every raw attribute, and what normalization read as
// an LLM call (its timings are the trace's requests).
type spanJSON struct {
	TraceID       string            `json:"trace_id"`
	SpanID        string            `json:"span_id"`
	ParentSpanID  string            `json:"parent_span_id,omitempty"`
	Service       string            `json:"service"`
	Instance      string            `json:"instance,omitempty"`
	Name          string            `json:"name"`
	Kind          string            `json:"kind"`
	Start         time.Time         `json:"start"`
	End           time.Time         `json:"end"`
	DurationMs    float64           `json:"duration_ms"`
	StatusCode    string            `json:"status_code"`
	StatusMessage string            `json:"status_message,omitempty"`
	LLM           *spanLLMJSON      `json:"llm,omitempty"`
	Attributes    map[string]string `json:"attributes"`
	Resource      map[string]string `json:"resource"`
	Events        []spanEventJSON   `json:"events,omitempty"`
}

type spanLLMJSON struct {
	Role         string `json:"role"` // client (the caller's span) or server (the inference server's)
	Provider     string `json:"provider,omitempty"`
	Model        string `json:"model,omitempty"`
	Operation    string `json:"operation,omitempty"`
	InputTokens  *int64 `json:"input_tokens"`
	OutputTokens *int64 `json:"output_tokens"`
}

type spanEventJSON struct {
	Name string    `json:"name"`
	Time time.Time `json:"time"`
}

func toSpanJSON(s *telemetry.Span) spanJSON {
	out := spanJSON{TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, Service: s.Service, Instance: s.Instance,
		Name: s.Name, Kind: s.Kind, Start: s.Start, End: s.End, DurationMs: float64(s.Duration().Microseconds()) / 1e3,
		StatusCode: s.StatusCode, StatusMessage: s.StatusMessage, Attributes: s.Attributes, Resource: s.Resource}
	if out.Attributes == nil {
		out.Attributes = map[string]string{}
	}
	if out.Resource == nil {
		out.Resource = map[string]string{}
	}
	if l := s.LLM; l.Role != telemetry.NotLLM {
		out.LLM = &spanLLMJSON{Role: l.Role.String(), Provider: l.Provider, Model: l.Model, Operation: l.Operation,
			InputTokens: l.InputTokens, OutputTokens: l.OutputTokens}
	}
	for i, name := range s.EventNames {
		if i < len(s.EventTimes) {
			out.Events = append(out.Events, spanEventJSON{Name: name, Time: s.EventTimes[i]})
		}
	}
	return out
}

func (s *Server) apiEvents(c echo.Context) error {
	body, err := readLimited(c.Request(), 4<<20)
	if errors.Is(err, errBodyTooLarge) {
		return echo.NewHTTPError(http.StatusRequestEntityTooLarge, err.Error())
	}
	if err != nil {
		return badRequest("%s", err.Error())
	}
	n, err := s.deps.Events.IntakeEvents(c.Request().Context(), projectOf(c), body)
	if err != nil {
		if errors.Is(err, ingest.ErrInvalidEvents) {
			return badRequest("%s", err.Error())
		}
		if errors.Is(err, ingest.ErrOverloaded) {
			c.Response().Header().Set("Retry-After", "2")
			return echo.NewHTTPError(http.StatusTooManyRequests, err.Error())
		}
		return s.internal(err)
	}
	return c.JSON(http.StatusAccepted, map[string]int{"accepted": n})
}

// readLimited reads a body of at most limit bytes, after gzip
// decompression when the client sent Content-Encoding: gzip.
func readLimited(r *http.Request, limit int64) ([]byte, error) {
	var src io.Reader = r.Body
	what := "the body"
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(io.LimitReader(r.Body, limit+1))
		if err != nil {
			return nil, fmt.Errorf("invalid gzip body: %w", err)
		}
		defer zr.Close()
		src, what = zr, "the gzip body"
	}
	b, err := io.ReadAll(io.LimitReader(src, limit+1))
	if err != nil {
		// A gzip stream cut or corrupted midway, or a client gone.
		return nil, fmt.Errorf("cannot read %s: %w", what, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: it exceeds %d bytes", errBodyTooLarge, limit)
	}
	return b, nil
}

// errBodyTooLarge is readLimited's error for a body over its limit.
var errBodyTooLarge = errors.New("body too large")

// internal marks a store failure: errorHandler logs its chain with the
// request id and shows the user a sentence and that id, never the store's
// text, which quotes SQL (TestStoreErrorsStayInTheLog).
func (s *Server) internal(err error) error { return storeFailure{err} }

// storeFailure is an event-store error on its way to errorHandler.
type storeFailure struct{ err error }

func (f storeFailure) Error() string { return f.err.Error() }
func (f storeFailure) Unwrap() error { return f.err }

// answer is the status and sentence a store failure shows, quoting id.
func (f storeFailure) answer(id string) (int, string) {
	if errors.Is(f.err, context.DeadlineExceeded) || strings.Contains(f.err.Error(), "TIMEOUT_EXCEEDED") {
		return http.StatusServiceUnavailable, "the query took too long; try a shorter window"
	}
	return http.StatusServiceUnavailable, "the event store could not answer; try again shortly (request id " + id + " in the server log)"
}

// requestID is the id middleware.RequestID gave this request.
func requestID(c echo.Context) string { return c.Response().Header().Get(echo.HeaderXRequestID) }
