package assembler

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// rollupTotals are a table's figures per (service, server_service, model,
// provider), groups and histogram buckets that net to nothing left out.
func rollupTotals(t *testing.T, ch *clickhouse.Store, from string, hists []string) map[string]string {
	t.Helper()
	r, err := ch.Query(context.Background(), "SELECT service, server_service, model, provider, "+clickhouse.RollupMerge(hists)+
		" FROM "+from+" GROUP BY service, server_service, model, provider")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i := range r.Len() {
		row := r.Row(i)
		if row.Int("requests") == 0 {
			continue
		}
		v := fmt.Sprint(row.Int("requests"), row.Int("errors"), row.Int("cold_starts"), row.Int("input_tokens_sum"), row.Int("output_tokens_sum"))
		for _, h := range hists {
			m, _ := row.Value("h_" + h).(map[string]any)
			m = maps.Clone(m)
			maps.DeleteFunc(m, func(_ string, n any) bool { return fmt.Sprint(n) == "0" })
			v += fmt.Sprintf(" %s=%v", h, m)
		}
		out[row.String("service")+"|"+row.String("server_service")+"|"+row.String("model")+"|"+row.String("provider")] = v
	}
	return out
}

// assertRollupsInStep checks both rollup tiers, and the episode
// detector's per-minute rollup, against the live requests aggregated the
// same way.
func assertRollupsInStep(t *testing.T, ch *clickhouse.Store, stage string) {
	t.Helper()
	live := func(hists []string) map[string]string {
		return rollupTotals(t, ch, "(SELECT service, server_service, model, provider, "+clickhouse.RollupFromRequests("toInt64(1)", hists)+
			" FROM llm_requests FINAL GROUP BY service, server_service, model, provider)", hists)
	}
	want := live(clickhouse.RollupHistograms)
	if len(want) == 0 {
		t.Fatalf("%s: no live requests", stage)
	}
	for _, tier := range clickhouse.RollupTiers {
		if got := rollupTotals(t, ch, tier.Table, clickhouse.RollupHistograms); !maps.Equal(got, want) {
			t.Errorf("%s: %s holds\n%v\nlive requests are\n%v", stage, tier.Table, got, want)
		}
	}
	want = live(clickhouse.EpisodeHistograms)
	if got := rollupTotals(t, ch, clickhouse.EpisodeRollup, clickhouse.EpisodeHistograms); !maps.Equal(got, want) {
		t.Errorf("%s: %s holds\n%v\nlive requests are\n%v", stage, clickhouse.EpisodeRollup, got, want)
	}
}

// The assembler keeps the rollups equal to the live requests as a trace
// grows: a server span first (a server-only row), then its client span
// (the row becomes the client's: the server-only one is tombstoned), then
// a late root span (the row changes: route and pre-inference time), then a
// span that changes nothing (no rewrite at all).
func TestAssemblerKeepsRollupsInStep(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	server := func(trace string, start time.Time) telemetry.Span {
		return telemetry.Span{ProjectID: 1, TraceID: trace, SpanID: "s1", ParentSpanID: "c1", Service: "vllm", Instance: "vllm-0",
			Name: "generate", Start: start.Add(20 * time.Millisecond), End: start.Add(900 * time.Millisecond), StatusCode: "ok",
			LLM: telemetry.LLMCall{Role: telemetry.LLMServer, Provider: "vllm", Model: "gpt", QueueTime: telemetry.Ptr(30 * time.Millisecond),
				PrefillTime: telemetry.Ptr(70 * time.Millisecond), ServerTTFT: telemetry.Ptr(110 * time.Millisecond),
				InputTokens: telemetry.Ptr(int64(900)), OutputTokens: telemetry.Ptr(int64(40))}}
	}
	const traces = 40
	start := func(i int) time.Time { return now.Add(-time.Duration(i) * 7 * time.Minute) }
	trace := func(i int) string { return fmt.Sprintf("%032x", i+1) }
	var spans []telemetry.Span
	for i := range traces {
		spans = append(spans, server(trace(i), start(i).Add(50*time.Millisecond)))
	}
	a.mustInsert(t, spans...)
	a.mustStep(t)
	assertRollupsInStep(t, a.CH, "server spans only")

	spans = spans[:0]
	for i := range traces {
		spans = append(spans, agentSpan(trace(i), "c1", "root", start(i).Add(50*time.Millisecond), true))
	}
	a.mustInsert(t, spans...)
	a.mustStep(t)
	assertRollupsInStep(t, a.CH, "client spans")

	spans = spans[:0]
	for i := range traces / 2 {
		spans = append(spans, agentSpan(trace(i), "root", "", start(i), false))
	}
	a.mustInsert(t, spans...)
	a.mustStep(t)
	assertRollupsInStep(t, a.CH, "roots")

	rows := func() int64 {
		r, err := a.CH.Query(ctx, "SELECT count() AS n FROM llm_requests")
		if err != nil {
			t.Fatal(err)
		}
		return r.Row(0).Int("n")
	}
	before := rows()
	tool := agentSpan(trace(0), "tool", "root", start(0).Add(2*time.Second), false)
	tool.Name = "tool.search"
	a.mustInsert(t, tool)
	a.mustStep(t)
	assertRollupsInStep(t, a.CH, "a span after the call")
	if after := rows(); after != before {
		t.Errorf("a pass that changed no request wrote %d rows", after-before)
	}
}

// Migrations 0011 and 0018 fill the rollups from the requests stored before
// them (live rows only), and running them again (a start interrupted after the copy)
// leaves them equal to the live requests instead of counting twice. Rows
// written here without retractions (a later version over an earlier one)
// put the views' sums out of step first, so only the copy can mend them.
func TestRollupBackfill(t *testing.T) {
	a := openAssembler(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var v1, v2, gone []telemetry.LLMRequest
	for i := range 500 {
		r := telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: "c1", Service: "chat", Model: "gpt",
			Provider: "openai", Start: now.Add(-time.Duration(i) * time.Minute), TTFT: telemetry.Ptr(float64(100 + i)),
			InputTokens: telemetry.Ptr(int64(i))}
		v1 = append(v1, r)
		if i%2 == 1 && i < 100 {
			gone = append(gone, r)
		}
		if i%2 == 0 {
			r.TTFT = telemetry.Ptr(float64(5000 + i))
			v2 = append(v2, r)
		}
	}
	for _, b := range []*clickhouse.Batch{clickhouse.RequestsBatch(v1, nil, 1), clickhouse.RequestsBatch(v2, gone, 2)} {
		if err := a.CH.Insert(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := a.CH.Exec(ctx, "DELETE FROM schema_migrations WHERE version IN ('0011_llm_request_rollups', '0018_llm_request_rollup_1m')"); err != nil {
			t.Fatal(err)
		}
		if err := a.CH.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		assertRollupsInStep(t, a.CH, "after the migration")
	}
}

// A pass cut short after writing rows (its node died before it saved its
// watermark) leaves rows of traces first stored since the watermark. The
// next pass takes those traces again as fresh ones, and must still read
// their rows: written again, they would count twice in the rollups.
func TestAssemblerRetakesUnfinishedPass(t *testing.T) {
	a := openAssembler(t)
	a.defaults()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	for i := range 3 {
		trace := fmt.Sprintf("t%d", i)
		a.mustInsert(t, agentSpan(trace, "root", "", now, false), agentSpan(trace, "c1", "root", now.Add(time.Millisecond), true))
	}
	wm, err := a.watermark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	upper := time.Now()
	if err := a.markWriting(ctx, upper); err != nil {
		t.Fatal(err)
	}
	// The cut-short pass wrote the last insert's trace's rows, then its
	// node died.
	if err := a.assemble(ctx, pass{after: wm, upper: upper}, 1, []string{"t2"}, false); err != nil {
		t.Fatal(err)
	}
	if _, unfinished, err := a.progress(ctx); err != nil || !unfinished {
		t.Fatalf("progress after a pass cut short: unfinished %v (%v), want true", unfinished, err)
	}
	// The passes after it are smaller (one insert each): each one's own
	// mark must not hide how far the cut-short pass may have written.
	a.MaxSpans = 2
	for pass := 0; ; pass++ {
		n, more, err := a.step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 && more || pass > 3 {
			t.Fatalf("pass %d took %d traces (more %v), want one insert's trace a pass", pass, n, more)
		}
		if !more {
			break
		}
	}
	if _, unfinished, err := a.progress(ctx); err != nil || unfinished {
		t.Fatalf("progress after the passes that took the cut-short one's inserts: unfinished %v (%v), want false", unfinished, err)
	}
	for i := range 3 {
		if rows := liveRows(t, a, fmt.Sprintf("t%d", i)); len(rows) != 1 {
			t.Errorf("trace t%d: rows %+v, want one", i, rows)
		}
	}
	assertRollupsInStep(t, a.CH, "after the pass that took the cut-short one's traces again")
}
