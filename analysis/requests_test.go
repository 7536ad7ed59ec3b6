package analysis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A newest-first page over a long window is the same whether it comes
// from the last hour alone (full page) or from the whole window (a page
// reaching past that hour).
func TestRequestsNewestFirstPages(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	var rows []telemetry.LLMRequest
	for i := 0; i < 120; i++ { // one every 5 minutes over 10 hours: 12 in the last hour
		rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: "chat", Model: "m", Start: now.Add(-time.Duration(i)*5*time.Minute - time.Second), TTFT: telemetry.Ptr(float64(i))})
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: srv.CH}
	for _, c := range []struct{ limit, offset int }{{10, 0}, {5, 5}, {10, 5}, {50, 0}, {20, 100}} {
		got, total, err := q.Requests(ctx, analysis.RequestFilter{Project: 1, From: now.Add(-24 * time.Hour), To: now, Limit: c.limit, Offset: c.offset})
		if err != nil {
			t.Fatal(err)
		}
		if total != 120 {
			t.Errorf("limit %d offset %d: total %d, want 120", c.limit, c.offset, total)
		}
		want := rows[c.offset:min(c.offset+c.limit, len(rows))]
		if len(got) != len(want) {
			t.Fatalf("limit %d offset %d: %d rows, want %d", c.limit, c.offset, len(got), len(want))
		}
		for i := range want {
			if got[i].TraceID != want[i].TraceID {
				t.Errorf("limit %d offset %d: row %d is %s (ttft %v), want %s", c.limit, c.offset, i, got[i].TraceID, *got[i].TTFT, want[i].TraceID)
				break
			}
		}
	}
}
