package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TestQueryRequestsMatchesScan: the typed decoder yields exactly what the
// generic path (Result, then ScanRequests) yields from the same rows (NULLs
// included), and a statement with other columns falls
// back to the generic path.
func TestQueryRequestsMatchesScan(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	base := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	var rows []telemetry.LLMRequest
	for i := 0; i < 300; i++ {
		r := telemetry.LLMRequest{ProjectID: 7, TraceID: fmt.Sprintf("%032x", i), SpanID: fmt.Sprintf("%016x", i),
			Service: []string{"chat", "rag"}[i%2], ServerService: "vllm", Model: "m", Provider: "vllm", Instance: fmt.Sprintf("pod-%d", i%3),
			Start: base.Add(time.Duration(i) * time.Millisecond), CallIndex: i % 4, ColdStart: i%5 == 0, Error: i%7 == 0,
			Route: "/v1/chat", Tenant: fmt.Sprintf("t%d", i%11)}
		if i%3 != 0 { // every third leaves the optional figures NULL
			r.TTFT, r.Queue, r.Prefill = telemetry.Ptr(float64(i)+0.25), telemetry.Ptr(1.5), telemetry.Ptr(0.0)
			r.PreInference, r.Network, r.Decode, r.E2E = telemetry.Ptr(2.0), telemetry.Ptr(3.0), telemetry.Ptr(4.0), telemetry.Ptr(5.0)
			r.ITL, r.ColdStartWait = telemetry.Ptr(6.0), telemetry.Ptr(7.0)
			r.InputTokens, r.OutputTokens = telemetry.Ptr(int64(i*10)), telemetry.Ptr(int64(-1))
		}
		rows = append(rows, r)
	}
	if err := s.Insert(ctx, RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	typedMatchesScan(t, s, s.QueryRequests, ScanRequests, len(rows),
		"SELECT "+RequestColumns+" FROM llm_requests FINAL WHERE project_id = ? ORDER BY start",
		"SELECT "+RequestColumns+", version FROM llm_requests WHERE project_id = ? ORDER BY start") // version: generic path
	// The typed path really is taken for RequestColumns.
	out, err := s.b.(*embedded).run(ctx, "SELECT "+RequestColumns+" FROM llm_requests", rowBinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeRequests(out); err != nil {
		t.Fatalf("RequestColumns do not decode on the typed path: %v", err)
	}
	if _, err := decodeRequests(out[:len(out)-3]); err == nil || errors.Is(err, errUnsupportedType) {
		t.Errorf("truncated output: %v, want a decode error", err)
	}
}

// TestQuerySpanCoresMatchesScan: the typed span decoder yields what the
// generic path (Result, then ScanSpanCores) yields from the same rows:
// NULL and set LLM figures, the route and tenant back in the attributes,
// with and without those columns; other columns take the generic path.
func TestQuerySpanCoresMatchesScan(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	base := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	var spans []telemetry.Span
	for i := 0; i < 300; i++ {
		sp := telemetry.Span{ProjectID: 7, TraceID: fmt.Sprintf("%032x", i/3), SpanID: fmt.Sprintf("%016x", i), ParentSpanID: fmt.Sprintf("%016x", i-1),
			Service: []string{"app", "vllm"}[i%2], Instance: fmt.Sprintf("pod-%d", i%3), Name: "chat", Start: base.Add(time.Duration(i) * time.Millisecond),
			End: base.Add(time.Duration(i+500) * time.Millisecond), StatusCode: []string{"ok", "error"}[i%2]}
		switch i % 3 {
		case 0:
			sp.LLM = telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "openai", Model: "gpt", Operation: "chat",
				InputTokens: telemetry.Ptr(int64(i)), OutputTokens: telemetry.Ptr(int64(-1)), ClientTTFT: telemetry.Ptr(time.Duration(i) * time.Millisecond)}
			sp.Attributes = map[string]string{telemetry.RouteAttribute: "/v1/chat", "tenant.id": fmt.Sprint("t", i%7), "other": "x"}
			if sp.StatusCode == "error" {
				sp.LLM.ErrorType = "429"
			}
		case 1:
			sp.LLM = telemetry.LLMCall{Role: telemetry.LLMServer, Provider: "vllm", Model: "llama", QueueTime: telemetry.Ptr(time.Millisecond),
				PrefillTime: telemetry.Ptr(2 * time.Millisecond), ServerTTFT: telemetry.Ptr(3 * time.Millisecond), DecodeTime: telemetry.Ptr(time.Duration(0)),
				ServerE2E: telemetry.Ptr(5 * time.Millisecond)}
			sp.Attributes = map[string]string{"tenant": "acme"}
		}
		spans = append(spans, sp)
	}
	if err := s.Insert(ctx, SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}
	for _, per := range []int{1, 40, 1000} {
		typedMatchesScan(t, s, spansByTrace(t, s, per), ScanSpanCores, len(spans),
			"SELECT "+SpanCoreColumns+", route, tenant FROM spans WHERE project_id = ? ORDER BY start",
			"SELECT "+SpanCoreColumns+" FROM spans WHERE project_id = ? ORDER BY start",
			"SELECT "+SpanCoreColumns+", route, tenant, kind FROM spans WHERE project_id = ? ORDER BY start") // kind: generic path
	}
	// The route and tenant come back under the keys assembly reads.
	got, err := spansByTrace(t, s, 10)(ctx, "SELECT "+SpanCoreColumns+", route, tenant FROM spans WHERE span_id = ?", spans[0].SpanID)
	if err != nil || len(got) != 1 {
		t.Fatal(err, len(got))
	}
	if a := got[0].Attributes; a[telemetry.RouteAttribute] != "/v1/chat" || telemetry.SpanTenant(a) != "t0" || len(a) != 2 {
		t.Errorf("attributes %v, want the route and tenant t0 only", a)
	}
	// The typed path really is taken, in batches, and a cut answer is an
	// error, not a silently shorter one.
	out, err := s.b.(*embedded).run(ctx, "SELECT "+SpanCoreColumns+", route, tenant FROM spans", rowBinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	count := func([]telemetry.Span) error { calls++; return nil }
	if err := decodeTypedEach(out, spanCoreFields(), "trace_id", 40, count); err != nil || calls < 2 {
		t.Fatalf("SpanCoreColumns in batches of 40 spans: %v after %d batches, want several", err, calls)
	}
	if err := decodeTypedEach(out[:len(out)-3], spanCoreFields(), "trace_id", 40, count); err == nil || errors.Is(err, errUnsupportedType) {
		t.Errorf("truncated output: %v, want a decode error", err)
	}
	if err := s.QuerySpanCores(ctx, 40, count, "SELECT span_id, start FROM spans"); err == nil {
		t.Error("a statement without trace_id was split into batches of traces")
	}
}

// spansByTrace reads spans with QuerySpanCores in batches of about per
// spans, checks that no trace is split between batches, and returns them
// all in start order (the test's queries order by start).
func spansByTrace(t *testing.T, s *Store, per int) func(context.Context, string, ...any) ([]telemetry.Span, error) {
	return func(ctx context.Context, q string, args ...any) ([]telemetry.Span, error) {
		var all []telemetry.Span
		batchOf := map[string]int{}
		batch := 0
		err := s.QuerySpanCores(ctx, per, func(spans []telemetry.Span) error {
			batch++
			for _, sp := range spans {
				if b, ok := batchOf[sp.TraceID]; ok && b != batch {
					t.Errorf("per %d: trace %s in batches %d and %d", per, sp.TraceID, b, batch)
				}
				batchOf[sp.TraceID] = batch
			}
			all = append(all, spans...) // copies: the batch is reused
			return nil
		}, q, args...)
		slices.SortStableFunc(all, func(a, b telemetry.Span) int { return a.Start.Compare(b.Start) })
		if per < len(all)/2 && batch < 2 {
			t.Errorf("per %d: %d spans came in %d batch", per, len(all), batch)
		}
		return all, err
	}
}

// typedMatchesScan checks that a typed read of each query (of project 7)
// returns exactly what the generic path (Result, then scan) does, want
// rows of it.
func typedMatchesScan[T any](t *testing.T, s *Store, typed func(context.Context, string, ...any) ([]T, error), scan func(*Result) []T, want int, queries ...string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range queries {
		got, err := typed(ctx, q, 7)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Query(ctx, q, 7)
		if err != nil {
			t.Fatal(err)
		}
		if scanned := scan(r); !reflect.DeepEqual(got, scanned) {
			for i := range scanned {
				if i < len(got) && !reflect.DeepEqual(got[i], scanned[i]) {
					t.Fatalf("%.60s: row %d\n got  %+v\n want %+v", q, i, got[i], scanned[i])
				}
			}
			t.Fatalf("%.60s: %d rows, want %d", q, len(got), len(scanned))
		}
		if len(got) != want {
			t.Fatalf("%.60s: %d rows, want %d", q, len(got), want)
		}
	}
}
