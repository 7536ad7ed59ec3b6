package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// openTestStore opens the real embedded ClickHouse in dir, migrated. The
// engine allows one per process, so tests using it never run in parallel.
func openTestStore(t *testing.T, dir string) *clickhouse.Store {
	t.Helper()
	ch, err := clickhouse.Open(context.Background(), clickhouse.Config{DataDir: dir, RetentionDays: 7}, QuietLog)
	if err != nil {
		t.Fatalf("open embedded clickhouse: %v", err)
	}
	t.Cleanup(func() { ch.Close() })
	if err := ch.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return ch
}

func count(t *testing.T, ch *clickhouse.Store, sql string, args ...any) int64 {
	t.Helper()
	r, err := ch.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return r.Row(0).Int("n")
}

// TestPipelineReplay: exports acknowledged but never flushed (the process
// died) reach ClickHouse from the write-ahead log at the next start, and
// replaying a segment again (a crash after the insert, before the delete)
// does not duplicate spans or events.
func TestPipelineReplay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	walDir := filepath.Join(dir, "wal")
	t0 := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)

	// First process: acknowledge, never flush.
	p1, err := NewPipeline(walDir, nil, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	recv := &Receiver{Pipeline: p1, Log: QuietLog}
	resp, err := recv.exportTraces(ctx, 7, otlptest.Traces(1, 5, t0), nil, "test")
	if err != nil || resp.PartialSuccess != nil {
		t.Fatalf("export: %v, partial success %v", err, resp.GetPartialSuccess())
	}
	if err := recv.SubmitPoints(ctx, 7, []telemetry.MetricPoint{{ProjectID: 7, Time: t0, Service: "vllm", Instance: "vllm-1",
		Name: "kv_cache_usage", Labels: map[string]string{"model_name": "llama"}, Value: 0.97}}); err != nil {
		t.Fatal(err)
	}
	if err := recv.SubmitEvents(ctx, 7, []telemetry.Event{{ProjectID: 7, Time: t0, Kind: telemetry.EventScale, Service: "vllm",
		FromReplicas: telemetry.Ptr[int32](0), ToReplicas: telemetry.Ptr[int32](2), Source: "keda"}}); err != nil {
		t.Fatal(err)
	}
	if err := p1.wal.Close(); err != nil {
		t.Fatal(err)
	}
	backup := t.TempDir()
	segFiles, _ := filepath.Glob(filepath.Join(walDir, "wal-*.log"))
	for _, f := range segFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(backup, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	ch := openTestStore(t, filepath.Join(dir, "clickhouse"))
	check := func(stage string) {
		t.Helper()
		trace := otlptest.TraceHex(1)
		for _, c := range []struct {
			what string
			sql  string
			args []any
			want int64
		}{
			{"spans", "SELECT count() AS n FROM spans FINAL WHERE trace_id = ?", []any{trace}, 5},
			{"server spans with the queue split", "SELECT count() AS n FROM spans FINAL WHERE trace_id = ? AND llm_role = 'server' AND queue_ns = 200000000 AND instance = 'vllm-0'", []any{trace}, 1},
			{"scale events", "SELECT count() AS n FROM events FINAL WHERE project_id = 7 AND kind = 'scale' AND to_replicas = 2", nil, 1},
			{"instance_started events", "SELECT count() AS n FROM events FINAL WHERE project_id = 7 AND kind = 'instance_started'", nil, 2},
		} {
			if got := count(t, ch, c.sql, c.args...); got != c.want {
				t.Errorf("%s: %d %s, want %d", stage, got, c.what, c.want)
			}
		}
	}

	// Second process: replays the log at its first flush, then deletes it.
	replay := func() *Pipeline {
		p, err := NewPipeline(walDir, ch, PipelineConfig{}, QuietLog)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if segs, _ := p.wal.Sealed(); len(segs) != 0 {
			t.Errorf("segments left after the flush: %v", segs)
		}
		return p
	}
	p2 := replay()
	check("first replay")
	if n := count(t, ch, "SELECT count() AS n FROM metric_points WHERE project_id = 7 AND name = 'kv_cache_usage' AND value = 0.97 AND labels['model_name'] = 'llama'"); n != 1 {
		t.Errorf("first replay: %d kv_cache_usage points, want 1", n)
	}
	if err := p2.wal.Close(); err != nil {
		t.Fatal(err)
	}

	// Crash after the insert, before the delete: the same segments again.
	for _, f := range segFiles {
		b, _ := os.ReadFile(filepath.Join(backup, filepath.Base(f)))
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p3 := replay()
	check("second replay of the same segments")
	_ = p3.wal.Close()
}

// flakyStore fails the first inserts, then records what it is given.
type flakyStore struct {
	fails      int
	tables     map[string]int
	eventKinds []string
}

func (f *flakyStore) Insert(ctx context.Context, b *clickhouse.Batch) error {
	if f.fails > 0 {
		f.fails--
		return errors.New("clickhouse: connection reset")
	}
	f.tables[b.Table] += b.Rows()
	for _, c := range b.Columns {
		if b.Table == "events" && c.Name == "kind" {
			f.eventKinds = append(f.eventKinds, c.Data.([]string)...)
		}
	}
	return nil
}

// TestPipelineRetryAfterFailedInsert: a failed insert keeps everything for
// the retry, including the inferred instance_started event, and the
// pending-row count returns to zero (it used to go negative and loosen the
// overload limit).
func TestPipelineRetryAfterFailedInsert(t *testing.T) {
	ctx := context.Background()
	store := &flakyStore{fails: 1, tables: map[string]int{}}
	p, err := NewPipeline(t.TempDir(), store, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wal.Close()
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	if _, err := recv.exportTraces(ctx, 1, otlptest.Traces(2, 3, time.Now().Add(-time.Minute)), nil, "test"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("first flush: err = %v, want the insert error", err)
	}
	if got := p.nPend.Load(); got != 3 {
		t.Fatalf("after a failed insert %d rows pending, want 3", got)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := p.nPend.Load(); got != 0 {
		t.Errorf("after the retry %d rows pending, want 0", got)
	}
	if store.tables["spans"] != 3 || store.tables["events"] != 1 {
		t.Errorf("inserted %v, want 3 spans and 1 instance_started event", store.tables)
	}
	if len(store.eventKinds) != 1 || store.eventKinds[0] != telemetry.EventInstanceStarted {
		t.Errorf("stored events %v, want one instance_started event", store.eventKinds)
	}
	// Known now: a second export of the same instance infers nothing.
	if _, err := recv.exportTraces(ctx, 1, otlptest.Traces(3, 1, time.Now().Add(-time.Minute)), nil, "test"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if store.tables["events"] != 1 {
		t.Errorf("instance_started inferred twice: %v", store.tables)
	}
}

// TestWireAttributesStoredAsMaps: a protobuf export, whose attributes the
// wire reader hands over as one list and the pipeline encodes without
// maps, is stored exactly as the same export decoded by the generated
// decoder into maps (repeated keys, more than 256 keys, every value type).
func TestWireAttributesStoredAsMaps(t *testing.T) {
	ctx := context.Background()
	ch := openTestStore(t, t.TempDir())
	p, err := NewPipeline(t.TempDir(), ch, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wal.Close()
	if p.stager == nil {
		t.Fatal("the embedded store must take Native blocks")
	}
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	t0 := time.Now().Add(-time.Minute)
	export := func(seed uint64) *coltracepb.ExportTraceServiceRequest {
		req := otlptest.Traces(seed, 3, t0)
		spans := req.ResourceSpans[0].ScopeSpans[0].Spans
		spans[1].Attributes = append(spans[1].Attributes, str("dup", "first"), str("x", "y"), str("dup", "second"),
			&commonpb.KeyValue{Key: "i", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: -7}}},
			&commonpb.KeyValue{Key: "d", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.1}}},
			&commonpb.KeyValue{Key: "b", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: true}}},
			&commonpb.KeyValue{Key: "raw", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 0xff}}}},
			&commonpb.KeyValue{Key: "list", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{
				Values: []*commonpb.AnyValue{{Value: &commonpb.AnyValue_StringValue{StringValue: "a"}}}}}}},
			&commonpb.KeyValue{Key: "empty"})
		for i := 0; i < 300; i++ {
			spans[2].Attributes = append(spans[2].Attributes, str(fmt.Sprintf("k%03d", i), fmt.Sprint(i)))
		}
		return req
	}
	wire, generated := export(41), export(42)
	body, err := proto.Marshal(wire)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recv.exportTraces(ctx, 1, nil, body, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := recv.exportTraces(ctx, 1, generated, nil, "test"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	read := func(seed uint64) []telemetry.Span {
		r, err := ch.Query(ctx, "SELECT "+clickhouse.SpanColumns+" FROM spans FINAL WHERE trace_id = ? ORDER BY span_id", otlptest.TraceHex(seed))
		if err != nil {
			t.Fatal(err)
		}
		out := clickhouse.ScanSpans(r)
		for i := range out {
			out[i].TraceID = ""
		}
		return out
	}
	got, want := read(41), read(42)
	if len(want) != 3 || len(want[2].Attributes) != 256 || want[1].Attributes["dup"] != "second" {
		t.Fatalf("generated decoder's spans: %d, %d attributes on the third, dup = %q", len(want), len(want[2].Attributes), want[1].Attributes["dup"])
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spans read from the wire stored as\n %+v\nwant\n %+v", got, want)
	}
}

// TestPipelineFlushPolicy: the writer inserts once a third of
// MaxPendingRows waits or FlushInterval after its last write, and not for
// a kick that came while fewer rows wait (an insert's rows counted).
func TestPipelineFlushPolicy(t *testing.T) {
	ch := openTestStore(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now().Add(-time.Minute)
	stored := func(seed uint64) int64 {
		return count(t, ch, "SELECT count() AS n FROM spans WHERE trace_id = ?", otlptest.TraceHex(seed))
	}
	waitStored := func(seed uint64, want int64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for stored(seed) != want {
			if time.Now().After(deadline) {
				t.Fatalf("trace %d: %d spans stored after %s, want %d", seed, stored(seed), within, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// By rows: 30 pending rows allowed, 10 trigger an insert; no interval.
	p, err := NewPipeline(t.TempDir(), ch, PipelineConfig{MaxPendingRows: 30, FlushInterval: time.Hour}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	if _, err := recv.exportTraces(ctx, 1, otlptest.Traces(51, 6, t0), nil, "test"); err != nil {
		t.Fatal(err)
	}
	p.kick <- struct{}{} // as if sent during an earlier insert
	time.Sleep(time.Second)
	if n := stored(51); n != 0 {
		t.Fatalf("6 of 10 rows waiting: %d spans inserted", n)
	}
	if _, err := recv.exportTraces(ctx, 1, otlptest.Traces(51, 4, t0.Add(time.Second)), nil, "test"); err != nil {
		t.Fatal(err)
	}
	waitStored(51, 10, 10*time.Second)
	for deadline := time.Now().Add(5 * time.Second); p.nPend.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows pending after the insert", p.nPend.Load())
		}
	}
	cancel()
	<-done

	// By time: a short interval writes what waits, however little.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	p, err = NewPipeline(t.TempDir(), ch, PipelineConfig{MaxPendingRows: 30, FlushInterval: 200 * time.Millisecond}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	recv = &Receiver{Pipeline: p, Log: QuietLog}
	if _, err := recv.exportTraces(ctx, 1, otlptest.Traces(52, 2, t0), nil, "test"); err != nil {
		t.Fatal(err)
	}
	waitStored(52, 2, 10*time.Second)
	cancel()
	<-done
}

// TestSegmentsSealedWhenFull: exports that arrive while no insert is
// taken (as during a slow one) gather in segments of at most half the
// pending rows (plus the export that filled one), each written by an
// insert of its own, not in one insert of everything pending.
func TestSegmentsSealedWhenFull(t *testing.T) {
	ch := openTestStore(t, t.TempDir())
	ctx := context.Background()
	p, err := NewPipeline(t.TempDir(), ch, PipelineConfig{MaxPendingRows: 40, FlushInterval: time.Hour}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	t0 := time.Now().Add(-time.Minute)
	for i := range 6 {
		if _, err := recv.exportTraces(ctx, 1, otlptest.Traces(61, 6, t0.Add(time.Duration(i)*time.Second)), nil, "test"); err != nil {
			t.Fatal(err)
		}
	}
	rows := sealedRows(t, p)
	// 36 spans: a segment sealed at 24 (the fourth export passed 20), the
	// last 12 still open.
	if want := []int{24}; !reflect.DeepEqual(rows, want) {
		t.Fatalf("sealed segments of %v rows, want %v", rows, want)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, ch, "SELECT count() AS n FROM spans WHERE trace_id = ?", otlptest.TraceHex(61)); n != 36 {
		t.Fatalf("%d spans stored, want 36", n)
	}
}

// TestSegmentsSealedByStagedBytes: on the embedded engine a segment is
// also sealed once its staged spans reach InsertBytes, however few rows
// it holds, so no insert of spans outgrows a compact part; the byte count
// returns to zero once the segments are written.
func TestSegmentsSealedByStagedBytes(t *testing.T) {
	ch := openTestStore(t, t.TempDir())
	ctx := context.Background()
	p, err := NewPipeline(t.TempDir(), ch, PipelineConfig{MaxPendingRows: 1000, FlushInterval: time.Hour}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	t0 := time.Now().Add(-time.Minute)
	export := func(i int) {
		t.Helper()
		if _, err := recv.exportTraces(ctx, 1, otlptest.Traces(62, 6, t0.Add(time.Duration(i)*time.Second)), nil, "test"); err != nil {
			t.Fatal(err)
		}
	}
	export(0)
	block := p.nPendBytes.Load() // one export's staged spans
	if block <= 0 {
		t.Fatalf("staged bytes after an export: %d", block)
	}
	// Two exports stay under the bound, the third reaches it.
	p.cfg.InsertBytes = int(2*block + 1)
	for i := 1; i < 6; i++ {
		export(i)
	}
	rows := sealedRows(t, p)
	if want := []int{18, 18}; !reflect.DeepEqual(rows, want) {
		t.Fatalf("sealed segments of %v rows, want %v", rows, want)
	}
	if !p.flushDue() {
		t.Error("6 exports of staged spans (3× the bound's nine tenths) do not make a flush due")
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, ch, "SELECT count() AS n FROM spans WHERE trace_id = ?", otlptest.TraceHex(62)); n != 36 {
		t.Fatalf("%d spans stored, want 36", n)
	}
	if n, b := p.nPend.Load(), p.nPendBytes.Load(); n != 0 || b != 0 {
		t.Errorf("after the flush %d rows and %d bytes still counted as pending", n, b)
	}
}

// sealedRows is the row count of each sealed segment still pending.
func sealedRows(t *testing.T, p *Pipeline) []int {
	t.Helper()
	sealed, err := p.wal.Sealed()
	if err != nil {
		t.Fatal(err)
	}
	var rows []int
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range sealed {
		rows = append(rows, p.pending[s.Seq].count())
	}
	return rows
}

// TestSpansStagedOnDisk: acknowledged spans wait for their insert in a
// stage file in the engine's tmp dir (not the Go heap), removed once
// written; when a stage cannot be made (here: the tmp dir is gone) the
// export is still acknowledged and its segment is written from the
// write-ahead log instead, every span once.
func TestSpansStagedOnDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ch := openTestStore(t, dir)
	p, err := NewPipeline(t.TempDir(), ch, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wal.Close()
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	t0 := time.Now().Add(-time.Minute)
	stages := func() (n int, bytes int64) {
		m, _ := filepath.Glob(filepath.Join(dir, "tmp", "stage-*"))
		for _, f := range m {
			if fi, err := os.Stat(f); err == nil {
				bytes += fi.Size()
			}
		}
		return len(m), bytes
	}
	stored := func(seed uint64) int64 {
		return count(t, ch, "SELECT count() AS n FROM spans FINAL WHERE trace_id = ?", otlptest.TraceHex(seed))
	}
	export := func(seed uint64) {
		t.Helper()
		body, err := proto.Marshal(otlptest.Traces(seed, 4, t0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recv.exportTraces(ctx, 1, nil, body, "test"); err != nil {
			t.Fatalf("export %d: %v", seed, err)
		}
	}

	export(1)
	export(2)
	if n, size := stages(); n != 1 || size == 0 {
		t.Fatalf("stage files before the insert: %d holding %d bytes, want one with both exports", n, size)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if stored(1) != 4 || stored(2) != 4 {
		t.Fatalf("staged spans stored: %d and %d, want 4 each", stored(1), stored(2))
	}
	if n, _ := stages(); n != 0 {
		t.Errorf("%d stage files left after the insert", n)
	}

	// No stage can be created: acknowledged all the same, written from the log.
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		t.Fatal(err)
	}
	export(3)
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o750); err != nil {
		t.Fatal(err)
	}
	export(4) // same segment: it is written from the log as a whole
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if stored(3) != 4 || stored(4) != 4 {
		t.Errorf("spans of a segment that could not be staged: %d and %d stored, want 4 each", stored(3), stored(4))
	}
	if n := p.nPend.Load(); n != 0 {
		t.Errorf("pending rows after the flush: %d", n)
	}
	if n, _ := stages(); n != 0 {
		t.Errorf("%d stage files left", n)
	}
}
