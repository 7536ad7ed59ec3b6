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
