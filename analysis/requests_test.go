package analysis_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A newest-first page is the same whether it comes from the window's
// newest rows alone (a span sized by the window's count, widened while it
// comes up short) or from the whole window. The rows are uneven (a burst
// of old ones makes the first span too short for some pages) and the
// newest were written twice (the count without FINAL sees both versions).
func TestRequestsNewestFirstPages(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	var rows, burst []telemetry.LLMRequest
	for i := 0; i < 120; i++ { // one every 5 minutes over 10 hours: 12 in the last hour
		rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: "chat", Model: "m", Start: now.Add(-time.Duration(i)*5*time.Minute - time.Second), TTFT: telemetry.Ptr(float64(i))})
	}
	for i := 0; i < 1000; i++ { // a burst 20 hours ago, one a second
		burst = append(burst, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("b%031x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: "chat", Model: "m", Start: now.Add(-20*time.Hour - time.Duration(i)*time.Second), TTFT: telemetry.Ptr(1.0)})
	}
	for _, b := range []*clickhouse.Batch{clickhouse.RequestsBatch(rows, nil, 1), clickhouse.RequestsBatch(burst, nil, 1),
		clickhouse.RequestsBatch(rows[:30], nil, 2)} {
		if err := srv.CH.Insert(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	all := append(append([]telemetry.LLMRequest{}, rows...), burst...)
	q := &analysis.Queries{CH: srv.CH}
	for _, c := range []struct{ limit, offset int }{{10, 0}, {5, 5}, {10, 5}, {20, 0}, {50, 0}, {20, 100}, {30, 110}, {10, 1115}} {
		got, total, err := q.Requests(ctx, analysis.RequestFilter{Project: 1, From: now.Add(-24 * time.Hour), To: now, Limit: c.limit, Offset: c.offset})
		if err != nil {
			t.Fatal(err)
		}
		if total != (analysis.Count{N: len(all)}) {
			t.Errorf("limit %d offset %d: total %+v, want exactly %d", c.limit, c.offset, total, len(all))
		}
		want := all[c.offset:min(c.offset+c.limit, len(all))]
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

// A list over more rows than a page can count under FINAL gives the stored
// sample's count scaled up, says it is an estimate, and reads the slow
// threshold from the sample too.
func TestRequestsTotalEstimatedFromSample(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	const n = 20_000
	insertEvenly(t, srv, now, n, 100*time.Millisecond, 1000)
	window := analysis.RequestFilter{Project: 1, From: now.Add(-time.Hour), To: now.Add(time.Second), Limit: 50}
	sampled := func(table, extra string) int {
		r, err := srv.CH.Query(ctx, "SELECT count() AS n FROM "+table+" FINAL WHERE project_id = 1"+extra)
		if err != nil {
			t.Fatal(err)
		}
		return int(r.Row(0).Int("n"))
	}
	for _, c := range []struct {
		name     string
		exactMax int
		want     analysis.Count
		within   float64 // relative error allowed against the true total
	}{
		{"exact", 0, analysis.Count{N: n}, 0},
		// The sparsest sample holding a sixteenth of exactMax rows or more.
		{"sample", 6_000, analysis.Count{N: sampled("llm_requests_sample", "") * 16, Estimated: true}, 0.15},
		{"1/64 sample", 2_000, analysis.Count{N: sampled("llm_requests_sample64", "") * 64, Estimated: true}, 0.3},
		{"level 0", 1_000, analysis.Count{N: sampled("llm_requests_sample", " AND sample_level = 0") * 256, Estimated: true}, 0.5},
	} {
		q := &analysis.Queries{CH: srv.CH, ExactCountRows: c.exactMax}
		got, total, err := q.Requests(ctx, window)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 50 {
			t.Errorf("%s: %d rows, want a page of 50", c.name, len(got))
		}
		if total != c.want {
			t.Errorf("%s: total %+v, want %+v", c.name, total, c.want)
		}
		if off := math.Abs(float64(total.N-n)) / n; off > c.within {
			t.Errorf("%s: total %d is %.0f %% off the true %d", c.name, total.N, off*100, n)
		}
		// Slow keeps requests above the p90: about a tenth of the window
		// (TTFT cycles through 0..999 ms, so the line sits near 900 ms).
		slow := window
		slow.Slow, slow.Limit = true, 1000
		got, _, err = q.Requests(ctx, slow)
		if err != nil {
			t.Fatal(err)
		}
		low := 1000.0
		for _, r := range got {
			low = min(low, *r.TTFT)
		}
		if len(got) != 1000 || low < 850 || low > 950 {
			t.Errorf("%s: slow filter kept %d rows from TTFT %.0f ms up, want a full page above ~900 ms", c.name, len(got), low)
		}
	}
}

// A list over 12 hours or more plans its total from the hourly name counts
// (no count of llm_requests runs), filtered as the list is: a quiet
// service's total stays exact next to a busy one that is estimated.
func TestRequestsTotalPlannedFromNames(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	insertBusyAndQuiet(t, srv, now, "")
	rec := &clickhouse.Recorder{}
	ctx = clickhouse.WithRecorder(ctx, rec)
	counted := func() (out []string) {
		for _, st := range rec.Statements() {
			if strings.HasPrefix(st.SQL, "SELECT count() AS n FROM llm_requests WHERE") {
				out = append(out, st.SQL)
			}
		}
		return out
	}
	q := &analysis.Queries{CH: srv.CH, ExactCountRows: 5_000}
	day := analysis.RequestFilter{Project: 1, From: now.Add(-24 * time.Hour), To: now.Add(time.Second), Limit: 10}
	for _, c := range []struct {
		service   string
		n         int
		estimated bool
	}{{"batch", 2000, false}, {"chat", 20_000, true}, {"", 22_000, true}} {
		f := day
		f.Service = c.service
		_, total, err := q.Requests(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if total.Estimated != c.estimated || !c.estimated && total.N != c.n || math.Abs(float64(total.N-c.n)) > 0.15*float64(c.n) {
			t.Errorf("service %q: total %+v, want %d (estimated %v)", c.service, total, c.n, c.estimated)
		}
	}
	if c := counted(); len(c) > 0 {
		t.Errorf("a 24-hour list counted llm_requests to plan its total: %s", c[0])
	}
	// A short window still counts llm_requests (whole hours would
	// overcount it by up to twice).
	hour := day
	hour.From = now.Add(-time.Hour)
	if _, _, err := q.Requests(ctx, hour); err != nil {
		t.Fatal(err)
	}
	if len(counted()) == 0 {
		t.Error("a 1-hour list planned its total from the hourly counts")
	}
}

// insertBusyAndQuiet stores a busy service, chat (20k requests over 22 h),
// and a quiet one, batch (2000 over 16.7 h, served by serverService).
func insertBusyAndQuiet(t *testing.T, srv storetest.Stores, now time.Time, serverService string) {
	t.Helper()
	insertEvenly(t, srv, now, 20_000, 4*time.Second, 1000)
	var quiet []telemetry.LLMRequest
	for i := range 2000 {
		quiet = append(quiet, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("q%031x", i+1), SpanID: "s", Service: "batch",
			ServerService: serverService, Model: "m", Start: now.Add(-time.Duration(i) * 30 * time.Second), TTFT: telemetry.Ptr(float64(i))})
	}
	if err := srv.CH.Insert(context.Background(), clickhouse.RequestsBatch(quiet, nil, 1)); err != nil {
		t.Fatal(err)
	}
}

// The values bubble-up ranks filter the list: tenant, route and prompt
// length, alone and together, over a day (its total would otherwise come
// from the hourly name counts, which know none of them) and sorted by
// TTFT (read from the stored top rows). Prompt lengths bucket as the
// diagnosis does.
func TestRequestsFilteredByBubbleUpValues(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	tenants, routes := []string{"acme", "initech", ""}, []string{"/chat", "/summarize"}
	prompts := []int64{10, 999, 1000, 3999, 4000, 20_000}
	var rows []telemetry.LLMRequest
	for i := range 360 { // one every 4 minutes over a day
		rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: "chat", Model: "m", Start: now.Add(-time.Duration(i)*4*time.Minute - time.Second), TTFT: telemetry.Ptr(float64(i % 97)),
			Tenant: tenants[i%3], Route: routes[i%2], InputTokens: telemetry.Ptr(prompts[i%6])})
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: srv.CH}
	for _, f := range []analysis.RequestFilter{
		{Tenant: "acme"}, {Route: "/summarize"}, {PromptLength: "<1k"}, {PromptLength: "1–4k"}, {PromptLength: ">16k"},
		{Tenant: "initech", Route: "/chat", PromptLength: "4–16k"}, {Tenant: "nobody"},
	} {
		var want []string
		for _, r := range rows {
			b, _ := diagnose.PromptLengthNamed(f.PromptLength)
			if (f.Tenant == "" || r.Tenant == f.Tenant) && (f.Route == "" || r.Route == f.Route) &&
				(f.PromptLength == "" || *r.InputTokens >= b.From && (b.To == 0 || *r.InputTokens < b.To)) {
				want = append(want, r.TraceID)
			}
		}
		for _, sort := range []string{"", "ttft"} {
			f := f
			f.Project, f.From, f.To, f.Sort, f.Desc, f.Limit = 1, now.Add(-24*time.Hour), now, sort, true, 200 // ≤ topPageMax: the sorted page comes from the top rows
			got, total, err := q.Requests(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if total.N != len(want) || len(got) != len(want) {
				t.Errorf("%+v sorted by %q: %d rows, total %+v, want %d", f, sort, len(got), total, len(want))
				continue
			}
			ids := map[string]bool{}
			for _, r := range got {
				ids[r.TraceID] = true
			}
			for _, id := range want {
				if !ids[id] {
					t.Errorf("%+v sorted by %q: request %s is missing", f, sort, id)
					break
				}
			}
		}
	}
}

// The cold-start wait filters and sorts the list: held at least N ms keeps
// exactly those requests (and counts them), sorted longest hold first;
// requests never held (no wait) never pass the filter.
func TestRequestsColdStartWaitFilterAndSort(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	var rows []telemetry.LLMRequest
	for i := range 200 {
		r := telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: "chat", Model: "m", Start: now.Add(-time.Duration(i) * 30 * time.Second), TTFT: telemetry.Ptr(100.0)}
		if i%4 == 0 {
			r.ColdStart, r.ColdStartWait = true, telemetry.Ptr(float64(500+i*97%9000))
		}
		rows = append(rows, r)
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: srv.CH}
	var want []float64
	for _, r := range rows {
		if r.ColdStartWait != nil && *r.ColdStartWait >= 5000 {
			want = append(want, *r.ColdStartWait)
		}
	}
	slices.Sort(want)
	slices.Reverse(want)
	if len(want) < 10 {
		t.Fatalf("only %d held requests of 5 s or more planted", len(want))
	}
	got, total, err := q.Requests(ctx, analysis.RequestFilter{Project: 1, From: now.Add(-2 * time.Hour), To: now.Add(time.Second),
		MinColdStartWait: 5000, Sort: "cold_start_wait", Desc: true, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if total.N != len(want) || len(got) != len(want) {
		t.Fatalf("%d rows, total %+v, want %d", len(got), total, len(want))
	}
	for i, r := range got {
		if r.ColdStartWait == nil || *r.ColdStartWait != want[i] {
			t.Fatalf("row %d holds %v, want %v (longest hold first)", i, fmtPtr(r.ColdStartWait), want[i])
		}
	}
}
