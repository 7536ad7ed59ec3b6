// Package analysis is the read side: the planner Queries loads requests,
// series, traces and diagnoses for the API and pages, one file per noun;
// alert evaluation, episode detection and stored settings sit beside it.
// The write side is analysis/assembler; the maths lives in the pure
// subpackages (assemble, diagnose, episode, stats).
package analysis

import (
	"context"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Querier is what the read planner needs of the event store:
// clickhouse.Store, the embedded engine or a server alike. Tests give the
// planner a store of their own (store/storetest), not a whole server.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (*clickhouse.Result, error)
	QueryRequests(ctx context.Context, sql string, args ...any) ([]telemetry.LLMRequest, error)
	QueryRollupMinutes(ctx context.Context, sql string, args ...any) ([]clickhouse.RollupMinute, error)
	AttachResources(ctx context.Context, project uint32, spans []telemetry.Span) error
	TraceBounds(ctx context.Context, project uint32, traceIDs []string, storedBy time.Time, settings string) (clickhouse.TraceBounds, error)
}

// Queries reads what pages and the API show. Every query is scoped to one
// project and parameterized.
type Queries struct {
	CH Querier
	// MaxRows bounds how many requests one diagnosis loads per window.
	MaxRows int
	// OverviewExactRows and OverviewSampleMin override the overview's
	// sampling thresholds (tests lower them); zero takes the defaults.
	OverviewExactRows, OverviewSampleMin int
	// ExactCountRows and SeriesExactRows override exactCountMax and
	// SeriesExactMax (tests lower them).
	ExactCountRows, SeriesExactRows int
	// Mappings, optional, tie called addresses to metrics servers where
	// no address matches (Settings: a gateway in between).
	Mappings ServerMappingSource
}

// MaxWindow is the longest window a query may ask for.
const MaxWindow = 31 * 24 * time.Hour

// RequestFilter selects llm_requests rows.
type RequestFilter struct {
	Project   uint32
	From, To  time.Time
	Service   string // calling service or inference service
	Model     string
	Instance  string
	TraceID   string
	ColdStart bool // only cold starts
	// MinColdStartWait keeps the requests held at least this long (ms)
	// while a new instance started; 0 keeps every request.
	MinColdStartWait float64
	Slow             bool // only requests above the TTFT p90 of the window's requests of Service and Model
	Sort             string
	Desc             bool
	Limit            int
	Offset           int
	// NoTotal skips counting every match (the count is returned as -1):
	// a "slowest requests" panel does not page.
	NoTotal bool
	// Tenant, Route and PromptLength (a diagnose.PromptLengths label) are
	// what bubble-up ranks beside instance and model: a diagnosis links
	// each value it names to its requests.
	Tenant, Route, PromptLength string
}

// SortColumns are the columns requests can be sorted by.
var SortColumns = map[string]string{
	"start": "start", "ttft": "ttft_ms", "e2e": "e2e_ms", "queue": "queue_ms", "prefill": "prefill_ms",
	"network": "network_ms", "decode": "decode_ms", "pre_inference": "pre_inference_ms", "itl": "itl_ms",
	"input_tokens": "input_tokens", "output_tokens": "output_tokens", "cold_start_wait": "cold_start_wait_ms",
}

func (f RequestFilter) where() (string, []any) {
	conds := []string{"project_id = ?"}
	args := []any{f.Project}
	add := func(cond string, arg ...any) {
		conds, args = append(conds, cond), append(args, arg...)
	}
	if !f.From.IsZero() {
		add("start >= ?", f.From)
	}
	if !f.To.IsZero() {
		add("start < ?", f.To)
	}
	if f.Service != "" {
		add("(service = ? OR server_service = ?)", f.Service, f.Service)
	}
	for _, eq := range []struct{ col, v string }{
		{"model", f.Model}, {"instance", f.Instance}, {"trace_id", f.TraceID}, {"tenant", f.Tenant}, {"route", f.Route},
	} {
		if eq.v != "" {
			add(eq.col+" = ?", eq.v)
		}
	}
	if f.ColdStart {
		add("cold_start = 1")
	}
	if f.MinColdStartWait > 0 {
		add("cold_start_wait_ms >= ?", f.MinColdStartWait)
	}
	if b, ok := diagnose.PromptLengthNamed(f.PromptLength); ok {
		// As diagnose buckets them: the first bucket has no lower bound.
		if b.From > 0 {
			add("input_tokens >= ?", b.From)
		}
		if b.To > 0 {
			add("input_tokens < ?", b.To)
		}
	}
	return strings.Join(conds, " AND "), args
}

// byNames reports whether the hourly name counts (llm_request_names) hold
// f's matches: they keep project, service, model and instance only.
func (f RequestFilter) byNames() bool {
	return f.TraceID == "" && !f.ColdStart && f.MinColdStartWait <= 0 && !f.Slow && f.Tenant == "" && f.Route == "" && f.PromptLength == ""
}

// scope is the filter's condition without its window: what the tables
// kept per hour or bucket (llm_request_names, the rollups) hold of it too,
// for filters by project, service, model and instance.
func (f RequestFilter) scope() (string, []any) {
	f.From, f.To = time.Time{}, time.Time{}
	return f.where()
}

// Count is how many requests match a filter: counted, or estimated from the
// stored sample when the window is too big to count under FINAL at a
// page's pace.
type Count struct {
	N         int // -1 when not asked for
	Estimated bool
}
