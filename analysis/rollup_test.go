package analysis_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// rollupRows are n requests of services chat (served by vllm) and batch
// spread over [from, to), with every component sometimes unknown.
func rollupRows(r *rand.Rand, n int, from, to time.Time, version int) []telemetry.LLMRequest {
	maybe := func(p float64, v float64) *float64 {
		if r.Float64() < p {
			return nil
		}
		return telemetry.Ptr(math.Round(v*1000) / 1000)
	}
	rows := make([]telemetry.LLMRequest, 0, n)
	for i := range n {
		start := from.Add(time.Duration(r.Int64N(int64(to.Sub(from)))))
		in, out := int64(1+r.IntN(5000)), int64(r.IntN(800))
		svc, srv := "chat", "vllm"
		if i%4 == 0 {
			svc, srv = "batch", ""
		}
		req := telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: svc, ServerService: srv, Model: []string{"m1", "m2"}[i%2], Provider: "p", Start: start,
			TTFT: maybe(0.05, r.ExpFloat64()*400*float64(version)), Queue: maybe(0.3, r.ExpFloat64()*80), Prefill: maybe(0.3, r.ExpFloat64()*120),
			Network: maybe(0.5, r.Float64()*20), Decode: maybe(0.1, r.ExpFloat64()*2000), E2E: maybe(0, 500+r.ExpFloat64()*2000),
			ITL: maybe(0.2, 10+r.Float64()*30), PreInference: maybe(0.6, r.ExpFloat64()*50),
			InputTokens: &in, OutputTokens: &out, ColdStart: i%97 == 0, Error: i%53 == 0}
		if req.ColdStart {
			req.ColdStartWait = telemetry.Ptr(3000 + r.Float64()*1000)
		}
		rows = append(rows, req)
	}
	return rows
}

// A window whose chart buckets are 5 minutes or wider and that is loaded as
// a sample gets its series from the rollups: counts and sums exactly those
// of every live request, percentiles within ±1 % of Go's over the same
// rows — after a rewrite that changed some requests (their old versions
// retracted in the same insert) and deleted others. Windows of 5-minute
// and of hourly buckets both start and end off the rollups' boundaries, so
// the ragged ends come from llm_requests.
func TestSeriesFromRollupsMatchesGo(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour)
	r := rand.New(rand.NewPCG(7, 8))
	from, to := now.Add(-80*time.Hour), now
	rows := rollupRows(r, 6000, from, to, 1)
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	// Version 2: a third of the requests change (slower TTFT, other
	// tokens), a tenth are gone, the rest stay as they are.
	again := rollupRows(rand.New(rand.NewPCG(9, 10)), len(rows), from, to, 3)
	var changed, replaced, gone, live []telemetry.LLMRequest
	for i := range rows {
		switch {
		case i%3 == 0:
			c := rows[i]
			c.TTFT, c.Decode, c.OutputTokens, c.Error = again[i].TTFT, again[i].Decode, again[i].OutputTokens, !c.Error
			changed, replaced, live = append(changed, c), append(replaced, rows[i]), append(live, c)
		case i%10 == 1:
			gone = append(gone, rows[i])
		default:
			live = append(live, rows[i])
		}
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsRewriteBatch(changed, gone, replaced, 2)); err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: srv.CH, MaxRows: 200}
	for _, c := range []struct {
		name   string
		window diagnose.Range
		width  time.Duration
	}{
		{"6h, 5-minute buckets", diagnose.Range{From: now.Add(-6*time.Hour - 2*time.Minute - 7*time.Second), To: now.Add(-3*time.Minute - 11*time.Second)}, 5 * time.Minute},
		{"3d, hourly buckets", diagnose.Range{From: now.Add(-72*time.Hour - 97*time.Minute - 5*time.Second), To: now.Add(-7*time.Minute - 1*time.Second)}, time.Hour},
	} {
		if got := diagnose.Buckets(c.window); got != c.width {
			t.Fatalf("%s: buckets of %v, the test needs %v", c.name, got, c.width)
		}
		for _, f := range []struct{ service, model string }{{"chat", ""}, {"vllm", "m2"}, {"", ""}} {
			var mine []telemetry.LLMRequest
			for _, x := range live {
				if (f.service == "" || x.Service == f.service || x.ServerService == f.service) && (f.model == "" || x.Model == f.model) {
					mine = append(mine, x)
				}
			}
			want := diagnose.Series(diagnose.Input{Window: c.window, Requests: mine})
			got, _, err := q.Series(ctx, analysis.DiagnoseRequest{Project: 1, Window: c.window, Service: f.service, Model: f.model})
			if err != nil {
				t.Fatal(err)
			}
			closeSeries(t, fmt.Sprintf("%s, service %q model %q", c.name, f.service, f.model), got, want, 0.01)
		}
	}
}

// closeSeries checks two series bucket by bucket: counts and sums equal,
// percentiles within a relative tolerance.
func closeSeries(t *testing.T, name string, got, want []diagnose.Bucket, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d buckets, want %d", name, len(got), len(want))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= tol*math.Abs(b)+1e-9 }
	nearPtr := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || near(*a, *b)) }
	bad := 0
	for i := range want {
		g, w := got[i], want[i]
		where := fmt.Sprintf("%s: bucket %d (%s)", name, i, w.Start.Format(time.DateTime))
		if !g.Start.Equal(w.Start) || g.Requests != w.Requests || g.InputTokens != w.InputTokens ||
			g.OutputTokens != w.OutputTokens || g.ColdStarts != w.ColdStarts || g.Errors != w.Errors || !near(g.RatePerSec, w.RatePerSec) {
			t.Errorf("%s: got %+v\nwant %+v", where, g, w)
			bad++
		}
		for _, p := range []struct {
			name string
			g, w diagnose.Percentiles
		}{{"ttft", g.TTFT, w.TTFT}, {"itl", g.ITL, w.ITL}} {
			if !nearPtr(p.g.P50, p.w.P50) || !nearPtr(p.g.P95, p.w.P95) || !nearPtr(p.g.P99, p.w.P99) {
				t.Errorf("%s: %s percentiles %v %v %v, want %v %v %v", where, p.name, deref(p.g.P50), deref(p.g.P95), deref(p.g.P99),
					deref(p.w.P50), deref(p.w.P95), deref(p.w.P99))
				bad++
			}
		}
		if len(g.P95) != len(w.P95) {
			t.Errorf("%s: p95 of %v, want of %v", where, g.P95, w.P95)
		}
		for c, v := range w.P95 {
			if !near(g.P95[c], v) {
				t.Errorf("%s: %s p95 %v, want %v", where, c, g.P95[c], v)
				bad++
			}
		}
		if bad > 10 {
			t.FailNow()
		}
	}
}
