package main

import (
	"context"
	"errors"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// phaseCounters are the shared tallies of the exporters of one phase.
type phaseCounters struct {
	exports, acked, overloaded, failed, failedSpans, rejected atomic.Int64
	mu                                                        sync.Mutex
	firstErr                                                  string
	latencies                                                 []time.Duration
}

func (c *phaseCounters) noteErr(err error) {
	c.mu.Lock()
	if c.firstErr == "" && err != nil {
		c.firstErr = err.Error()
	}
	c.mu.Unlock()
}

func (c *phaseCounters) ok(spans int, lat time.Duration) {
	c.exports.Add(1)
	c.acked.Add(int64(spans))
	c.mu.Lock()
	c.latencies = append(c.latencies, lat)
	c.mu.Unlock()
}

// rssPeak is the server's memory at the highest RSS sampled in a stretch
// of a phase: the RSS and its mapped files, the Go heap in use, the
// engine's tracked memory (and by use), its allocator's resident and
// dirty pages.
type rssPeak struct {
	RSS, File                 int64
	HeapInuse, EngineHeld     float64
	AllocResident, AllocDirty float64
	EngineUses                map[string]float64
	SpansMerges, SpansMerging float64
}

// sampler reads the server each second from a phase's start until it
// has drained and assembled what the phase sent: acknowledged spans and
// written rows while exports are sent (the rates), its memory throughout.
type sampler struct {
	mu       sync.Mutex // record runs on its own goroutine
	at       []time.Duration
	acked    []int64
	written  []float64
	stop     chan struct{}
	done     chan struct{}
	start    time.Time     // when the phase began: the sampler starts just before its first export
	maxLag   time.Duration // assembler watermark behind the clock, at most (noteWatermark)
	maxParts float64       // active parts of spans, at most
	// after: exports have stopped; samples no longer count for the rates,
	// only for afterPeak.
	after                bool
	phasePeak, afterPeak rssPeak
	pages                *pageReader
}

func startSampler(ctx context.Context, web string, pid int, acked *atomic.Int64, wm *watermarkReader, pageEvery time.Duration) *sampler {
	s := &sampler{start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), pages: startPageReader(ctx, web, pageEvery)}
	record := func() {
		if w, ok := wm.read(ctx); ok {
			s.noteWatermark(w)
		}
		m, _ := scrapeMetrics(ctx, web)
		mem := readMem(pid)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.maxParts = max(s.maxParts, m.SpansParts)
		peak := &s.afterPeak
		if !s.after {
			peak = &s.phasePeak
			s.at = append(s.at, time.Since(s.start))
			s.acked = append(s.acked, acked.Load())
			s.written = append(s.written, m.WrittenRows)
		}
		if mem.RSS > peak.RSS {
			*peak = rssPeak{RSS: mem.RSS, File: mem.File, HeapInuse: m.HeapInuse, EngineHeld: m.Engine,
				AllocResident: m.AllocResident, AllocDirty: m.AllocDirty, EngineUses: m.EngineUses,
				SpansMerges: m.SpansMerges, SpansMerging: m.SpansMerging}
		}
	}
	record()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				record()
				return
			case <-tick.C:
				record()
			}
		}
	}()
	return s
}

// finish stops the sampler and its page reads, and returns how long the
// reads took.
func (s *sampler) finish() pageTimes {
	close(s.stop)
	<-s.done
	return s.pages.finish()
}

// phaseOver marks the end of the exports: later samples are the drain's
// and the assembler's catching up.
func (s *sampler) phaseOver() {
	s.pages.phaseOver()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = true
}

// noteWatermark keeps the assembler's largest lag seen: how far its
// watermark w trails the clock, counted from the phase's start at most.
// The wait after a phase ends once the watermark passes the time the wait
// began, so the next phase can start with the watermark minutes old
// although nothing is left to assemble; the phase's own spans cannot be
// behind by more than the phase has run.
func (s *sampler) noteWatermark(w time.Time) {
	if w.Before(s.start) {
		w = s.start
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxLag = max(s.maxLag, time.Since(w))
}

// secondHalf returns acked and written spans/s over the second half.
func (s *sampler) secondHalf() (acked, written float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.at)
	if n < 3 {
		return 0, 0
	}
	end := s.at[n-1]
	i := sort.Search(n, func(i int) bool { return s.at[i] >= end/2 })
	if i >= n-1 {
		return 0, 0
	}
	secs := (s.at[n-1] - s.at[i]).Seconds()
	return float64(s.acked[n-1]-s.acked[i]) / secs, (s.written[n-1] - s.written[i]) / secs
}

// phaseClock holds the CPU counters at the start of a phase.
type phaseClock struct {
	server, self, machine time.Duration
	metrics               serverMetrics
}

func (t *ingestTarget) beginPhase(ctx context.Context) phaseClock {
	resetPeak(t.pid)
	m, _ := scrapeMetrics(ctx, t.web)
	return phaseClock{cpuTime(t.pid), cpuTime(os.Getpid()), machineBusy(), m}
}

// endPhase reads what a phase did once its exports have stopped: it waits
// for the backlog to drain and the assembler to catch up, sampling the
// server until then, and stops s.
func (t *ingestTarget) endPhase(ctx context.Context, st *phaseStats, c *phaseCounters, s *sampler, wall time.Duration, clk phaseClock) {
	s.phaseOver()
	st.Wall = wall
	st.Exports, st.Acked = c.exports.Load(), c.acked.Load()
	st.Overloaded, st.Failed, st.FailedSpans, st.Rejected = c.overloaded.Load(), c.failed.Load(), c.failedSpans.Load(), c.rejected.Load()
	st.FirstError, st.Latencies = c.firstErr, c.latencies
	st.AckedRate = float64(st.Acked) / wall.Seconds()
	st.SteadyAcked, st.SteadyWrite = s.secondHalf()
	st.ServerCores = (cpuTime(t.pid) - clk.server).Seconds() / wall.Seconds()
	machine := (machineBusy() - clk.machine).Seconds() / wall.Seconds()
	if t.inProcess {
		st.OtherCores = machine - st.ServerCores
	} else {
		st.ClientCores = (cpuTime(os.Getpid()) - clk.self).Seconds() / wall.Seconds()
		st.OtherCores = machine - st.ServerCores - st.ClientCores
	}
	st.LoadAvg = loadAverage()
	st.Mem = readMem(t.pid)
	m, _ := scrapeMetrics(ctx, t.web)
	st.Backlog = m.QueueRows
	st.ServerExport, st.WALSync = m.ExportSecs.since(clk.metrics.ExportSecs), m.WALSyncSecs.since(clk.metrics.WALSyncSecs)
	st.Drain = t.drain(ctx, s)
	// Sustained is end to end: the phase's acknowledged spans over the time
	// until the last of them was in ClickHouse. Acknowledging faster than
	// the writer keeps up only fills the pending queue (MaxPendingRows),
	// which then drains after the phase.
	st.Sustained = float64(st.Acked) / (wall + st.Drain).Seconds()
	if st.Acked > 0 {
		st.ServerCPUPerSpan = (cpuTime(t.pid) - clk.server) / time.Duration(st.Acked)
	}
	st.AssemblerCatchUp, st.AssemblerBehind = t.assembled(ctx, s)
	st.Pages = s.finish()
	st.AssemblerMaxLag = s.maxLag
	if st.Acked > 0 {
		st.AssembledCPUPerSpan = (cpuTime(t.pid) - clk.server) / time.Duration(st.Acked)
	}
	// The peak covers the drain and the catching up too.
	st.Mem.Peak = max(readMem(t.pid).Peak, s.phasePeak.RSS, s.afterPeak.RSS)
	m, _ = scrapeMetrics(ctx, t.web)
	st.AssemblerStages = map[string]float64{}
	for stage, secs := range m.AssemblerSecs {
		st.AssemblerStages[stage] = secs - clk.metrics.AssemblerSecs[stage]
	}
	st.SpansPartsEnd = m.SpansParts
	st.SpansPartsMax = max(s.maxParts, m.SpansParts)
	st.PhasePeak, st.AfterPeak = s.phasePeak, s.afterPeak
}

// assembleWait caps how long a phase waits for the assembler: after 3
// minutes at full rate it is 5–6 minutes behind, and the next phase should
// not start only once a long run's backlog is gone.
const assembleWait = 5 * time.Minute

// assembled waits until the assembler's watermark passes now (every span
// written so far is assembled) and returns how long it waited, and whether
// the assembler was still behind when the wait ran out.
func (t *ingestTarget) assembled(ctx context.Context, s *sampler) (wait time.Duration, behind bool) {
	t0 := time.Now()
	said := t0
	for time.Since(t0) < assembleWait && ctx.Err() == nil {
		if w, ok := t.watermarks.read(ctx); ok {
			s.noteWatermark(w)
			if !w.Before(t0) {
				return time.Since(t0), false
			}
			if time.Since(said) >= 30*time.Second && t.logf != nil {
				said = time.Now()
				t.logf("waiting for the assembler: %s left to assemble (waited %s of at most %s)",
					t0.Sub(w).Round(time.Second), time.Since(t0).Round(time.Second), assembleWait)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(t0), true
}

// watermarkReader reads the assembler's watermark from the server's
// PostgreSQL schema.
type watermarkReader struct {
	mu   sync.Mutex
	conn *pgx.Conn
	url  string
}

func (r *watermarkReader) read(ctx context.Context) (time.Time, bool) {
	if r == nil {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		c, err := pgx.Connect(ctx, r.url)
		if err != nil {
			return time.Time{}, false
		}
		r.conn = c
	}
	var ns int64
	if err := r.conn.QueryRow(ctx, "SELECT watermark FROM assembly_watermarks WHERE name = 'assembler'").Scan(&ns); err != nil {
		if ctx.Err() == nil && !errors.Is(err, pgx.ErrNoRows) {
			r.conn.Close(context.Background())
			r.conn = nil
		}
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func (r *watermarkReader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.conn.Close(context.Background())
		r.conn = nil
	}
}
