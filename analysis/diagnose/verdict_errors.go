package diagnose

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// VerdictErrors: requests fail (rate limits, server errors, timeouts)
// more often than in the baseline.
const VerdictErrors Verdict = "errors"

// Errors are not a part of the latency: the rule claims the window before
// attribution when the error rate moved beyond noise, and otherwise adds
// a line on the errors to whichever verdict the window reaches once they
// are frequent enough to matter (Aside).
func init() {
	register(verdictRule{
		Verdict:    VerdictErrors,
		Label:      "Errors & rate limits",
		CauseWords: "Requests fail: rate limits, server errors or timeouts",
		Claim:      (*analysis).claimErrors,
		Summary:    (*analysis).errorsSummary,
		Aside:      (*analysis).errorsAside,
	})
}

// Thresholds of the errors verdict. An error rate moved when it reaches
// errorRateMin, doubles and grows by errorRateGrowth points, and the rise
// is errorZMin standard errors out (two-proportion z test), so a handful
// of failures in a quiet window does not take it; without a baseline only
// a rate of errorRateAlone does. A latency regression keeps its verdict
// unless errorRateOverLatency of the requests fail. Below errorRateAside
// the errors are not worth a line. TestErrorsVerdict backs each.
const (
	errorRateMin         = 0.02
	errorRateGrowth      = 0.02
	errorZMin            = 3
	errorRateAlone       = 0.10
	errorRateOverLatency = 0.10
	errorRateAside       = 0.01
	errorsMinRequests    = 20
)

// Error classes, as the breakdown names them.
const (
	errorRateLimit = "rate_limit"
	errorServer    = "server_error"
	errorTimeout   = "timeout"
	errorOther     = "other"
	errorUnnamed   = "unnamed"
)

// errorClassWords name a class in evidence, in breakdown order.
var errorClassWords = []struct{ class, words string }{
	{errorRateLimit, "rate limits (429)"},
	{errorServer, "server errors (5xx)"},
	{errorTimeout, "timeouts"},
	{errorOther, "other errors"},
	{errorUnnamed, "errors their spans do not classify"},
}

// errorClassRule maps error.type values to a class: an HTTP status in
// [From, To], or a name whose lowercased letters contain Contains.
type errorClassRule struct {
	Class    string
	From, To int
	Contains string
}

// errorClassRules are tried in order; the first match wins.
var errorClassRules = []errorClassRule{
	// HTTP statuses (semconv error.type for an HTTP error is the status:
	// open-telemetry/semantic-conventions docs/http/http-spans.md).
	{Class: errorRateLimit, From: 429, To: 429},
	{Class: errorTimeout, From: 408, To: 408},
	{Class: errorTimeout, From: 504, To: 504},
	{Class: errorServer, From: 500, To: 599},
	// Exception class names of the Python SDKs (openai/openai-python
	// src/openai/_exceptions.py and anthropics/anthropic-sdk-python
	// src/anthropic/_exceptions.py: RateLimitError is 429,
	// InternalServerError ≥ 500, APITimeoutError; Anthropic's overloaded
	// API answers 529 "overloaded_error"), which the GenAI
	// instrumentations record as error.type (opentelemetry-python-contrib
	// openai_v2/utils.py handle_span_exception); gRPC's
	// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED status names.
	{Class: errorRateLimit, Contains: "ratelimit"},
	{Class: errorRateLimit, Contains: "resourceexhausted"},
	{Class: errorRateLimit, Contains: "toomanyrequests"},
	{Class: errorTimeout, Contains: "timeout"},
	{Class: errorTimeout, Contains: "timedout"},
	{Class: errorTimeout, Contains: "deadlineexceeded"},
	{Class: errorServer, Contains: "internalserver"},
	{Class: errorServer, Contains: "overloaded"},
	{Class: errorServer, Contains: "serviceunavailable"},
	{Class: errorServer, Contains: "badgateway"},
}

// ErrorClass sorts an error type (telemetry.LLMRequest.ErrorType) into
// rate_limit, server_error, timeout, other, or unnamed when the spans
// named none.
func ErrorClass(errorType string) string {
	t := strings.TrimSpace(errorType)
	if t == "" {
		return errorUnnamed
	}
	if n, err := strconv.Atoi(t); err == nil {
		for _, r := range errorClassRules {
			if r.To > 0 && n >= r.From && n <= r.To {
				return r.Class
			}
		}
		return errorOther
	}
	letters := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r == ' ' || r == '.' {
			return -1
		}
		return r
	}, strings.ToLower(t))
	for _, r := range errorClassRules {
		if r.Contains != "" && strings.Contains(letters, r.Contains) {
			return r.Class
		}
	}
	return errorOther
}

// ErrorClassWords names an error type's class for a reader: "rate limit",
// "server error", "timeout", "other error", or "" when the spans named no
// type.
func ErrorClassWords(errorType string) string {
	switch ErrorClass(errorType) {
	case errorRateLimit:
		return "rate limit"
	case errorServer:
		return "server error"
	case errorTimeout:
		return "timeout"
	case errorOther:
		return "other error"
	}
	return ""
}

// errorFigures are a window's and its baseline's failures.
type errorFigures struct {
	requests, errors         float64 // window, scaled to its total
	baseRequests, baseErrors float64
	hasBaseline              bool
	byClass                  map[string]float64 // window errors per class
	failedTasks, retries     int                // traces with an error; calls after the first error
}

func (f *errorFigures) rate() float64     { return f.errors / math.Max(f.requests, 1) }
func (f *errorFigures) baseRate() float64 { return f.baseErrors / math.Max(f.baseRequests, 1) }

// moved reports whether the error rate rose beyond noise.
func (f *errorFigures) moved() bool {
	r := f.rate()
	if f.requests < errorsMinRequests || r < errorRateMin {
		return false
	}
	if !f.hasBaseline {
		return r >= errorRateAlone
	}
	b := f.baseRate()
	if r < 2*b || r-b < errorRateGrowth {
		return false
	}
	// Two-proportion z test on the pooled rate.
	p := (f.errors + f.baseErrors) / (f.requests + f.baseRequests)
	se := math.Sqrt(p * (1 - p) * (1/f.requests + 1/f.baseRequests))
	return se == 0 || (r-b)/se >= errorZMin
}

// errorFigures counts the window's and the baseline's failures: from the
// counts the store read over every request (Input.ErrorTypes) when given,
// else from the loaded rows scaled to their totals.
func (a *analysis) errorFigures() *errorFigures {
	in := a.in
	f := &errorFigures{
		requests:     float64(orLen(in.WindowTotal, len(in.Requests))),
		baseRequests: float64(orLen(in.BaselineTotal, len(in.BaselineRequests))),
		hasBaseline:  a.hasBaseline,
		byClass:      map[string]float64{},
	}
	if in.ErrorTypes != nil {
		for t, n := range in.ErrorTypes.Window {
			f.errors += float64(n)
			f.byClass[ErrorClass(t)] += float64(n)
		}
		for _, n := range in.ErrorTypes.Baseline {
			f.baseErrors += float64(n)
		}
	} else {
		scale := sampleScale(in.WindowTotal, len(in.Requests))
		for i := range in.Requests {
			if r := &in.Requests[i]; r.Error {
				f.errors += scale
				f.byClass[ErrorClass(r.ErrorType)] += scale
			}
		}
		bscale := sampleScale(in.BaselineTotal, len(in.BaselineRequests))
		for i := range in.BaselineRequests {
			if in.BaselineRequests[i].Error {
				f.baseErrors += bscale
			}
		}
	}
	f.failedTasks, f.retries = retriesAfterErrors(a)
	return f
}

// retriesAfterErrors counts the window's traces with a failed call and
// the failed calls the same trace followed with another model call (a
// retry, or the task carrying on without the answer).
func retriesAfterErrors(a *analysis) (tasks, retries int) {
	calls := map[string]map[int]bool{} // trace → call indexes
	for i := range a.in.Requests {
		r := &a.in.Requests[i]
		if calls[r.TraceID] == nil {
			calls[r.TraceID] = map[int]bool{}
		}
		calls[r.TraceID][r.CallIndex] = true
	}
	failed := map[string]bool{}
	for i := range a.in.Requests {
		r := &a.in.Requests[i]
		if !r.Error {
			continue
		}
		failed[r.TraceID] = true
		if calls[r.TraceID][r.CallIndex+1] {
			retries++
		}
	}
	return len(failed), retries
}

// claimErrors takes the window when its error rate moved beyond noise,
// unless a latency regression explains the window and the errors stay
// under errorRateOverLatency.
func (a *analysis) claimErrors() bool {
	if len(a.in.Requests) == 0 {
		return false
	}
	f := a.errorFigures()
	if !f.moved() || a.mode != modeHealthy && f.rate() < errorRateOverLatency {
		return false
	}
	a.errors = f
	a.errorEvidence(f)
	// What the rise explains: the share of the window's failures above the
	// baseline's rate.
	a.winner.explained = 1
	if f.hasBaseline {
		a.winner.explained = math.Max(0, 1-f.baseRate()/f.rate())
		a.bonus += 0.15
	} else {
		a.penalty += 0.1
	}
	if f.byClass[errorUnnamed] < f.errors/2 {
		a.bonus += 0.1 // the spans say what failed
	}
	if f.retries > 0 {
		a.bonus += 0.05
	}
	if g := a.primaryGroup(); g != nil && g.regressed {
		a.add(fmt.Sprintf("%s p95 %s → %s rose too; with %s of requests failing, the failures come first.",
			g.label, fmtMs(g.baseSum.P95), fmtMs(g.winSum.P95), fmtRate(f.rate())), nil)
	}
	a.cause = fmt.Sprintf("%s of requests failed, %s", fmtRate(f.rate()), f.mostly())
	return true
}

// errorEvidence writes the error rate, the breakdown by class and the
// retries within tasks.
func (a *analysis) errorEvidence(f *errorFigures) {
	rate := fmt.Sprintf("Error rate %s: %s of %s requests failed", fmtRate(f.rate()), fmtCount(math.Round(f.errors)), fmtCount(math.Round(f.requests)))
	figs := figures("error_rate", f.rate(), "errors", f.errors, "requests", f.requests)
	if f.hasBaseline {
		rate = fmt.Sprintf("Error rate %s → %s: %s of %s requests failed (baseline %s of %s)", fmtRate(f.baseRate()), fmtRate(f.rate()),
			fmtCount(math.Round(f.errors)), fmtCount(math.Round(f.requests)), fmtCount(math.Round(f.baseErrors)), fmtCount(math.Round(f.baseRequests)))
		figs["baseline_error_rate"], figs["baseline_errors"] = f.baseRate(), f.baseErrors
	}
	a.add(rate+".", figs)
	if f.errors > 0 {
		var parts []string
		classFigs := map[string]float64{}
		for _, c := range errorClassWords {
			n := f.byClass[c.class]
			if n <= 0 {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %s (%s)", c.words, fmtPct(n/f.errors), fmtCount(math.Round(n))))
			classFigs[c.class] = n
		}
		a.add("By status: "+strings.Join(parts, ", ")+".", classFigs)
	}
	switch {
	case f.failedTasks > 0 && f.retries == 0:
		a.add(fmt.Sprintf("Retries within a task: none of the %s with a failed call called the model again after it.", Plural(f.failedTasks, "trace")),
			figures("failed_tasks", float64(f.failedTasks), "retries", 0.0, "retries_per_failed_task", 0.0))
	case f.failedTasks > 0:
		a.add(fmt.Sprintf("Retries within a task: the %s with a failed call called the model again after %s (%s).",
			Plural(f.failedTasks, "trace"), Plural(f.retries, "failure"), f.retriesPerTask()),
			figures("failed_tasks", float64(f.failedTasks), "retries", float64(f.retries), "retries_per_failed_task", float64(f.retries)/float64(f.failedTasks)))
	}
}

// mostly names the largest class: "80 % of them rate limits (429)".
func (f *errorFigures) mostly() string {
	type cw struct {
		words string
		n     float64
	}
	var cs []cw
	for _, c := range errorClassWords {
		if n := f.byClass[c.class]; n > 0 {
			cs = append(cs, cw{c.words, n})
		}
	}
	if len(cs) == 0 {
		return "of no named class"
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].n > cs[j].n })
	return fmt.Sprintf("%s of them %s", fmtPct(cs[0].n/f.errors), cs[0].words)
}

func (a *analysis) errorsSummary() string {
	f := a.errors
	s := fmt.Sprintf("Errors & rate limits: %s of requests failed", fmtRate(f.rate()))
	if f.hasBaseline {
		s += fmt.Sprintf(" (baseline %s)", fmtRate(f.baseRate()))
	}
	s += ", " + f.mostly()
	if f.failedTasks > 0 {
		s += "; " + f.retriesPerTask()
	}
	return s + "."
}

// errorsAside adds the errors' lines to a diagnosis the errors did not
// claim, once at least errorRateAside of the requests fail, and lowers its
// confidence when a healthy window hides them; it returns the clause a
// healthy summary adds.
func (a *analysis) errorsAside() string {
	if a.errors != nil || len(a.in.Requests) == 0 {
		return ""
	}
	f := a.errorFigures()
	if f.requests < errorsMinRequests || f.rate() < errorRateAside {
		return ""
	}
	a.errorEvidence(f)
	if a.mode == modeHealthy {
		a.penalty += math.Min(0.3, 3*f.rate())
	}
	return fmt.Sprintf("%s of requests fail, %s", fmtRate(f.rate()), f.mostly())
}

// retriesPerTask: "1.4 retries per failed task".
func (f *errorFigures) retriesPerTask() string {
	x := float64(f.retries) / float64(f.failedTasks)
	if fmtCount(x) == "1" {
		return "1 retry per failed task"
	}
	return fmtCount(x) + " retries per failed task"
}

// fmtRate formats an error rate: "4.6 %", "31 %".
func fmtRate(x float64) string {
	if x < 0.1 {
		return trimZero(fmt.Sprintf("%.1f", x*100)) + " %"
	}
	return fmtPct(x)
}
