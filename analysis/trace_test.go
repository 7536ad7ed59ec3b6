package analysis_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// TestTraceResources: the trace view fills every span's resource, from the
// resources table for spans that carry a resource_hash and from the row
// itself for spans stored before it (hash 0).
func TestTraceResources(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
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
