package analysis_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// The diagnosis page's slowest requests are the requests list sorted by
// TTFT, descending (ties newest first, no TTFT last), whether the window
// was loaded whole (taken from its rows) or sampled (listed beside).
func TestDiagnoseWithSlowestMatchesList(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	insertEvenly(t, srv, now, 3000, time.Second, 50) // "chat": every TTFT 60 times
	tiny := []telemetry.LLMRequest{}
	for i, ttft := range []*float64{telemetry.Ptr(5.0), nil, telemetry.Ptr(9.0), telemetry.Ptr(5.0), nil, telemetry.Ptr(1.0)} {
		tiny = append(tiny, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", 9000+i), SpanID: fmt.Sprintf("%016x", 9000+i),
			Service: "tiny", Model: "m", Start: now.Add(-time.Duration(i) * time.Minute), TTFT: ttft})
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(tiny, nil, 1)); err != nil {
		t.Fatal(err)
	}
	window := diagnose.Range{From: now.Add(-time.Hour), To: now.Add(time.Second)}
	for _, c := range []struct {
		service       string
		rows, maxRows int
		n             int
		sampled       bool
	}{{"chat", 3000, 20_000, 25, false}, {"chat", 3000, 500, 25, true}, {"tiny", len(tiny), 20_000, 10, false}} {
		q := &analysis.Queries{CH: srv.CH, MaxRows: c.maxRows}
		d, slow, err := q.DiagnoseWithSlowest(ctx, analysis.DiagnoseRequest{Project: 1, Window: window, Service: c.service}, c.n)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := q.Requests(ctx, analysis.RequestFilter{Project: 1, From: window.From, To: window.To, Service: c.service,
			Sort: "ttft", Desc: true, Limit: c.n, NoTotal: true})
		if err != nil {
			t.Fatal(err)
		}
		ids := func(rs []telemetry.LLMRequest) []string {
			out := make([]string, len(rs))
			for i, r := range rs {
				out[i] = r.TraceID
			}
			return out
		}
		if got := ids(slow); !slices.Equal(got, ids(want)) || len(want) != min(c.n, c.rows) {
			t.Errorf("%s, max %d rows: slowest %v, want %v", c.service, c.maxRows, got, ids(want))
		}
		if sampled := d.AnalyzedRequests < d.Requests; sampled != c.sampled {
			t.Errorf("%s, max %d rows: %d of %d requests analyzed, want sampled %v", c.service, c.maxRows, d.AnalyzedRequests, d.Requests, c.sampled)
		}
	}
}
