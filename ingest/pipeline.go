package ingest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Inserter is the part of the event store the pipeline writes to.
type Inserter interface {
	Insert(ctx context.Context, b *clickhouse.Batch) error
}

// ErrOverloaded means the write path is saturated; exporters should back
// off and retry (HTTP 429, gRPC RESOURCE_EXHAUSTED).
var ErrOverloaded = errors.New("tokenpath is ingesting at capacity; retry later")

// overloadRetryDelay is the back-off suggested to exporters on ErrOverloaded
// (HTTP Retry-After, gRPC RetryInfo).
const overloadRetryDelay = 2 * time.Second

// PipelineConfig tunes the batching writer; zero values take defaults.
type PipelineConfig struct {
	// FlushInterval: the longest acknowledged rows wait before the current
	// WAL segment is sealed and written (default 3s).
	FlushInterval time.Duration
	// MaxPendingRows: rows acknowledged but not yet in ClickHouse before
	// exports get ErrOverloaded (default 300k). A third of it waiting
	// triggers a flush before the interval.
	MaxPendingRows int
	// InsertBytes: the staged span bytes (Native, embedded engine) that
	// seal a segment, so the most one insert of spans writes (default
	// 40 MiB, see defaultInsertBytes); nine tenths of it waiting trigger a
	// flush before the interval, as a third of MaxPendingRows does.
	InsertBytes int
	Limits      normalize.Limits
}

// defaultInsertBytes keeps an insert of spans into the embedded engine a
// compact part: the engine writes an insert's block as one part per day,
// compact (one data file) while it holds less than spans'
// min_bytes_for_wide_part (64 MiB, uncompressed), wide above (a file and
// its own write buffers per column and subcolumn, ~80). The bench's spans
// (~40 attributes) take 590 bytes staged and ~780 in the part: 40 MiB is
// ~71k of them, a 54 MB part. Measured by rows per insert (a probe
// inserting the bench's spans, merges stopped): 70k 4.4–5.0 µs of CPU a
// span, compact; from 86k on wide, 100k 5.8–8.0, 150k 7.4–8.0. In bench
// ingest (60 s, gRPC) inserts of ~61k spans sustained 92k spans/s at 19.5
// µs of server CPU a span, against 69k at 24.8 with inserts of ~100k;
// the RSS peak fell from 1288 to 1112 MiB.
const defaultInsertBytes = 40 << 20

// Pipeline is the single batching writer: receivers Submit acknowledged
// exports (fsynced to the WAL), and Run writes sealed segments to
// ClickHouse in large batches, then deletes them. Rows normalized by the
// receiver are kept per segment (spans already encoded as Native blocks in
// a stage file when the store takes them, the rest in memory) so the
// common path normalizes once; after a crash, segments are replayed from
// the log.
type Pipeline struct {
	cfg     PipelineConfig
	wal     *WAL
	store   Inserter
	log     *slog.Logger
	Metrics *Metrics

	// rot is held shared by Submit from WAL append to registering its rows,
	// and exclusively by Flush while sealing a segment, so a sealed segment
	// never has rows still on their way into pending.
	rot     sync.RWMutex
	mu      sync.Mutex
	pending map[uint64]*pendingSegment // segment seq → rows not yet written
	nPend   atomic.Int64
	// nPendBytes: the span bytes staged for segments not written yet.
	nPendBytes atomic.Int64
	// walFailure is the last write-ahead log append error (disk full,
	// read-only, …), nil once an append succeeds again: Health reads it.
	walFailure atomic.Pointer[error]
	kick       chan struct{}
	// stager: the store takes spans as pre-encoded Native blocks, so spans
	// are encoded on receipt and only those bytes wait for the insert, in
	// a file per segment. Nil for a ClickHouse server.
	stager spanStager

	instMu    sync.Mutex
	instances map[instanceKey]bool
	// written: resources already in the resources table, not written again.
	written writtenResources
	// running: the inserts into ClickHouse under way (WritingSince).
	running runningInserts
	// deltas holds each histogram series' last cumulative point; segments
	// are written in log order, so intervals follow acknowledgement order.
	deltas HistogramDeltas
}

// pendingSegment is what one write-ahead log segment holds, kept in memory
// until it is in ClickHouse.
type pendingSegment struct {
	// rows: metric points and events, and spans when the store does not
	// take Native blocks (or the segment is replayed from the log).
	rows Rows
	// stage holds the spans as Native blocks (clickhouse.EncodeSpans), one
	// per export, in a file the insert reads: ~1.5 KiB per span in the page
	// cache, instead of several KiB of maps in the heap. spanRows counts
	// them.
	stage     *clickhouse.SpanStage
	spanRows  int
	spanBytes int
	// fromLog: staging failed (disk full…), so the segment is written from
	// the write-ahead log, which has every acknowledged export, as after a
	// restart.
	fromLog bool
	// sightings are the inference instances the segment's rows show, at
	// the earliest time each was seen (for instance_started inference).
	sightings map[instanceKey]time.Time
	// resources the segment's spans reference: written before the spans.
	resources map[resourceKey]telemetry.Resource
}

func (s *pendingSegment) count() int { return s.rows.count() + s.spanRows }

// spanStager is a store that takes spans as Native blocks staged in a file
// (the embedded engine).
type spanStager interface {
	TakesNative() bool
	NewSpanStage() (*clickhouse.SpanStage, error)
}

// NewPipeline opens the write-ahead log in walDir.
func NewPipeline(walDir string, store Inserter, cfg PipelineConfig, log *slog.Logger) (*Pipeline, error) {
	if cfg.FlushInterval <= 0 {
		// Fewer, larger inserts: each one costs the engine a new part, and
		// a row is merged again each time its part is, so larger parts
		// mean fewer merges per row. Acks never wait for it (the WAL makes
		// them durable); readers see rows up to this much later. In the
		// ingest bench at a fixed 30k spans/s, 3 s and a third of 300k
		// pending rows (inserts of ~50k rows) cost 32–35 µs of server CPU
		// per span until assembled, against 44–45 µs with 1 s and a quarter
		// of 100k (13–17k rows); 2 s and 60k rows were in between.
		cfg.FlushInterval = 3 * time.Second
	}
	var stager spanStager
	if st, ok := store.(spanStager); ok && st.TakesNative() {
		stager = st
	}
	if cfg.MaxPendingRows <= 0 {
		// Seconds of the engine's insert rate, then exporters back off.
		// Spans wait as Native blocks in stage files for the embedded
		// engine (~1.5 KiB each: ~450 MiB of page cache and disk at most);
		// as rows with attribute maps (server mode) they take several KiB
		// of heap each (500k held 4 GiB in the ingest benchmark). A third
		// of it waiting starts an insert, and half of it is the most one
		// insert takes (flushRows, segmentRows).
		cfg.MaxPendingRows = 300_000
	}
	if cfg.InsertBytes <= 0 {
		cfg.InsertBytes = defaultInsertBytes
	}
	metrics := NewMetrics()
	wal, err := openWAL(walDir, func(d time.Duration) { metrics.WALSync.Observe(d.Seconds()) })
	if err != nil {
		return nil, err
	}
	return &Pipeline{cfg: cfg, wal: wal, store: store, log: log, Metrics: metrics, stager: stager,
		pending: map[uint64]*pendingSegment{}, kick: make(chan struct{}, 1), instances: map[instanceKey]bool{}}, nil
}

// Health is nil while exports are being made durable, else why the last
// one could not be (the disk is full, the data dir went read-only…): pages
// show it, so people know why data stopped arriving.
func (p *Pipeline) Health() error {
	if e := p.walFailure.Load(); e != nil {
		return *e
	}
	return nil
}

// Saturated reports whether no export can be accepted now. Receivers ask
// before reading and decoding a body, so a refusal under overload costs
// next to nothing; Submit still enforces the bound exactly.
func (p *Pipeline) Saturated() bool {
	if int(p.nPend.Load()) >= p.cfg.MaxPendingRows {
		p.Metrics.Overloaded.Inc()
		return true
	}
	return false
}

// Submit makes an export durable: after it returns nil the data survives a
// crash and will reach ClickHouse exactly once (retries fold by key). Its
// steps: admit the rows under MaxPendingRows, prepare them (instances,
// resources, the Native span block), append the export to the log, add the
// rows to the log segment's pending rows, then seal or wake the flusher.
func (p *Pipeline) Submit(ctx context.Context, rec Record, rows Rows) error {
	n := rows.count()
	if n == 0 {
		return nil
	}
	if int(p.nPend.Load())+n > p.cfg.MaxPendingRows {
		p.Metrics.Overloaded.Inc()
		return ErrOverloaded
	}
	if rec.Received.IsZero() {
		rec.Received = time.Now()
	}
	prep, err := p.prepare(rows)
	if err != nil {
		return err
	}
	// Count before appending so the flusher never sees a segment whose rows
	// are not registered yet.
	p.nPend.Add(int64(n))
	p.nPendBytes.Add(int64(len(prep.block)))
	p.rot.RLock()
	seq, err := p.appendLog(ctx, rec)
	if err != nil {
		p.rot.RUnlock()
		p.nPend.Add(-int64(n))
		p.nPendBytes.Add(-int64(len(prep.block)))
		return err
	}
	full := p.addToSegment(seq, prep)
	p.rot.RUnlock()
	if full {
		p.seal(seq)
	}
	p.Metrics.QueueDepth.Set(float64(p.nPend.Load()))
	if p.flushDue() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// preparedExport is an export's rows ready for their segment: what they
// say about instances and resources, and their spans encoded as a Native
// block when spans are staged (rows then holds no spans).
type preparedExport struct {
	rows      Rows
	sightings map[instanceKey]time.Time
	resources map[resourceKey]telemetry.Resource
	block     []byte
	blockRows int
}

// prepare notes instances and encodes the spans in the receiving
// goroutine: many exports do this in parallel, and the segment keeps only
// the result until the insert.
func (p *Pipeline) prepare(rows Rows) (preparedExport, error) {
	prep := preparedExport{
		sightings: noteInstances(nil, rows.Spans, rows.Points),
		resources: noteResources(nil, rows.Spans),
	}
	if p.stager != nil && len(rows.Spans) > 0 {
		var err error
		if a := rows.spanAttrs; a != nil {
			prep.block, err = clickhouse.EncodeSpansAttrs(rows.Spans, &clickhouse.SpanAttrs{Ends: a.Ends, Names: a.Names, Keys: a.Keys, Bounds: a.Bounds, Values: a.Values})
			a.Release() // encoded: nothing refers to it any more
		} else {
			prep.block, err = clickhouse.EncodeSpans(rows.Spans)
		}
		if err != nil {
			return prep, err
		}
		prep.blockRows = len(rows.Spans)
		rows.Spans, rows.spanAttrs = nil, nil
	}
	rows.materializeAttrs()
	prep.rows = rows
	return prep, nil
}

// appendLog writes the export to the write-ahead log (p.rot read-held)
// and keeps Health in step: a failed append is the pipeline's health
// unless the exporter gave up, a good one clears it.
func (p *Pipeline) appendLog(ctx context.Context, rec Record) (uint64, error) {
	seq, err := p.wal.Append(ctx, rec)
	if err != nil {
		if ctx.Err() == nil {
			p.walFailure.Store(&err)
		}
		return 0, err
	}
	if p.walFailure.Load() != nil {
		p.walFailure.Store(nil)
	}
	return seq, nil
}

// addToSegment adds prepared rows to the pending rows of log segment seq
// and stages their span block (p.rot read-held); it reports whether the
// segment is full and should be sealed.
func (p *Pipeline) addToSegment(seq uint64, prep preparedExport) bool {
	p.mu.Lock()
	seg := p.pending[seq]
	if seg == nil {
		seg = &pendingSegment{}
		p.pending[seq] = seg
	}
	seg.rows.add(prep.rows)
	seg.spanRows += prep.blockRows
	seg.spanBytes += len(prep.block)
	full := seg.count() >= p.segmentRows() || seg.spanBytes >= p.cfg.InsertBytes
	seg.sightings = mergeSightings(seg.sightings, prep.sightings)
	seg.resources = mergeResources(seg.resources, prep.resources)
	if prep.blockRows > 0 && seg.stage == nil && !seg.fromLog {
		st, err := p.stager.NewSpanStage()
		if err != nil {
			p.stagingFailed(seg, err)
		}
		seg.stage = st
	}
	stage := seg.stage
	p.mu.Unlock()
	// The write happens outside mu (exports stage in parallel) but inside
	// rot, so the segment is not sealed with a block on its way.
	if prep.blockRows > 0 && stage != nil {
		if err := stage.Append(prep.block, prep.blockRows); err != nil {
			p.mu.Lock()
			p.stagingFailed(seg, err)
			p.mu.Unlock()
		}
	}
	return full
}

// stagingFailed switches seg to being written from the write-ahead log
// (p.mu held): the export is acknowledged there already.
func (p *Pipeline) stagingFailed(seg *pendingSegment, err error) {
	if !seg.fromLog {
		p.log.Warn("cannot stage spans for their insert; the segment will be written from the write-ahead log", "err", err)
	}
	seg.fromLog = true
}

// flushRows is how many pending rows trigger a flush before the interval.
func (p *Pipeline) flushRows() int { return max(p.cfg.MaxPendingRows/3, 1) }

// flushDue reports whether enough waits to insert before the interval:
// flushRows rows, or nine tenths of InsertBytes of staged spans.
func (p *Pipeline) flushDue() bool {
	return p.nPend.Load() >= int64(p.flushRows()) || p.nPendBytes.Load() >= int64(p.cfg.InsertBytes)*9/10
}

// segmentRows is how many rows a segment takes before it is sealed, and
// so the most one insert writes. While an insert runs, the exports that
// arrive meanwhile gather in the next segment; without a bound, after a
// slow insert that was everything pending, up to MaxPendingRows in one
// insert, and the engine holds ~3 KiB a span while inserting (267k spans:
// 380 MiB, bench ingest). On the embedded engine InsertBytes usually
// seals a segment of spans first (~71k of the bench's); this bounds
// segments of small spans, metric points and events.
func (p *Pipeline) segmentRows() int { return max(p.cfg.MaxPendingRows/2, 1) }

// seal seals segment seq once it is full (segmentRows or InsertBytes), if
// no other export has yet.
func (p *Pipeline) seal(seq uint64) {
	p.rot.Lock()
	defer p.rot.Unlock()
	if err := p.wal.RotateIf(seq); err != nil {
		// The log is broken: the next append reports it to its exporter.
		p.log.Warn("cannot seal a full write-ahead log segment", "err", err)
	}
}
