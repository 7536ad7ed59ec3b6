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
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// The series the engine computes (every request, in SQL) is the series Go
// computes from the same rows: same buckets, counts, type-7 percentiles,
// token sums, with unknown parts left out. The window starts off a bucket
// boundary, so its first bucket must not take the baseline's requests.
func TestSeriesFromEngineMatchesGo(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Minute)
	window := diagnose.Range{From: now.Add(-37*time.Minute - 13*time.Second), To: now}
	r := rand.New(rand.NewPCG(5, 6))
	maybe := func(p float64, v float64) *float64 {
		if r.Float64() < p {
			return nil
		}
		return telemetry.Ptr(math.Round(v*1000) / 1000)
	}
	var rows []telemetry.LLMRequest
	for i := range 3000 {
		start := window.From.Add(-40 * time.Minute).Add(time.Duration(r.Int64N(int64(window.To.Sub(window.From) + 40*time.Minute))))
		in, out := int64(r.IntN(5000)), int64(r.IntN(800))
		req := telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: "chat", Model: "m", Start: start,
			TTFT: maybe(0.05, r.ExpFloat64()*400), Queue: maybe(0.3, r.ExpFloat64()*80), Prefill: maybe(0.3, r.ExpFloat64()*120),
			Network: maybe(0.5, r.Float64()*20), Decode: maybe(0.1, r.ExpFloat64()*2000), E2E: maybe(0, 500+r.ExpFloat64()*2000),
			ITL: maybe(0.2, 10+r.Float64()*30), PreInference: maybe(0.6, r.ExpFloat64()*50),
			InputTokens: &in, OutputTokens: &out, ColdStart: i%97 == 0, Error: i%53 == 0}
		if req.ColdStart {
			req.ColdStartWait = telemetry.Ptr(3000 + r.Float64()*1000)
		}
		rows = append(rows, req)
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	// Go's series over every row is the reference. Loading a sample of the
	// window (MaxRows 300 of ~1400) with the engine computing the series
	// must give it exactly; so must loading every row (the series then
	// comes from them, in Go). A series over the sample would not.
	want := diagnose.Series(diagnose.Input{Window: window, Requests: rows})
	for _, q := range []*analysis.Queries{{CH: srv.CH, MaxRows: 300}, {CH: srv.CH}} {
		got, _, err := q.Series(ctx, analysis.DiagnoseRequest{Project: 1, Window: window, Service: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		sameSeries(t, fmt.Sprintf("MaxRows %d", q.MaxRows), got, want)
	}
	// Above SeriesExactMax the series is the loaded sample's: close, not equal.
	got, _, err := (&analysis.Queries{CH: srv.CH, MaxRows: 300, SeriesExactRows: 1000}).Series(ctx, analysis.DiagnoseRequest{Project: 1, Window: window, Service: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	differs := len(got) != len(want)
	for i := 0; !differs && i < len(want); i++ {
		differs = got[i].Requests != want[i].Requests || fmt.Sprint(deref(got[i].TTFT.P99)) != fmt.Sprint(deref(want[i].TTFT.P99))
	}
	if !differs {
		t.Errorf("a window over SeriesExactRows still got the engine's series")
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func sameSeries(t *testing.T, name string, got, want []diagnose.Bucket) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d buckets, want %d", name, len(got), len(want))
	}
	same := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	samePtr := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || same(*a, *b)) }
	for i := range want {
		g, w := got[i], want[i]
		where := fmt.Sprintf("%s: bucket %d (%s)", name, i, w.Start.Format(time.TimeOnly))
		if !g.Start.Equal(w.Start) || g.Requests != w.Requests || !same(g.RatePerSec, w.RatePerSec) || g.InputTokens != w.InputTokens ||
			g.OutputTokens != w.OutputTokens || g.ColdStarts != w.ColdStarts || g.Errors != w.Errors {
			t.Errorf("%s: got %+v\nwant %+v", where, g, w)
			continue
		}
		for _, p := range []struct {
			name string
			g, w diagnose.Percentiles
		}{{"ttft", g.TTFT, w.TTFT}, {"itl", g.ITL, w.ITL}} {
			if !samePtr(p.g.P50, p.w.P50) || !samePtr(p.g.P95, p.w.P95) || !samePtr(p.g.P99, p.w.P99) {
				t.Errorf("%s: %s percentiles differ", where, p.name)
			}
		}
		if len(g.P95) != len(w.P95) {
			t.Errorf("%s: p95 of %v, want of %v", where, g.P95, w.P95)
		}
		for c, v := range w.P95 {
			if !same(g.P95[c], v) {
				t.Errorf("%s: %s p95 %v, want %v", where, c, g.P95[c], v)
			}
		}
	}

}

// The series alone (no baseline analysis) still carries the replica count
// of a scale event from before the window, for both ways of computing it:
// from loaded rows and from the engine's buckets.
func TestSeriesCarriesReplicasFromBeforeTheWindow(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Minute)
	window := diagnose.Range{From: now.Add(-30 * time.Minute), To: now}
	var rows []telemetry.LLMRequest
	for i := range 600 {
		rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: "chat", ServerService: "vllm", Model: "m", Start: window.From.Add(time.Duration(i) * 3 * time.Second), TTFT: telemetry.Ptr(100.0)})
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	scale := telemetry.Event{ProjectID: 1, Time: window.From.Add(-20 * time.Minute), Kind: telemetry.EventScale, Service: "vllm",
		FromReplicas: telemetry.Ptr(int32(2)), ToReplicas: telemetry.Ptr(int32(5)), Reason: "HPA", Source: "test"}
	if err := srv.CH.Insert(ctx, clickhouse.EventsBatch([]telemetry.Event{scale})); err != nil {
		t.Fatal(err)
	}
	for _, maxRows := range []int{0, 100} {
		got, _, err := (&analysis.Queries{CH: srv.CH, MaxRows: maxRows}).Series(ctx, analysis.DiagnoseRequest{Project: 1, Window: window, Service: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[0].Replicas == nil || *got[0].Replicas != 5 || got[0].Requests == 0 {
			t.Errorf("max rows %d: first bucket %+v, want 5 replicas carried from before the window", maxRows, got)
		}
	}
}
