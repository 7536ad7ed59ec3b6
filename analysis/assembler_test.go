package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// TestLiveRequests: the assembler resolves row versions as FINAL would.
func TestLiveRequests(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cols := append(strings.Fields(strings.NewReplacer(",", " ").Replace(clickhouse.RequestColumns)), "row_version", "is_deleted")
	row := func(span string, version int64, deleted bool) []any {
		vals := map[string]any{"project_id": int64(1), "trace_id": "t", "span_id": span, "service": "chat", "start": t0,
			"row_version": version, "is_deleted": deleted}
		out := make([]any, len(cols))
		for i, c := range cols {
			out[i] = vals[c]
		}
		return out
	}
	r := &clickhouse.Result{Columns: cols, Rows: [][]any{
		row("a", 1, false), row("a", 2, false), // replaced by a later version: one row
		row("b", 3, true), row("b", 1, false), // deleted by a later tombstone: none
		row("c", 1, true), row("c", 2, false), // re-created after a tombstone: one row
		row("d", 5, false),
	}}
	var got []string
	for _, q := range liveRequests(r) {
		got = append(got, q.SpanID)
	}
	if strings.Join(got, ",") != "a,c,d" {
		t.Errorf("live rows %v, want a, c, d", got)
	}
}
