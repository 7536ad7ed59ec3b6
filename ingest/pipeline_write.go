package ingest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// runningInserts holds when each insert still under way began. Its spans
// take their inserted_at (the engine's now64) as the insert starts, but
// become visible only when it commits, seconds later under load: a reader
// going by inserted_at must stay behind the oldest start.
type runningInserts struct {
	mu     sync.Mutex
	starts map[*time.Time]struct{}
}

func (r *runningInserts) begin() *time.Time {
	t := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.starts == nil {
		r.starts = map[*time.Time]struct{}{}
	}
	r.starts[&t] = struct{}{}
	return &t
}

func (r *runningInserts) end(t *time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.starts, t)
}

func (r *runningInserts) oldest() (since time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.starts {
		if !ok || t.Before(since) {
			since, ok = *t, true
		}
	}
	return since, ok
}

// WritingSince is when the oldest insert into ClickHouse still under way
// began; ok is false when none is. Rows stored since then may carry an
// earlier inserted_at than rows already visible, and become visible only
// when their insert commits: the assembler stays behind it.
func (p *Pipeline) WritingSince() (since time.Time, ok bool) { return p.running.oldest() }

// Run writes sealed segments until ctx is done, then writes what is left:
// FlushInterval after the last write, or as soon as flushRows wait.
func (p *Pipeline) Run(ctx context.Context) {
	t := time.NewTimer(p.cfg.FlushInterval)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			flushCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := p.Flush(flushCtx); err != nil {
				p.log.Warn("final flush incomplete; the write-ahead log keeps the rest for the next start", "err", err)
			}
			cancel()
			_ = p.wal.Close()
			return
		case <-t.C:
		case <-p.kick:
			// Exports kick while an insert runs too, its rows still
			// counted: what arrived since may be far from an insert's worth.
			if !p.flushDue() {
				continue
			}
		}
		if backoff > 0 {
			select {
			case <-ctx.Done():
				continue
			case <-time.After(backoff):
			}
		}
		err := p.Flush(ctx)
		t.Reset(p.cfg.FlushInterval)
		if err != nil && ctx.Err() == nil {
			backoff = min(max(backoff*2, time.Second), 30*time.Second)
			p.log.Error("writing telemetry to clickhouse failed; keeping it in the write-ahead log", "err", err, "retry_in", backoff)
			continue
		}
		backoff = 0
	}
}

// Flush seals the current segment and writes every sealed segment.
func (p *Pipeline) Flush(ctx context.Context) error {
	p.rot.Lock()
	_, err := p.wal.Rotate()
	p.rot.Unlock()
	if err != nil {
		return fmt.Errorf("rotate wal: %w", err)
	}
	segs, err := p.wal.Sealed()
	if err != nil {
		return err
	}
	for _, s := range segs {
		if err := p.writeSegment(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func (p *Pipeline) writeSegment(ctx context.Context, s Segment) error {
	p.mu.Lock()
	seg, inMemory := p.pending[s.Seq]
	p.mu.Unlock()
	pendingRows, pendingBytes := 0, 0 // what nPend and nPendBytes count for the segment
	var stage *clickhouse.SpanStage
	if inMemory {
		pendingRows, pendingBytes, stage = seg.count(), seg.spanBytes, seg.stage
	}
	if !inMemory || seg.fromLog {
		// Written before a restart, or its spans could not be staged:
		// normalize again from the log.
		var err error
		if seg, err = p.readSegment(s); err != nil {
			return err
		}
	}
	acked := seg.count()
	// The inferred instance events are inserted next to the segment's own:
	// the segment must stay as acknowledged (a retry after a failed insert
	// would count them twice), and an instance is marked known only once
	// its event is stored, or a failed insert would lose the event for good.
	started := p.newInstances(seg.sightings)
	t0 := p.running.begin()
	err := p.insert(ctx, seg, started)
	p.running.end(t0)
	if err != nil {
		return err
	}
	p.markInstances(started)
	p.Metrics.WriteLatency.Observe(time.Since(*t0).Seconds())
	p.Metrics.Written.Add(float64(acked + len(started)))
	if err := p.wal.Remove(s); err != nil {
		return fmt.Errorf("remove segment: %w", err)
	}
	if stage != nil {
		if err := stage.Remove(); err != nil {
			p.log.Warn("cannot remove a written span stage", "err", err)
		}
	}
	if inMemory {
		p.mu.Lock()
		delete(p.pending, s.Seq)
		p.mu.Unlock()
		p.nPend.Add(-int64(pendingRows))
		p.nPendBytes.Add(-int64(pendingBytes))
	}
	p.Metrics.QueueDepth.Set(float64(max(p.nPend.Load(), 0)))
	return nil
}

// readSegment normalizes a segment's exports again from the log.
func (p *Pipeline) readSegment(s Segment) (*pendingSegment, error) {
	recs, err := ReadSegment(s.Path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.Path, err)
	}
	seg := &pendingSegment{}
	for _, rec := range recs {
		r, err := DecodeRecord(rec, p.cfg.Limits)
		if err != nil {
			p.log.Error("dropping unreadable write-ahead log record", "segment", s.Path, "err", err)
			continue
		}
		seg.rows.add(r)
	}
	seg.sightings = noteInstances(nil, seg.rows.Spans, seg.rows.Points)
	seg.resources = noteResources(nil, seg.rows.Spans)
	if n := seg.count(); n > 0 {
		p.log.Info("replaying write-ahead log segment", "segment", s.Path, "rows", n)
	}
	return seg, nil
}

// insertChunk bounds one INSERT so a large replay does not build one huge block.
const insertChunk = 200_000

func (p *Pipeline) insert(ctx context.Context, seg *pendingSegment, started []telemetry.Event) error {
	// Resources first: a reader must never meet a span whose resource is
	// not stored yet. Marked written only once stored.
	if res := p.written.missing(seg.resources); len(res) > 0 {
		if err := p.store.Insert(ctx, clickhouse.ResourcesBatch(res)); err != nil {
			return err
		}
		p.written.mark(res)
	}
	if seg.stage != nil {
		b, err := seg.stage.Batch()
		if err != nil {
			return err
		}
		if err := p.store.Insert(ctx, b); err != nil {
			return err
		}
	}
	rows := &seg.rows
	for i := 0; i < len(rows.Spans); i += insertChunk {
		if err := p.store.Insert(ctx, clickhouse.SpansBatch(rows.Spans[i:min(i+insertChunk, len(rows.Spans))])); err != nil {
			return err
		}
	}
	for i := 0; i < len(rows.Points); i += insertChunk {
		if err := p.store.Insert(ctx, clickhouse.MetricsBatch(rows.Points[i:min(i+insertChunk, len(rows.Points))])); err != nil {
			return err
		}
	}
	if events := append(slices.Clip(rows.Events), started...); len(events) > 0 {
		if err := p.store.Insert(ctx, clickhouse.EventsBatch(events)); err != nil {
			return err
		}
	}
	if len(rows.Histograms) > 0 {
		// Last: a failed insert before it converts the same points again
		// on retry, and the state moves only once the intervals are stored.
		intervals, commit := p.deltas.Convert(rows.Histograms)
		for i := 0; i < len(intervals); i += insertChunk {
			if err := p.store.Insert(ctx, clickhouse.HistogramsBatch(intervals[i:min(i+insertChunk, len(intervals))])); err != nil {
				return err
			}
		}
		commit()
	}
	return nil
}
