package analysis_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// TestTraceResources: the trace view fills every span's resource, from the
// resources table for spans that carry a resource_hash and from the row
// itself for spans stored before it (hash 0).
func TestTraceResources(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	t0 := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	pod := map[string]string{"service.name": "vllm", "service.instance.id": "vllm-0", "k8s.pod.name": "vllm-0", "host.name": "gpu-1"}
	old := map[string]string{"service.name": "chat", "host.name": "node-3"}
	hash := telemetry.ResourceHash(1, pod)
	trace := strings.Repeat("cd", 16)
	spans := []telemetry.Span{
		{ProjectID: 1, TraceID: trace, SpanID: strings.Repeat("01", 8), Service: "chat", Name: "POST /chat", Kind: "server",
			Start: t0, End: t0.Add(time.Second), StatusCode: "ok", Resource: old},
		{ProjectID: 1, TraceID: trace, SpanID: strings.Repeat("02", 8), ParentSpanID: strings.Repeat("01", 8), Service: "vllm",
			Instance: "vllm-0", Name: "llm_request", Kind: "server", Start: t0.Add(time.Millisecond), End: t0.Add(900 * time.Millisecond),
			StatusCode: "unset", Resource: pod, ResourceHash: hash},
	}
	if err := srv.CH.Insert(ctx, clickhouse.ResourcesBatch([]telemetry.Resource{{ProjectID: 1, Hash: hash, Service: "vllm",
		Attributes: pod, LastSeen: t0.Add(time.Hour)}})); err != nil {
		t.Fatal(err)
	}
	if err := srv.CH.Insert(ctx, clickhouse.SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}
	got, _, err := (&analysis.Queries{CH: srv.CH}).Trace(ctx, 1, trace)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("trace has %d spans, want 2", len(got))
	}
	for i, want := range []map[string]string{old, pod} {
		if !reflect.DeepEqual(got[i].Resource, want) {
			t.Errorf("span %s: resource %v, want %v", got[i].SpanID, got[i].Resource, want)
		}
	}
}

// TestTraceReadWithinBounds: the trace view reads spans within the trace's
// starts from trace_bounds, so a trace whose spans lie days apart is read
// whole, a neighbour's spans in between are not taken, and an unknown id
// has no spans. A span stored twice (a retried export) is shown once.
func TestTraceReadWithinBounds(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	t0 := time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Microsecond)
	trace, other := strings.Repeat("ab", 16), strings.Repeat("ef", 16)
	span := func(trace, id string, start time.Time, service string) telemetry.Span {
		return telemetry.Span{ProjectID: 1, TraceID: trace, SpanID: strings.Repeat(id, 8), Service: service, Name: "work",
			Kind: "internal", Start: start, End: start.Add(time.Second), StatusCode: "unset"}
	}
	spans := []telemetry.Span{
		span(trace, "01", t0, "chat"),
		span(other, "02", t0.Add(24*time.Hour), "chat"),
		span(trace, "03", t0.Add(48*time.Hour), "vllm"),
	}
	// Separate inserts, as exports days apart arrive; the first export is
	// retried (the same span stored twice, one version for the page).
	for _, sp := range append(spans, spans[0]) {
		if err := srv.CH.Insert(ctx, clickhouse.SpansBatch([]telemetry.Span{sp})); err != nil {
			t.Fatal(err)
		}
	}
	q := &analysis.Queries{CH: srv.CH}
	got, _, err := q.Trace(ctx, 1, trace)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.SpanID[:2])
	}
	if !reflect.DeepEqual(ids, []string{"01", "03"}) {
		t.Fatalf("trace spans %v, want [01 03] (both days, not the other trace's)", ids)
	}
	if got, reqs, err := q.Trace(ctx, 1, strings.Repeat("99", 16)); err != nil || len(got)+len(reqs) != 0 {
		t.Fatalf("unknown trace: %d spans, %d requests, %v; want none", len(got), len(reqs), err)
	}
	if got, _, err := q.Trace(ctx, 2, trace); err != nil || len(got) != 0 {
		t.Fatalf("another project's trace: %d spans, %v; want none", len(got), err)
	}
}
