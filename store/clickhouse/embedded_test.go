package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse/chtest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// TestTopKFilterOff guards the session setting that avoids the engine's
// top-K filter bug: ORDER BY ttft_ms DESC NULLS LAST LIMIT without FINAL
// failed with "Type mismatch … Expected: Float64. Got: Decimal64" on the
// bench's 1M-row table (4 parts per day partition) with chDB 26.5. The
// failure needs that part layout, so this checks the setting is in force
// and the query shape answers correctly.
func TestTopKFilterOff(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	r, err := s.Query(ctx, "SELECT value FROM system.settings WHERE name = 'use_top_k_dynamic_filtering'")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 || r.Row(0).String("value") != "0" {
		t.Fatalf("use_top_k_dynamic_filtering = %v, want 0", r.Rows)
	}
	now := time.Now().UTC()
	rows := make([]telemetry.LLMRequest, 3000)
	for i := range rows {
		rows[i] = telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprint("t", i), SpanID: "s", Service: "chat", Start: now.Add(-time.Duration(i) * time.Second)}
		if i%3 != 0 {
			rows[i].TTFT = telemetry.Ptr(float64(i))
		}
	}
	for part := 0; part < 3; part++ { // several parts, as live ingest makes
		if err := s.Insert(ctx, RequestsBatch(rows[part*1000:(part+1)*1000], nil, 1)); err != nil {
			t.Fatal(err)
		}
	}
	r, err = s.Query(ctx, "SELECT trace_id, ttft_ms FROM llm_requests WHERE project_id = ? AND start >= ? ORDER BY ttft_ms DESC NULLS LAST, start DESC LIMIT 5",
		uint32(1), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Row(0).Float("ttft_ms"); got != 2999 {
		t.Fatalf("top TTFT = %v, want 2999", got)
	}
}

// The session does not use projections as an index for other reads: with
// it on, every read filtering on start read the start column of
// llm_requests' TTFT and E2E projections first (a newest-first page 16 →
// 55 ms on the bench's 10M rows).
func TestProjectionFilteringOff(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	r, err := s.Query(context.Background(), "SELECT value FROM system.settings WHERE name = 'optimize_use_projection_filtering'")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 || r.Row(0).String("value") != "0" {
		t.Fatalf("optimize_use_projection_filtering = %v, want 0", r.Rows)
	}
}

// The engine's memory worker purges its allocator's freed pages beyond
// dirtyPagesCap: the setting it started with, read back as bytes of the
// memory limit it set itself, lands within 2 % of the cap.
func TestEmbeddedCapsDirtyPages(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	r, err := s.Query(context.Background(), `SELECT
		toFloat64(anyIf(value, name = 'memory_worker_purge_dirty_pages_threshold_ratio')) AS ratio,
		toFloat64(anyIf(value, name = 'max_server_memory_usage')) AS limit
		FROM system.server_settings`)
	if err != nil {
		t.Fatal(err)
	}
	ratio, limit := r.Row(0).Float("ratio"), r.Row(0).Float("limit")
	if got := ratio * limit; got < 0.98*dirtyPagesCap || got > 1.02*dirtyPagesCap {
		t.Errorf("the engine purges above %.0f MiB (ratio %g of a %.0f MiB limit; ours %d MiB), want %d MiB",
			got/(1<<20), ratio, limit/(1<<20), engineMemoryLimit()>>20, dirtyPagesCap>>20)
	}
}

// The engine starts no new merge while merges hold mergeMemorySoftLimit,
// and runs one merge per merge thread: the settings it started with, read
// back.
func TestEmbeddedCapsMergeMemory(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	r, err := s.Query(context.Background(), "SELECT toInt64(value) AS limit FROM system.server_settings WHERE name = 'merges_mutations_memory_usage_soft_limit'")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 || r.Row(0).Int("limit") != mergeMemorySoftLimit {
		t.Errorf("merges_mutations_memory_usage_soft_limit = %v, want %d", r.Rows, mergeMemorySoftLimit)
	}
	// One merge per merge thread, not the default two interleaved.
	if r, err = s.Query(context.Background(), "SELECT toInt64(value) AS ratio FROM system.server_settings WHERE name = 'background_merges_mutations_concurrency_ratio'"); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 || r.Row(0).Int("ratio") != mergesPerThread {
		t.Errorf("background_merges_mutations_concurrency_ratio = %v, want %d", r.Rows, mergesPerThread)
	}
}

// The engine's merge threads run at a lower priority than the receivers
// (mergeNice): while the background pool merges parts, its thread has
// nice 10 (the engine sets it for each merge and resets it after).
func TestEmbeddedNicesMerges(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	r, err := s.Query(ctx, "SELECT toInt64(value) AS nice FROM system.server_settings WHERE name = 'os_threads_nice_value_merge_mutate'")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 || r.Row(0).Int("nice") != mergeNice {
		t.Fatalf("os_threads_nice_value_merge_mutate = %v, want %d", r.Rows, mergeNice)
	}
	// The engine sets nice values only with CAP_SYS_NICE (bit 23 of the
	// effective capabilities); without it merges keep the default.
	if !chtest.CanNice() {
		t.Logf("no CAP_SYS_NICE: the engine runs merges at the default priority")
		return
	}
	// Parts large enough that merging them takes a while, so a sample
	// of the threads every few milliseconds finds one at work.
	if err := s.Exec(ctx, "CREATE TABLE nice_probe (x UInt64) ENGINE = MergeTree ORDER BY x"); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
		if err := s.Exec(ctx, "INSERT INTO nice_probe SELECT rand64() FROM numbers(2000000)"); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			for _, th := range chtest.Threads() {
				if strings.HasPrefix(th.Comm, "MergeMutate") {
					seen[th.Nice] = true
				}
			}
			if seen[mergeNice] {
				return
			}
		}
	}
	t.Errorf("no merge thread ran at nice %d in 90 s of inserts (nice values seen: %v)", mergeNice, seen)
}

// Statements run side by side on the pool's connections: one answers (and
// sees the other among the engine's running queries) while a long one is
// still running.
func TestStatementsRunInParallel(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	if n := len(s.b.(*embedded).all); n < 2 {
		t.Fatalf("%d connections, want at least 2", n)
	}
	long := make(chan error, 1)
	var longDone atomic.Bool
	go func() {
		_, err := s.Query(context.Background(), "SELECT sleepEachRow(0.5) FROM numbers(6) FORMAT Null")
		longDone.Store(true)
		long <- err
	}()
	var seen int64
	for seen < 2 {
		r, err := s.Query(context.Background(), "SELECT count() AS n FROM system.processes")
		if err != nil {
			t.Fatal(err)
		}
		if seen = r.Row(0).Int("n"); seen < 2 && longDone.Load() {
			t.Fatal("the long statement ended before another ran beside it")
		}
	}
	if longDone.Load() {
		t.Fatal("a statement saw the long one running only after it ended")
	}
	if err := <-long; err != nil {
		t.Fatal(err)
	}
}

// With background statements (inserts, assembler passes) on every
// connection they may take, a background statement waits for one of them,
// and an interactive one (a page's read) answers at once.
func TestInteractiveStatementsKeepAConnection(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	e := s.b.(*embedded)
	n := backgroundConns()
	if len(e.all) != n+1 {
		t.Fatalf("%d connections, want %d for background statements and one more", len(e.all), n)
	}
	ctx := context.Background()
	var longDone atomic.Int32
	done := make(chan error, n)
	for range n {
		go func() {
			// 6 s, a row per block (the engine sleeps at most 3 s a block).
			_, err := s.Query(ctx, "SELECT sleepEachRow(0.5) FROM numbers(12) SETTINGS max_block_size = 1 FORMAT Null")
			longDone.Add(1)
			done <- err
		}()
	}
	for running := int64(0); running < int64(n)+1; {
		r, err := s.Query(Interactive(ctx), "SELECT count() AS n FROM system.processes")
		if err != nil {
			t.Fatal(err)
		}
		running = r.Row(0).Int("n")
		time.Sleep(10 * time.Millisecond)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := s.Query(waitCtx, "SELECT 1 AS one"); err == nil {
		t.Error("a background statement ran beside the background statements already on every connection they may take")
	}
	r, err := s.Query(Interactive(ctx), "SELECT 1 AS one")
	if err != nil || r.Row(0).Int("one") != 1 {
		t.Fatalf("interactive statement: %v", err)
	}
	if longDone.Load() != 0 {
		t.Fatal("the long statements ended before the checks ran (a slow machine?): nothing was shown")
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// A readiness ping does not queue behind long statements (it runs on an
// idle connection, or with none idle trusts a recent one), but does report
// an engine whose every connection is stuck.
func TestPingWhileBusy(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	e := s.b.(*embedded)
	done := make(chan error, len(e.all))
	for range e.all {
		go func() {
			// Interactive: background statements leave a connection free.
			_, err := s.Query(Interactive(context.Background()), "SELECT sleepEachRow(0.5) FROM numbers(6) FORMAT Null")
			done <- err
		}()
	}
	for busy := 0; busy < len(e.all); {
		busy = 0
		for _, pc := range e.all {
			if pc.runningSince.Load() != 0 {
				busy++
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping while every connection runs a statement: %v", err)
	}
	for range e.all {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("ping when idle: %v", err)
	}
	// As if every connection's statement never ended.
	var held []*pooledConn
	for range e.all {
		pc := <-e.conns
		pc.runningSince.Store(time.Now().Add(-time.Hour).UnixNano())
		held = append(held, pc)
	}
	err := s.Ping(context.Background())
	for _, pc := range held {
		pc.runningSince.Store(0)
		e.conns <- pc
	}
	if err == nil {
		t.Fatal("ping of a wedged engine succeeded")
	}
}
