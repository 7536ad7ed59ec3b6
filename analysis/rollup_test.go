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
	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
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
// of every live request, percentiles within ±2.5 % of Go's over the same
// rows — after a rewrite that changed some requests (their old versions
// retracted in the same insert) and deleted others. Windows of 5-minute
// and of hourly buckets both start and end off the rollups' boundaries, so
// the ragged ends come from llm_requests.
func TestSeriesFromRollupsMatchesGo(t *testing.T) {
	srv := storetest.Open(t)
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
			wide := grain(c.window)
			var mine []telemetry.LLMRequest
			for _, x := range live {
				if x.Start.Before(wide.From) || !x.Start.Before(wide.To) {
					continue
				}
				if (f.service == "" || x.Service == f.service || x.ServerService == f.service) && (f.model == "" || x.Model == f.model) {
					mine = append(mine, x)
				}
			}
			want := diagnose.Series(diagnose.Input{Window: wide, Requests: mine})
			got, _, err := q.Series(ctx, analysis.DiagnoseRequest{Project: 1, Window: c.window, Service: f.service, Model: f.model})
			if err != nil {
				t.Fatal(err)
			}
			closeSeries(t, fmt.Sprintf("%s, service %q model %q", c.name, f.service, f.model), got, want, 0.025)
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

// An overview whose trend buckets are 5 minutes or wider comes from the
// rollups: per service (either side) and per model, counts, error rates,
// cold starts and token sums exactly those of the live requests (after a
// rewrite with retractions and tombstones), percentiles within ±2.5 % of the
// exact type-7 figures (the window widened to the rollups' 5 minutes), and every service's trend bucket likewise.
func TestOverviewFromRollupsMatchesRequests(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour)
	from, to := now.Add(-80*time.Hour), now
	rows := rollupRows(rand.New(rand.NewPCG(11, 12)), 8000, from, to, 1)
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	var changed, replaced, gone, live []telemetry.LLMRequest
	for i, r := range rows {
		switch i % 5 {
		case 0:
			c := r
			c.TTFT, c.Error, c.Model = telemetry.Ptr(deref0(r.TTFT)*3+1), !r.Error, "m3"
			changed, replaced, live = append(changed, c), append(replaced, r), append(live, c)
		case 1:
			gone = append(gone, r)
		default:
			live = append(live, r)
		}
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsRewriteBatch(changed, gone, replaced, 2)); err != nil {
		t.Fatal(err)
	}
	window := diagnose.Range{From: now.Add(-8*time.Hour - 3*time.Minute - 2*time.Second), To: now.Add(-4 * time.Minute)}
	o, err := (&analysis.Queries{CH: srv.CH}).Overview(ctx, analysis.OverviewRequest{Project: 1, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	if o.Bucket != 5*time.Minute || o.Sampled || !o.FromRollups {
		t.Fatalf("bucket %v, sampled %v, from rollups %v: the test needs 5-minute buckets read from the rollups", o.Bucket, o.Sampled, o.FromRollups)
	}
	near := func(what string, got *float64, want float64) {
		t.Helper()
		if math.IsNaN(want) != (got == nil) || got != nil && math.Abs(*got-want) > 0.025*math.Abs(want)+1e-9 {
			t.Errorf("%s: %v, want %v (±2.5 %%)", what, deref(got), want)
		}
	}
	type agg struct {
		n, errors, cold, in, out int64
		ttft, itl, inTok, outTok []float64
		models                   map[string]bool
		client, server           bool
		trend                    map[time.Time][]float64
	}
	services, models := map[string]*agg{}, map[string]*agg{}
	get := func(m map[string]*agg, k string) *agg {
		if m[k] == nil {
			m[k] = &agg{models: map[string]bool{}, trend: map[time.Time][]float64{}}
		}
		return m[k]
	}
	wide := grain(window)
	for _, r := range live {
		if r.Start.Before(wide.From) || !r.Start.Before(wide.To) {
			continue
		}
		var aggs []*agg
		for _, name := range []string{r.Service, r.ServerService} {
			if name != "" && (name != r.ServerService || r.ServerService != r.Service) {
				a := get(services, name)
				a.client = a.client || name == r.Service
				a.server = a.server || name == r.ServerService
				aggs = append(aggs, a)
			}
		}
		aggs = append(aggs, get(models, r.Model))
		for _, a := range aggs {
			a.n++
			a.errors += b2i(r.Error)
			a.cold += b2i(r.ColdStart)
			a.in += *r.InputTokens
			a.out += *r.OutputTokens
			a.ttft = append(a.ttft, deref0(r.TTFT))
			a.itl = append(a.itl, deref0(r.ITL))
			a.inTok = append(a.inTok, float64(*r.InputTokens))
			a.outTok = append(a.outTok, float64(*r.OutputTokens))
			a.models[r.Model] = true
			b := r.Start.Truncate(o.Bucket)
			a.trend[b] = append(a.trend[b], deref0(r.TTFT))
		}
	}
	if len(o.Services) != len(services) || len(o.Models) != len(models) {
		t.Fatalf("%d services and %d models, want %d and %d", len(o.Services), len(o.Models), len(services), len(models))
	}
	for _, s := range o.Services {
		w := services[s.Service]
		if w == nil {
			t.Fatalf("unexpected service %s", s.Service)
		}
		role := map[[2]bool]string{{true, false}: "client", {false, true}: "server", {true, true}: "both"}[[2]bool{w.client, w.server}]
		if int64(s.Requests) != w.n || s.ErrorRate != float64(w.errors)/float64(w.n) || int64(s.ColdStarts) != w.cold ||
			s.InputTokens != w.in || s.OutputTokens != w.out || s.Role != role || len(s.Models) != len(w.models) {
			t.Errorf("%s: %+v, want %d requests, %d errors, %d cold, %d/%d tokens, role %s, models %v", s.Service, s, w.n, w.errors, w.cold, w.in, w.out, role, w.models)
		}
		near(s.Service+" ttft p50", s.TTFT.P50, stats.Quantile(w.ttft, 0.5))
		near(s.Service+" ttft p95", s.TTFT.P95, stats.Quantile(w.ttft, 0.95))
		near(s.Service+" ttft p99", s.TTFT.P99, stats.Quantile(w.ttft, 0.99))
		near(s.Service+" itl p50", s.ITLP50, stats.Quantile(w.itl, 0.5))
		points := 0
		for i, b := range o.Buckets {
			want := math.NaN()
			if v := w.trend[b]; len(v) > 0 {
				want = stats.Quantile(v, 0.95)
				points++
			}
			near(fmt.Sprintf("%s trend at %s", s.Service, b.Format(time.TimeOnly)), s.Trend[i], want)
		}
		if points < 20 {
			t.Errorf("%s: only %d trend points to compare", s.Service, points)
		}
	}
	for _, m := range o.Models {
		w := models[m.Model]
		if w == nil || int64(m.Requests) != w.n || m.ErrorRate != float64(w.errors)/float64(w.n) || m.Provider != "p" {
			t.Errorf("model %s: %+v", m.Model, m)
			continue
		}
		near(m.Model+" ttft p99", m.TTFT.P99, stats.Quantile(w.ttft, 0.99))
		near(m.Model+" itl p50", m.ITLP50, stats.Quantile(w.itl, 0.5))
		near(m.Model+" input tokens p50", m.InputTokensP50, stats.Quantile(w.inTok, 0.5))
		near(m.Model+" output tokens p50", m.OutputTokensP50, stats.Quantile(w.outTok, 0.5))
	}
}

func deref0(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// grain is a window widened to whole 5 minutes, as rollup reads cover it.
func grain(w diagnose.Range) diagnose.Range {
	to := w.To.Truncate(5 * time.Minute)
	if to.Before(w.To) {
		to = to.Add(5 * time.Minute)
	}
	return diagnose.Range{From: w.From.Truncate(5 * time.Minute), To: to}
}
