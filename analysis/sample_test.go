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

// A window larger than MaxRows is diagnosed on a sample, but the answer
// still reports how many requests the window and baseline really held.
func TestDiagnoseSampleKeepsTrueCounts(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	window := diagnose.Range{From: now.Add(-10 * time.Minute), To: now}
	var rows []telemetry.LLMRequest
	for i := 0; i < 900; i++ {
		at := window.From.Add(-30 * time.Minute).Add(time.Duration(i) * 3 * time.Second) // 600 in the 30 min baseline
		if i >= 600 {
			at = window.From.Add(time.Duration(i-600) * 2 * time.Second) // 300 in the 10 min window
		}
		rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: "chat", Model: "m", Start: at, TTFT: telemetry.Ptr(100 + float64(i%7)), E2E: telemetry.Ptr(900.0)})
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: srv.CH, MaxRows: 100}
	d, err := q.Diagnose(ctx, analysis.DiagnoseRequest{Project: 1, Window: window, Service: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Requests != 300 || d.BaselineRequests != 600 {
		t.Fatalf("requests %d / baseline %d, want 300 / 600", d.Requests, d.BaselineRequests)
	}
	// The hash sample holds about MaxRows of the window's requests.
	if d.AnalyzedRequests < 50 || d.AnalyzedRequests > 160 {
		t.Errorf("analyzed %d requests, want a sample of about 100", d.AnalyzedRequests)
	}
	// Counts and rates in the series stand for the whole window, not the
	// sample: the window's 300 requests, 0.5 per second (counts are
	// rounded per bucket, rates are not).
	total, rate := 0, 0.0
	for _, b := range d.Series {
		total += b.Requests
		rate += b.RatePerSec * d.BucketSeconds
	}
	if total < 270 || total > 330 || rate < 299 || rate > 301 {
		t.Errorf("sampled series sums to %d requests (%.0f by rate), want about 300", total, rate)
	}
	if d.Answers.Compare == nil || d.Answers.Compare.AfterRequests != 300 || d.Answers.Compare.BeforeRequests != 600 {
		t.Errorf("comparison counts: %+v, want 600 before, 300 after", d.Answers.Compare)
	}
	c, err := q.Compare(ctx, 1, diagnose.Range{From: window.From.Add(-30 * time.Minute), To: window.From}, window, "chat", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.BeforeRequests != 600 || c.AfterRequests != 300 {
		t.Errorf("compare counts %d → %d, want 600 → 300", c.BeforeRequests, c.AfterRequests)
	}
	// Series reads only the window (no baseline load): its buckets hold the
	// window's sampled requests and nothing from before it.
	buckets, _, err := (&analysis.Queries{CH: srv.CH}).Series(ctx, analysis.DiagnoseRequest{Project: 1, Window: window, Service: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range buckets {
		n += b.Requests
	}
	if n != 300 {
		t.Errorf("series counts %d requests in the window, want 300", n)
	}
	if d.Verdict != diagnose.VerdictHealthy {
		t.Errorf("steady traffic diagnosed as %s: %s", d.Verdict, d.Summary)
	}
}

// Long windows read the stored sample (llm_requests_sample): it holds
// exactly the requests whose hash falls in its share, follows later
// versions and tombstones as llm_requests does, and a diagnosis read from
// it reports an estimated count close to the truth.
func TestDiagnoseReadsStoredSample(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	window := diagnose.Range{From: now.Add(-10 * time.Minute), To: now}
	const n = 20_000
	rows := make([]telemetry.LLMRequest, n)
	for i := range rows {
		rows[i] = telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: "chat", Model: "m", Start: window.From.Add(time.Duration(i) * 30 * time.Millisecond),
			TTFT: telemetry.Ptr(100 + float64(i%7)), E2E: telemetry.Ptr(900.0)}
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	// A later version of the first 2000 rows (slower) and a tombstone for
	// the next 1000: the sample must show the same final state.
	var later []telemetry.LLMRequest
	for i := 0; i < 2000; i++ {
		r := rows[i]
		r.TTFT = telemetry.Ptr(5000.0)
		later = append(later, r)
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(later, rows[2000:3000], 2)); err != nil {
		t.Fatal(err)
	}
	sameAsMain := func(what string) {
		t.Helper()
		for _, c := range []struct{ main, table, sample string }{
			{"cityHash64(trace_id, span_id) % 4096 < 256", "llm_requests_sample", "1"},
			{"cityHash64(trace_id, span_id) % 4096 < 16", "llm_requests_sample", "sample_level = 0"},
			{"cityHash64(trace_id, span_id) % 4096 < 256 AND ttft_ms = 5000", "llm_requests_sample", "ttft_ms = 5000"},
			{"cityHash64(trace_id, span_id) % 4096 < 64", "llm_requests_sample64", "1"},
			{"cityHash64(trace_id, span_id) % 4096 < 64 AND ttft_ms = 5000", "llm_requests_sample64", "ttft_ms = 5000"},
		} {
			want := count(t, srv.CH, "SELECT count() AS n FROM llm_requests FINAL WHERE "+c.main)
			got := count(t, srv.CH, "SELECT count() AS n FROM "+c.table+" FINAL WHERE "+c.sample)
			if got != want || want == 0 {
				t.Errorf("%s: %s has %d rows where %s, llm_requests %d", what, c.table, got, c.sample, want)
			}
		}
	}
	sameAsMain("written through the views")

	// The migrations' backfills rebuild the samples of rows stored before
	// them: 0005's from llm_requests, 0017's from the 1/16 sample.
	for _, m := range []struct{ table, version string }{
		{"llm_requests_sample", "0005_llm_requests_sample"},
		{"llm_requests_sample64", "0017_llm_requests_sample64"},
	} {
		if err := srv.CH.Exec(ctx, "TRUNCATE TABLE "+m.table); err != nil {
			t.Fatal(err)
		}
		if err := srv.CH.Exec(ctx, "DELETE FROM schema_migrations WHERE version = ?", m.version); err != nil {
			t.Fatal(err)
		}
		if err := srv.CH.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sameAsMain("backfilled by the migrations")

	live := n - 1000
	// 23k stored rows: 1000 keeps ~180 of 4096 hash values (the 1/16
	// table), 300 ~54 (the 1/64 one), 40 ~8 (level 0 of the 1/16 one).
	for _, maxRows := range []int{1000, 300, 40} {
		// The stored sample is read above SeriesExactMax rows, where no
		// series counts the window exactly: so here too.
		d, err := (&analysis.Queries{CH: srv.CH, MaxRows: maxRows, SeriesExactRows: 100}).Diagnose(ctx, analysis.DiagnoseRequest{Project: 1, Window: window, Service: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		if !d.RequestsEstimated || d.AnalyzedRequests < maxRows/3 || d.AnalyzedRequests > 2*maxRows {
			t.Errorf("max %d rows: analyzed %d (estimated %v), want a stored sample of about %d", maxRows, d.AnalyzedRequests, d.RequestsEstimated, maxRows)
		}
		if lo, hi := live*6/10, live*14/10; d.Requests < lo || d.Requests > hi {
			t.Errorf("max %d rows: estimated %d requests, want %d ± 40 %%", maxRows, d.Requests, live)
		}
	}
	for _, c := range []struct {
		limit  int
		table  string
		level0 bool
	}{
		{1000, "llm_requests_sample", false},
		{250, "llm_requests_sample64", false},
		{40, "llm_requests_sample", true},
	} {
		if plan := analysis.PlanSample(live, c.limit); plan.Table != c.table || plan.Level0 != c.level0 {
			t.Errorf("plan for %d of %d rows: %+v, want %s (level 0: %v)", c.limit, live, plan, c.table, c.level0)
		}
	}
	if plan := analysis.PlanSample(live, 5000); plan.Table != "llm_requests" || !plan.Sampled() {
		t.Errorf("plan for 5000 of %d rows: %+v", live, plan)
	}
}

func count(t *testing.T, ch *clickhouse.Store, sql string) int {
	t.Helper()
	r, err := ch.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	return int(r.Row(0).Int("n"))
}

// A window read as a hash sample of llm_requests holding enough rows is
// sized by scaling the sample up (no second pass under FINAL to count it),
// and says so; a small sample is counted exactly.
func TestSampledWindowSizeEstimated(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	const n = 40_000
	insertEvenly(t, srv, now, n, 50*time.Millisecond, 900)
	window := diagnose.Range{From: now.Add(-time.Hour), To: now.Add(time.Second)}
	for _, c := range []struct {
		maxRows   int
		estimated bool
	}{
		{15_000, true},
		// ~9k rows, each kept with p ≈ 0.22: the scaled-up size's standard
		// error is ~0.9 %, so it is estimated rather than counted.
		{9_000, true},
		// ~5k rows at p ≈ 0.125: ~1.3 %, counted under FINAL.
		{5_000, false},
	} {
		cmp, err := (&analysis.Queries{CH: srv.CH, MaxRows: c.maxRows}).Compare(ctx, 1, diagnose.Range{From: window.From.Add(-time.Hour), To: window.From}, window, "chat", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if cmp.RequestsEstimated != c.estimated {
			t.Errorf("max %d rows: estimated %v, want %v", c.maxRows, cmp.RequestsEstimated, c.estimated)
		}
		if off := math.Abs(float64(cmp.AfterRequests-n)) / n; off > 0.03 || !c.estimated && cmp.AfterRequests != n {
			t.Errorf("max %d rows: window of %d requests, want %d", c.maxRows, cmp.AfterRequests, n)
		}
	}
}

// A window asking for more rows than the stored sample keeps reads the
// whole stored sample once it holds enough of them (a sixteenth of the
// reading), and sizes the window from it.
func TestMidSizeWindowReadsStoredSample(t *testing.T) {
	for _, c := range []struct {
		rough, limit int
		table        string
	}{
		{143_000, 20_000, "llm_requests_sample"}, // 24 h at 1M: ~8.9k stored
		{143_000, 10_000, "llm_requests_sample"}, // its baseline
		{100_000, 20_000, "llm_requests"},        // 6.25k stored: too few to size it
		{30_000, 20_000, "llm_requests"},         // 1.9k stored: under 40 % of the rows asked for
	} {
		plan := analysis.PlanSample(c.rough, c.limit)
		if plan.Table != c.table || plan.Level0 || (c.table == "llm_requests_sample") != (plan.Keep == 256) {
			t.Errorf("plan for %d of %d rows: %+v, want %s", c.limit, c.rough, plan, c.table)
		}
	}
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	const n = 160_000 // ~10k in the stored sample
	insertEvenly(t, srv, now, n, 20*time.Millisecond, 900)
	window := diagnose.Range{From: now.Add(-time.Hour), To: now.Add(time.Second)}
	stored := count(t, srv.CH, "SELECT count() AS n FROM llm_requests_sample FINAL WHERE project_id = 1")
	cmp, err := (&analysis.Queries{CH: srv.CH}).Compare(ctx, 1, diagnose.Range{From: window.From.Add(-time.Hour), To: window.From}, window, "chat", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cmp.AfterRequests != stored*16 || !cmp.RequestsEstimated {
		t.Errorf("window of %d requests (estimated %v), want the stored sample's %d × 16", cmp.AfterRequests, cmp.RequestsEstimated, stored)
	}
	if off := math.Abs(float64(cmp.AfterRequests-n)) / n; off > 0.05 {
		t.Errorf("window of %d requests is %.1f %% off the true %d", cmp.AfterRequests, off*100, n)
	}
}

// insertEvenly stores n requests of service chat, one every step back from
// now, their TTFT cycling through 0 … cycle-1 ms.
func insertEvenly(t *testing.T, srv storetest.Stores, now time.Time, n int, step time.Duration, cycle int) {
	t.Helper()
	rows := make([]telemetry.LLMRequest, n)
	for i := range rows {
		rows[i] = telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: "chat", Model: "m", Start: now.Add(-time.Duration(i) * step), TTFT: telemetry.Ptr(float64(i % cycle))}
	}
	if err := srv.CH.Insert(context.Background(), clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
}
