package analysis

import (
	"context"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TopRequests is the sorted-page fast path of Requests alone (no FINAL
// fallback); found reports whether it could prove the page.
func (q *Queries) TopRequests(ctx context.Context, f RequestFilter) (page []telemetry.LLMRequest, found bool, err error) {
	where, args := f.where()
	return q.topRequests(ctx, f.Project, f.From, f.To, where, args, SortColumns[f.Sort], f.Desc, f.Offset, f.Limit)
}

// Metrics is the gauge read of a diagnosis.
func (q *Queries) Metrics(ctx context.Context, project uint32, services []string, width time.Duration, ranges ...diagnose.Range) ([][]telemetry.MetricPoint, error) {
	return q.metrics(ctx, project, services, width, ranges...)
}

// TopBound is the bound topRequests reads a sorted page's top rows with,
// for the page's k top rows.
func (q *Queries) TopBound(ctx context.Context, f RequestFilter, k int) (*float64, error) {
	where, args := f.where()
	return q.topBound(ctx, where, args, SortColumns[f.Sort], f.Desc, k)
}

// TopFromStates is the sorted-page read from llm_request_top alone;
// found reports whether it could prove the page.
func (q *Queries) TopFromStates(ctx context.Context, f RequestFilter) (page []telemetry.LLMRequest, found bool, err error) {
	where, args := f.where()
	return q.topFromStates(ctx, f.Project, f.From, f.To, where, args, SortColumns[f.Sort], f.Desc, f.Offset, f.Limit)
}

// Loaded is a window's rows as a diagnosis loads them, with the window's
// size when they are a sample.
type Loaded struct {
	Reqs        []telemetry.LLMRequest
	SampledFrom int
	Estimated   bool
}

// LoadPair loads a window and its baseline as a diagnosis does (one
// statement when it can), given their rough counts and row limits.
func (q *Queries) LoadPair(ctx context.Context, f RequestFilter, a, b diagnose.Range, roughA, roughB, limitA, limitB int) (Loaded, Loaded, error) {
	fa, fb := f, f
	fa.From, fa.To, fb.From, fb.To = a.From, a.To, b.From, b.To
	wa, aargs := fa.where()
	wb, bargs := fb.where()
	la, lb, err := q.loadPair(ctx, windowRead{r: a, where: wa, args: aargs, rough: roughA, limit: limitA},
		windowRead{r: b, where: wb, args: bargs, rough: roughB, limit: limitB})
	return Loaded{la.reqs, la.sampledFrom, la.estimated}, Loaded{lb.reqs, lb.sampledFrom, lb.estimated}, err
}

// Load loads one window as a diagnosis does, given its rough count.
func (q *Queries) Load(ctx context.Context, f RequestFilter, r diagnose.Range, rough, limit int) (Loaded, error) {
	f.From, f.To = r.From, r.To
	where, args := f.where()
	l, err := q.loadPlanned(ctx, where, args, rough, limit)
	return Loaded{l.reqs, l.sampledFrom, l.estimated}, err
}

// TopKeysSQL is the statement reading a sorted page's keys (the tests
// EXPLAIN it).
var TopKeysSQL = topKeysSQL
