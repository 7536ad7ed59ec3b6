package analysis_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A busy window's overview reads its busiest services and models from the
// stored sample (scaled counts, close percentiles) and the quiet ones
// exactly, next to each other.
func TestOverviewSamplesOnlyBusyNames(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	from := now.Add(-time.Hour)
	var rows []telemetry.LLMRequest
	add := func(service, model string, n int, ttft func(i int) float64) {
		for i := 0; i < n; i++ {
			k := len(rows) + 1
			rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", k), SpanID: fmt.Sprintf("%016x", k),
				Service: service, ServerService: "vllm-" + model, Model: model, Start: from.Add(time.Duration(k) * 100 * time.Millisecond),
				TTFT: telemetry.Ptr(ttft(i)), InputTokens: telemetry.Ptr(int64(100)), OutputTokens: telemetry.Ptr(int64(10))})
		}
	}
	add("busy", "big-model", 30_000, func(i int) float64 { return float64(i%1000) + 1 }) // p95 ≈ 950
	add("quiet", "small-model", 40, func(i int) float64 { return float64(10 * (i + 1)) })
	// A rare model of the busy service, and a quiet service of the busy
	// model: each must keep exact figures in its own table.
	add("busy", "rare-model", 25, func(i int) float64 { return 5 })
	add("quiet-too", "big-model", 20, func(i int) float64 { return 7 })
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	// The hourly name counts the overview plans with hold every stored row,
	// whether written through the view or by the migration's backfill.
	namesMatch := func(what string) {
		t.Helper()
		want := count(t, srv.CH, "SELECT count() AS n FROM llm_requests")
		if got := count(t, srv.CH, "SELECT sum(rows) AS n FROM llm_request_names"); got != want {
			t.Errorf("%s: llm_request_names counts %d rows, llm_requests holds %d", what, got, want)
		}
		if got := count(t, srv.CH, "SELECT count(DISTINCT service, server_service, model) AS n FROM llm_request_names"); got != 4 {
			t.Errorf("%s: %d name combinations, want 4", what, got)
		}
	}
	namesMatch("written through the view")
	if err := srv.CH.Exec(ctx, "TRUNCATE TABLE llm_request_names"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CH.Exec(ctx, "DELETE FROM schema_migrations WHERE version = '0007_llm_request_names'"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CH.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	namesMatch("backfilled by the migration")

	// The pickers' service list reads the same counts: names, roles, models
	// and the last request's start, also once the counts are merged.
	last := map[string]time.Time{}
	for _, r := range rows {
		for _, name := range []string{r.Service, r.ServerService} {
			if r.Start.After(last[name]) {
				last[name] = r.Start
			}
		}
	}
	for _, optimize := range []bool{false, true} {
		if optimize {
			if err := srv.CH.Exec(ctx, "OPTIMIZE TABLE llm_request_names FINAL"); err != nil {
				t.Fatal(err)
			}
		}
		infos, err := (&analysis.Queries{CH: srv.CH}).Services(ctx, 1, from)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 6 {
			t.Fatalf("%d services, want 6: %+v", len(infos), infos)
		}
		for _, si := range infos {
			if !si.LastSeen.Equal(last[si.Service]) {
				t.Errorf("merged %v: %s last seen %v, want %v", optimize, si.Service, si.LastSeen, last[si.Service])
			}
			if si.Service == "busy" && (si.Role != "client" || fmt.Sprint(si.Models) != "[big-model rare-model]") {
				t.Errorf("busy: %+v", si)
			}
			if si.Service == "vllm-big-model" && si.Role != "server" {
				t.Errorf("vllm-big-model: %+v", si)
			}
		}
	}

	req := analysis.OverviewRequest{Project: 1, Window: diagnose.Range{From: from, To: now}}
	exact, err := (&analysis.Queries{CH: srv.CH}).Overview(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	byName := func(o analysis.Overview) map[string]analysis.ServiceOverview {
		m := map[string]analysis.ServiceOverview{}
		for _, s := range o.Services {
			m[s.Service] = s
		}
		return m
	}
	if exact.Sampled {
		t.Fatal("a 30k-request window was sampled with the default thresholds")
	}
	e := byName(exact)
	// 5000: the busy names read the whole sample table (1/16); 1000: they
	// are 16× over the threshold and read its level 0 (1/256).
	for _, sampleMin := range []int{5000, 1000} {
		t.Run(fmt.Sprintf("busy from %d requests", sampleMin), func(t *testing.T) {
			overviewTiers(t, e, byName, (&analysis.Queries{CH: srv.CH, OverviewExactRows: 1000, OverviewSampleMin: sampleMin}), req)
		})
	}
}

func overviewTiers(t *testing.T, e map[string]analysis.ServiceOverview, byName func(analysis.Overview) map[string]analysis.ServiceOverview,
	q *analysis.Queries, req analysis.OverviewRequest) {
	sampled, err := q.Overview(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !sampled.Sampled {
		t.Fatal("not sampled")
	}
	// The busy names' figures rest on ~1900 sampled requests at 1/16 and
	// ~120 at 1/256: the estimate's tolerance follows.
	tol := 0.15
	if q.OverviewSampleMin <= 1000 {
		tol = 0.4
	}
	s := byName(sampled)
	if len(e) != 6 || len(s) != 6 { // busy, quiet, quiet-too and the three inference services
		t.Fatalf("services: exact %d, sampled %d", len(e), len(s))
	}
	for _, name := range []string{"quiet", "vllm-small-model"} {
		if s[name].Requests != 40 || *s[name].TTFT.P95 != *e[name].TTFT.P95 || s[name].InputTokens != 4000 {
			t.Errorf("%s: sampled overview %d requests, p95 %v, %d input tokens; want it exact (40, %v, 4000)",
				name, s[name].Requests, *s[name].TTFT.P95, s[name].InputTokens, *e[name].TTFT.P95)
		}
	}
	for _, name := range []string{"busy", "vllm-big-model"} {
		got, want := s[name], e[name]
		if want.Requests < 30_000 || math.Abs(float64(got.Requests-want.Requests)) > tol*30_000 {
			t.Errorf("%s: %d requests from the sample, %d exactly", name, got.Requests, want.Requests)
		}
		if got.TTFT.P95 == nil || math.Abs(*got.TTFT.P95-*want.TTFT.P95) > 0.1**want.TTFT.P95 {
			t.Errorf("%s: TTFT p95 %v from the sample, %v exactly", name, got.TTFT.P95, *want.TTFT.P95)
		}
		if n := nonNil(got.Trend); n == 0 || n < nonNil(want.Trend)/2 {
			t.Errorf("%s: %d trend points from the sample, %d exactly", name, n, nonNil(want.Trend))
		}
	}
	if sampled.Services[0].Service != "busy" && sampled.Services[0].Service != "vllm-big-model" {
		t.Errorf("busiest first: %s", sampled.Services[0].Service)
	}
	models := map[string]analysis.ModelOverview{}
	for _, m := range sampled.Models {
		models[m.Model] = m
	}
	if s["quiet-too"].Requests != 20 || *s["quiet-too"].TTFT.P50 != 7 {
		t.Errorf("quiet-too: %+v, want its 20 requests exactly", s["quiet-too"])
	}
	if models["small-model"].Requests != 40 || models["rare-model"].Requests != 25 || *models["rare-model"].TTFT.P95 != 5 ||
		math.Abs(float64(models["big-model"].Requests-30_020)) > tol*30_000 {
		t.Errorf("models: %+v", sampled.Models)
	}
}

func nonNil(xs []*float64) int {
	n := 0
	for _, x := range xs {
		if x != nil {
			n++
		}
	}
	return n
}
