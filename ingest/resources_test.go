package ingest

import (
	"context"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// countingStore records what reaches the real store, table by table.
type countingStore struct {
	*clickhouse.Store
	mu     sync.Mutex
	rows   map[string]int
	tables []string // in insert order
}

func (c *countingStore) Insert(ctx context.Context, b *clickhouse.Batch) error {
	c.mu.Lock()
	if c.rows == nil {
		c.rows = map[string]int{}
	}
	c.rows[b.Table] += b.Rows()
	c.tables = append(c.tables, b.Table)
	c.mu.Unlock()
	return c.Store.Insert(ctx, b)
}

// Resources of twoResourceExport: a vLLM pod and an app pod.
var (
	vllmResource = map[string]string{"service.name": "vllm", "service.instance.id": "vllm-0"}
	appResource  = map[string]string{"service.name": "rag-chat", "k8s.pod.name": "rag-chat-5f7c", "k8s.namespace.name": "prod",
		"host.name": "node-3", "telemetry.sdk.language": "python"}
)

// twoResourceExport is one export of trace seed with spans from two
// resources: three from vLLM, two from the app.
func twoResourceExport(seed uint64, t0 time.Time) *coltracepb.ExportTraceServiceRequest {
	req := otlptest.ExportOf(otlptest.Span(seed, 0, t0), otlptest.Span(seed, 1, t0), otlptest.Span(seed, 2, t0))
	var attrs []*commonpb.KeyValue
	for k, v := range appResource {
		attrs = append(attrs, &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}})
	}
	req.ResourceSpans = append(req.ResourceSpans, &tracepb.ResourceSpans{
		Resource:   &resourcepb.Resource{Attributes: attrs},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{otlptest.Span(seed, 3, t0), otlptest.Span(seed, 4, t0)}}},
	})
	return req
}

// readTrace reads a trace as the trace view does, resources attached.
func readTrace(t *testing.T, ch *clickhouse.Store, project uint32, seed uint64) []telemetry.Span {
	t.Helper()
	ctx := context.Background()
	r, err := ch.Query(ctx, "SELECT "+clickhouse.SpanColumns+" FROM spans FINAL WHERE project_id = ? AND trace_id = ? ORDER BY start, span_id",
		project, otlptest.TraceHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	spans := clickhouse.ScanSpans(r)
	if err := ch.AttachResources(ctx, project, spans); err != nil {
		t.Fatal(err)
	}
	return spans
}

func checkResources(t *testing.T, spans []telemetry.Span) {
	t.Helper()
	if len(spans) != 5 {
		t.Fatalf("read %d spans, want 5", len(spans))
	}
	for _, s := range spans {
		want := vllmResource
		if s.Service == "rag-chat" {
			want = appResource
		}
		if s.ResourceHash == 0 || !reflect.DeepEqual(s.Resource, want) {
			t.Errorf("span %s of %s: resource %v (hash %d), want %v", s.SpanID, s.Service, s.Resource, s.ResourceHash, want)
		}
	}
}

// TestPipelineWritesEachResourceOnce: over several flushes, each distinct
// resource is written once, before the spans that reference it; the span
// rows carry its hash instead of the map, and the trace view reads it back.
func TestPipelineWritesEachResourceOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store := &countingStore{Store: openTestStore(t, filepath.Join(dir, "clickhouse"))}
	p, err := NewPipeline(filepath.Join(dir, "wal"), store, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wal.Close()
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	t0 := time.Now().UTC().Add(-time.Minute)
	for seed := uint64(1); seed <= 3; seed++ {
		if _, err := recv.exportTraces(ctx, 1, twoResourceExport(seed, t0), nil, "test"); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if store.rows["resources"] != 2 || store.rows["spans"] != 15 {
		t.Errorf("inserted %v, want 2 resources (once each) and 15 spans", store.rows)
	}
	if len(store.tables) < 2 || store.tables[0] != "resources" || store.tables[1] != "spans" {
		t.Errorf("insert order %v, want resources before spans", store.tables)
	}
	if n := count(t, store.Store, "SELECT count() AS n FROM spans FINAL WHERE notEmpty(resource) OR resource_hash = 0"); n != 0 {
		t.Errorf("%d span rows still hold their resource map", n)
	}
	for seed := uint64(1); seed <= 3; seed++ {
		checkResources(t, readTrace(t, store.Store, 1, seed))
	}
}

// TestReplayWritesTheSameRows: an export acknowledged by a process that
// died before its flush is replayed from the write-ahead log by the next
// one, which writes its resources too: the trace reads back exactly as one
// written by a live process (spans encoded on receipt).
func TestReplayWritesTheSameRows(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t0 := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)

	// The process that dies: acknowledged, never flushed.
	walDir := filepath.Join(dir, "wal")
	dead, err := NewPipeline(walDir, nil, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&Receiver{Pipeline: dead, Log: QuietLog}).exportTraces(ctx, 1, twoResourceExport(10, t0), nil, "test"); err != nil {
		t.Fatal(err)
	}
	if err := dead.wal.Close(); err != nil {
		t.Fatal(err)
	}

	// The next start over the dead process's log, into an empty store.
	store := &countingStore{Store: openTestStore(t, filepath.Join(dir, "clickhouse"))}
	next, err := NewPipeline(walDir, store, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer next.wal.Close()
	if err := next.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	replayed := readTrace(t, store.Store, 1, 10)
	checkResources(t, replayed)

	// A live process writes the same export (another trace id).
	live, err := NewPipeline(filepath.Join(dir, "wal-live"), store, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer live.wal.Close()
	if _, err := (&Receiver{Pipeline: live, Log: QuietLog}).exportTraces(ctx, 1, twoResourceExport(11, t0), nil, "test"); err != nil {
		t.Fatal(err)
	}
	if err := live.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if store.rows["spans"] != 10 {
		t.Fatalf("inserted %v, want 10 spans (5 replayed, 5 live)", store.rows)
	}
	written := readTrace(t, store.Store, 1, 11)
	for i := range replayed {
		replayed[i].TraceID = written[i].TraceID
	}
	if !reflect.DeepEqual(replayed, written) {
		t.Errorf("replayed trace differs from the live one:\n got %+v\nwant %+v", replayed, written)
	}
	if n := count(t, store.Store, "SELECT count() AS n FROM resources FINAL"); n != 2 {
		t.Errorf("%d resources after the replay, want 2", n)
	}
}
