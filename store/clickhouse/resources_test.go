package clickhouse

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TestResourcesReadBack: spans with a resource_hash store no resource map;
// the trace view gets it back from the resources table, through both insert
// paths (column slices and pre-encoded Native blocks), while a span stored
// the old way (map inline, hash 0) keeps its own.
func TestResourcesReadBack(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	pod := map[string]string{"service.name": "chat", "k8s.pod.name": "chat-7d9f", "k8s.namespace.name": "prod", "host.name": "node-3"}
	res := telemetry.Resource{ProjectID: 1, Hash: telemetry.ResourceHash(1, pod), Service: "chat", Attributes: pod,
		LastSeen: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)}
	// Written twice (two processes, or a retried flush): folded.
	for range 2 {
		if err := s.Insert(ctx, ResourcesBatch([]telemetry.Resource{res})); err != nil {
			t.Fatal(err)
		}
	}
	spans := sampleSpans() // one trace: span 0 keeps its map inline (hash 0)
	legacy := map[string]string{"service.name": "chat"}
	spans[1].Resource, spans[1].ResourceHash = pod, res.Hash
	third := spans[1]
	third.SpanID, third.Start = strings.Repeat("03", 8), third.Start.Add(time.Millisecond)
	if err := s.Insert(ctx, SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}
	blk, err := EncodeSpans([]telemetry.Span{third})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, SpanBlocksBatch([][]byte{blk}, 1)); err != nil {
		t.Fatal(err)
	}

	r, err := s.Query(ctx, "SELECT count() AS n, countIf(notEmpty(resource)) AS inline, countIf(resource_hash = ?) AS hashed FROM spans FINAL", res.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Row(0); w.Int("n") != 3 || w.Int("inline") != 1 || w.Int("hashed") != 2 {
		t.Errorf("stored %d spans, %d with a resource map, %d with the hash; want 3, 1 (the old-style row), 2", w.Int("n"), w.Int("inline"), w.Int("hashed"))
	}
	r, err = s.Query(ctx, "SELECT count() AS n FROM resources FINAL")
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Row(0).Int("n"); n != 1 {
		t.Errorf("%d resources, want 1", n)
	}

	r, err = s.Query(ctx, "SELECT "+SpanColumns+" FROM spans FINAL WHERE project_id = ? AND trace_id = ? ORDER BY start", uint32(1), spans[0].TraceID)
	if err != nil {
		t.Fatal(err)
	}
	got := ScanSpans(r)
	if len(got) != 3 {
		t.Fatalf("read %d spans, want 3", len(got))
	}
	if err := s.AttachResources(ctx, 1, got); err != nil {
		t.Fatal(err)
	}
	for i, want := range []map[string]string{legacy, pod, pod} {
		if !reflect.DeepEqual(got[i].Resource, want) {
			t.Errorf("span %s: resource %v, want %v", got[i].SpanID, got[i].Resource, want)
		}
	}
	if got[0].ResourceHash != 0 || got[1].ResourceHash != res.Hash || got[2].ResourceHash != res.Hash {
		t.Errorf("resource hashes %d, %d, %d; want 0, %d, %d", got[0].ResourceHash, got[1].ResourceHash, got[2].ResourceHash, res.Hash, res.Hash)
	}
	// Another project's resources stay invisible.
	other := ScanSpans(r)
	if err := s.AttachResources(ctx, 2, other); err != nil {
		t.Fatal(err)
	}
	if len(other[1].Resource) != 0 {
		t.Errorf("project 2 read project 1's resource: %v", other[1].Resource)
	}
}
