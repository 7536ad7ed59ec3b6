package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// attempt sends one export, retrying on overload (honouring the server's
// Retry-After / RetryInfo) until it is acknowledged, fails, or stopAt passes.
func (t *ingestTarget) attempt(ctx context.Context, exp exporter, body []byte, stopAt time.Time, st *phaseCounters) (int, bool) {
	for {
		outcome, delay, rejected, err := exp.export(ctx, body)
		switch outcome {
		case exportOK:
			if rejected > 0 {
				st.rejected.Add(rejected)
				st.noteErr(err)
			}
			return t.templates[0].spans - int(rejected), true
		case exportOverloaded:
			st.overloaded.Add(1)
			if delay <= 0 {
				delay = time.Second
			}
			if time.Now().Add(delay).After(stopAt) {
				return 0, false
			}
			select {
			case <-ctx.Done():
				return 0, false
			case <-time.After(delay):
			}
		default:
			st.failed.Add(1)
			st.failedSpans.Add(int64(t.templates[0].spans))
			st.noteErr(err)
			return 0, false
		}
	}
}

// drain waits until the server has written every acknowledged row.
func (t *ingestTarget) drain(ctx context.Context, s *sampler) time.Duration {
	t0 := time.Now()
	deadline := t0.Add(5 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if w, ok := t.watermarks.read(ctx); ok {
			s.noteWatermark(w)
		}
		m, err := scrapeMetrics(ctx, t.web)
		if err == nil && m.QueueRows == 0 {
			return time.Since(t0)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(t0)
}

func (t *ingestTarget) exporters(transport string, n int) ([]exporter, error) {
	out := make([]exporter, 0, n)
	for i := 0; i < n; i++ {
		e, err := newExporter(transport, t.grpcAddr, t.httpAddr, benchKey)
		if err != nil {
			closeExporters(out)
			return nil, err
		}
		e.warm(context.Background())
		out = append(out, e)
	}
	return out, nil
}

// closeExporters closes every exporter of a phase.
func closeExporters(exps []exporter) {
	for _, e := range exps {
		_ = e.close()
	}
}

// closedLoop runs n exporters back to back for d: the most the server
// acknowledges.
func (t *ingestTarget) closedLoop(ctx context.Context, transport string, n int, d time.Duration) phaseStats {
	var st phaseStats
	var c phaseCounters
	exps, err := t.exporters(transport, n)
	if err != nil {
		st.FirstError = err.Error()
		return st
	}
	defer closeExporters(exps)
	clk := t.beginPhase(ctx)
	s := startSampler(ctx, t.web, t.pid, &c.acked, t.watermarks, t.pageEvery)
	start := time.Now()
	stopAt := start.Add(d)
	var wg sync.WaitGroup
	for i, e := range exps {
		wg.Add(1)
		go func(i int, e exporter) {
			defer wg.Done()
			var buf []byte
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				seq := t.seq.Add(1)
				tpl := t.templates[seq%uint64(len(t.templates))]
				buf = tpl.patch(buf, seq, time.Now())
				t0 := time.Now()
				if n, ok := t.attempt(ctx, e, buf, stopAt, &c); ok {
					c.ok(n, time.Since(t0))
				}
			}
		}(i, e)
	}
	wg.Wait()
	wall := time.Since(start)
	t.endPhase(ctx, &st, &c, s, wall, clk)
	return st
}

// openLoop offers rate spans/s for d, whatever the answers, and measures
// each export's latency from when it was due (so a stalled server cannot
// hide its queueing: no coordinated omission).
func (t *ingestTarget) openLoop(ctx context.Context, transport string, rate float64, d time.Duration) phaseStats {
	st := phaseStats{TargetRate: rate}
	var c phaseCounters
	workers := 64
	exps, err := t.exporters(transport, workers)
	if err != nil {
		st.FirstError = err.Error()
		return st
	}
	defer closeExporters(exps)
	spans := t.templates[0].spans
	interval := time.Duration(float64(time.Second) * float64(spans) / rate)
	clk := t.beginPhase(ctx)
	s := startSampler(ctx, t.web, t.pid, &c.acked, t.watermarks, t.pageEvery)
	start := time.Now()
	stopAt := start.Add(d)
	due := make(chan time.Time, 100_000)
	var wg sync.WaitGroup
	for _, e := range exps {
		wg.Add(1)
		go func(e exporter) {
			defer wg.Done()
			var buf []byte
			for at := range due {
				seq := t.seq.Add(1)
				tpl := t.templates[seq%uint64(len(t.templates))]
				buf = tpl.patch(buf, seq, time.Now())
				if n, ok := t.attempt(ctx, e, buf, stopAt.Add(30*time.Second), &c); ok {
					c.ok(n, time.Since(at))
				}
			}
		}(e)
	}
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(stopAt) || ctx.Err() != nil {
			break
		}
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		due <- at
	}
	close(due)
	wg.Wait()
	wall := time.Since(start)
	t.endPhase(ctx, &st, &c, s, wall, clk)
	return st
}

// countStored opens the stopped server's ClickHouse and counts its spans.
func countStored(ctx context.Context, dataDir string, rep *ingestReport) error {
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: filepath.Join(dataDir, "clickhouse")}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return fmt.Errorf("open the server's clickhouse: %w", err)
	}
	defer ch.Close()
	r, err := ch.Query(ctx, "SELECT count() AS n, uniqExact(trace_id, span_id) AS u FROM spans")
	if err != nil {
		return fmt.Errorf("count spans: %w", err)
	}
	rep.Stored, rep.Distinct = r.Row(0).Int("n"), r.Row(0).Int("u")
	if r, err := ch.Query(ctx, "SELECT count() AS n FROM llm_requests FINAL WHERE is_deleted = 0"); err == nil {
		rep.Requests = r.Row(0).Int("n")
	}
	entries, err := os.ReadDir(filepath.Join(dataDir, "wal"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "wal-") {
			if fi, err := e.Info(); err == nil && fi.Size() > 0 {
				rep.WALLeft++
			}
		}
	}
	return nil
}
