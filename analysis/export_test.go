package analysis

import (
	"context"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TopRequests is the sorted-page fast path of Requests alone (no FINAL
// fallback); found reports whether it could prove the page.
func (q *Queries) TopRequests(ctx context.Context, f RequestFilter) (page []telemetry.LLMRequest, found bool, err error) {
	where, args := f.where()
	return q.topRequests(ctx, f.Project, where, args, SortColumns[f.Sort], f.Desc, f.Offset, f.Limit)
}
