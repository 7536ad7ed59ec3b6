package main

import (
	"context"
	"math"
	"os"
	"testing"
	"time"
)

// The benches on a tiny scale: they must produce non-zero figures and lose
// no acknowledged span. Real numbers come from `make bench-ingest` and
// `make bench-query`.

func TestQueryBenchSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := runQuery(ctx, queryOptions{Rows: []int{3000}, Reps: 1, HTTP: true, GaugeInterval: 30 * time.Minute,
		Windows: []string{"1h", "7d"}, WhatIf: true, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Sizes) != 1 {
		t.Fatalf("%d sizes measured, want 1", len(rep.Sizes))
	}
	s := rep.Sizes[0]
	if s.Load.Rows != 3000 || s.Load.Took <= 0 || s.Points == 0 {
		t.Errorf("load: %+v, %d points", s.Load, s.Points)
	}
	if len(s.Ops) != 7*2 {
		t.Fatalf("%d measurements, want 14 (6 pages and the episode detection × 2 windows)", len(s.Ops))
	}
	for _, op := range s.Ops {
		if op.Err != "" {
			t.Errorf("%s %s: %s", op.Op, op.Window, op.Err)
			continue
		}
		// The overview has no API of its own: its page is timed instead. The
		// episode detection is the worker's, with no page at all.
		page := op.Op != "episodes"
		if median(op.API) <= 0 || median(op.SQL) <= 0 || median(op.Engine) <= 0 || page && median(op.Page) <= 0 ||
			page && op.Op != "overview" && median(op.HTTP) <= 0 || op.Op == "diagnose" && median(op.Deferred) <= 0 {
			t.Errorf("%s %s: a zero timing: API %v SQL %v engine %v HTTP %v page %v deferred %v", op.Op, op.Window, op.API, op.SQL, op.Engine, op.HTTP, op.Page, op.Deferred)
		}
		// The main statement is the longest, which on a busy machine can
		// be one that rightly reads nothing (compare's week before a 7 d
		// window of a 7-day dataset): the op as a whole must read rows.
		if op.Rows == 0 {
			t.Errorf("%s %s: the op's statements read no rows", op.Op, op.Window)
		}
	}
	if len(s.WhatIfs) == 0 {
		t.Error("no proposed fix timed")
	}
	for _, w := range s.WhatIfs {
		if w.Err != "" || len(w.Before) == 0 || len(w.After) == 0 {
			t.Errorf("proposed fix %q: %d and %d timings, error %q", w.Name, len(w.Before), len(w.After), w.Err)
		}
	}
	if s.MemLoaded.RSS <= 0 || s.MemQuery.Peak <= 0 {
		t.Errorf("memory not read: %+v %+v", s.MemLoaded, s.MemQuery)
	}
	printQuery(testWriter{t}, rep)
}

func TestIngestBenchSmoke(t *testing.T) {
	// A guard against a hang, not a speed target: the run builds and starts
	// the server, which took over 3 minutes on a machine busy with other jobs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := runIngest(ctx, ingestOptions{Duration: time.Second, LatencyDuration: time.Second, Concurrency: 4,
		Batch: 400, EngineRows: 4000, PageEvery: 200 * time.Millisecond, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d transports measured, want grpc and http", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Max.Acked == 0 || r.Max.Sustained <= 0 || r.Half.Exports == 0 || r.Half.percentile(0.99) <= 0 {
			t.Errorf("%s: max %d spans (%.0f/s sustained), half load %d exports, p99 %v", r.Transport, r.Max.Acked, r.Max.Sustained,
				r.Half.Exports, r.Half.percentile(0.99))
		}
		if r.Max.Rejected+r.Half.Rejected > 0 {
			t.Errorf("%s: the server refused %d generated spans: %s", r.Transport, r.Max.Rejected+r.Half.Rejected, r.Max.FirstError+r.Half.FirstError)
		}
		// The engine's memory by use comes with its tracked total.
		if p := r.Max.PhasePeak; p.EngineHeld > 0 && len(p.EngineUses) == 0 {
			t.Errorf("%s: engine tracked %.0f bytes at the peak but no memory by use was read", r.Transport, p.EngineHeld)
		}
		// The server was sampled after the exports stopped, too.
		if r.Max.AfterPeak.RSS == 0 {
			t.Errorf("%s: no RSS sampled while the backlog drained and the assembler caught up", r.Transport)
		}
		// Pages were read while the server was loaded, and answered.
		if p := r.Max.Pages; p.reads() == 0 || p.Failed > 0 {
			t.Errorf("%s: page reads under load: %s", r.Transport, p.describe())
		}
		// The server counted the phase's acknowledged exports as the bench did.
		if _, n, _ := r.Max.ServerExport.quantile(0.99, 0.25); n != float64(r.Max.Exports) {
			t.Errorf("%s: the server timed %.0f exports in the first phase, the bench had %d acknowledged", r.Transport, n, r.Max.Exports)
		}
		if _, n, _ := r.Max.WALSync.quantile(0.99, 0.25); n == 0 {
			t.Errorf("%s: no write-ahead log commit seen in the first phase", r.Transport)
		}
		if r.Max.AssemblerStages["write"] <= 0 || r.Max.AssemblerStages["spans"] <= 0 {
			t.Errorf("%s: the assembler's stages were not timed: %v", r.Transport, r.Max.AssemblerStages)
		}
		if r.Max.Mem.Peak <= 0 || r.Max.ServerCores <= 0 {
			t.Errorf("%s: server not observed: %+v, %.2f cores", r.Transport, r.Max.Mem, r.Max.ServerCores)
		}
	}
	if rep.Acked == 0 || rep.Distinct < rep.Acked {
		t.Errorf("%d spans acknowledged, %d distinct stored: acknowledged spans were lost", rep.Acked, rep.Distinct)
	}
	if rep.Stored != rep.Distinct {
		t.Errorf("%d spans stored but %d distinct: the bench sent duplicate keys", rep.Stored, rep.Distinct)
	}
	if rep.Distinct > rep.Acked+rep.Uncertain {
		t.Errorf("%d distinct spans stored for %d acknowledged and %d uncertain", rep.Distinct, rep.Acked, rep.Uncertain)
	}
	if rep.Engine.InsertRate() <= 0 || rep.Engine.Rows < 4000 {
		t.Errorf("raw engine: %+v", rep.Engine)
	}
	printIngest(testWriter{t}, rep)
}

func TestMemoryUses(t *testing.T) {
	got := memoryUses(map[string]float64{"inserts": 96 << 20, "mark_cache": 1 << 19, "merges": 412 << 20, "primary_keys": 3 << 20})
	if want := " (merges 412 MiB, inserts 96 MiB, primary keys 3 MiB)"; got != want {
		t.Errorf("memoryUses = %q, want %q", got, want)
	}
	if got := memoryUses(map[string]float64{"merges": 0}); got != "" {
		t.Errorf("memoryUses of nothing held = %q, want empty", got)
	}
}

func TestHistogramQuantile(t *testing.T) {
	before := histogram{0.1: 5, 0.25: 5, 1: 5, math.Inf(1): 5}
	after := histogram{0.1: 95, 0.25: 103, 1: 104, math.Inf(1): 105}
	p99, n, slow := after.since(before).quantile(0.99, 0.25)
	if n != 100 || slow != 2 || p99 != 1 {
		t.Errorf("p99 ≤ %g over %g, %g slow; want ≤ 1 over 100, 2 slow", p99, n, slow)
	}
	if p50, _, _ := after.since(before).quantile(0.5, 0.25); p50 != 0.1 {
		t.Errorf("p50 ≤ %g, want ≤ 0.1", p50)
	}
}

func TestStageTimes(t *testing.T) {
	got := stageTimes(map[string]float64{"spans": 2.5, "write": 4, "find": 0.25})
	if want := " 6.8 s in all, write 4.0, spans 2.5, find 0.2"; got != want {
		t.Errorf("stageTimes = %q, want %q", got, want)
	}
}

// The assembler's lag in a phase counts from the phase's start at most: a
// watermark left minutes back by the previous phase's wait is not the
// phase's own spans waiting; one that falls behind within the phase is.
func TestAssemblerLagCountsFromPhaseStart(t *testing.T) {
	now := time.Now()
	s := &sampler{start: now.Add(-3 * time.Second)}
	s.noteWatermark(now.Add(-4 * time.Minute)) // left by the wait before the phase
	if s.maxLag < 3*time.Second || s.maxLag > time.Minute {
		t.Errorf("a watermark from before the phase: lag %s, want about the 3 s the phase has run", s.maxLag)
	}
	s = &sampler{start: now.Add(-3 * time.Minute)}
	s.noteWatermark(now.Add(-time.Minute)) // fell behind during the phase
	s.noteWatermark(now.Add(-time.Second))
	if s.maxLag < time.Minute || s.maxLag > 2*time.Minute {
		t.Errorf("a watermark a minute old within the phase: lag %s, want about 1 min", s.maxLag)
	}
}

// testLog shows the benches' progress with -v.
func testLog(t *testing.T) testWriter {
	if os.Getenv("TOKENPATH_BENCH_QUIET") != "" {
		return testWriter{nil}
	}
	return testWriter{t}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if w.t != nil {
		w.t.Log(string(p))
	}
	return len(p), nil
}
