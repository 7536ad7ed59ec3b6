package clickhouse

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// requestEngineColumns are the llm_requests columns the engine computes
// itself (MATERIALIZED or ALIAS in the migrations), which requestSchema
// leaves out; the migrations define none today.
var requestEngineColumns = map[string]bool{}

// TestRequestSchemaMatchesTable: every column the migrations give
// llm_requests is in requestSchema with the type DESCRIBE reports (or is
// one the engine computes), every schema column is in the table, and each
// typed decoder reads the schema's type.
func TestRequestSchemaMatchesTable(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	r, err := s.Query(context.Background(), "DESCRIBE TABLE llm_requests")
	if err != nil {
		t.Fatal(err)
	}
	schema := map[string]requestColumn{}
	for _, c := range requestSchema {
		if _, dup := schema[c.name]; dup {
			t.Errorf("column %s described twice", c.name)
		}
		schema[c.name] = c
		if (c.typed == nil) != (c.part == requestVersioning) {
			t.Errorf("column %s (part %d): a typed decoder exactly when it is a request's column", c.name, c.part)
		}
		if c.typed != nil && c.typed().typ != c.typ {
			t.Errorf("column %s: decoder reads %s, schema says %s", c.name, c.typed().typ, c.typ)
		}
	}
	table := map[string]bool{}
	for i := range r.Len() {
		w := r.Row(i)
		name, typ, kind := w.String("name"), w.String("type"), w.String("default_type")
		table[name] = true
		if kind == "MATERIALIZED" || kind == "ALIAS" || requestEngineColumns[name] {
			if !requestEngineColumns[name] || schema[name].name != "" {
				t.Errorf("column %s is %q: list it in requestEngineColumns only", name, kind)
			}
			continue
		}
		c, ok := schema[name]
		if !ok {
			t.Errorf("table column %s %s is not in requestSchema", name, typ)
		} else if c.typ != typ {
			t.Errorf("column %s: table type %s, schema type %s", name, typ, c.typ)
		}
	}
	for _, c := range requestSchema {
		if !table[c.name] {
			t.Errorf("schema column %s is not in the table", c.name)
		}
	}
}

// TestRequestSchemaRoundTrip: a request with every field set, and one with
// every optional field unset, come back from the engine equal to what was
// written (LLMRequest.Equal compares every field:
// TestLLMRequestEqualCoversEveryField), through the typed decoder and the
// generic readers; the batch's version and tombstone columns say what
// RequestsRewriteBatch promises.
func TestRequestSchemaRoundTrip(t *testing.T) {
	full := fullRequest()
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("field %s is unset: set it so the round trip covers it", v.Type().Field(i).Name)
		}
	}
	bare := telemetry.LLMRequest{ProjectID: 9, TraceID: "trace-b", SpanID: "span-b", Start: full.Start.Add(time.Second)}
	gone := telemetry.LLMRequest{ProjectID: 9, TraceID: "trace-c", SpanID: "span-c", Start: full.Start.Add(2 * time.Second)}
	old := bare
	old.Model = "older"

	s := openTemp(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	if err := s.Insert(ctx, RequestsRewriteBatch([]telemetry.LLMRequest{full, bare}, []telemetry.LLMRequest{gone}, []telemetry.LLMRequest{old}, 5)); err != nil {
		t.Fatal(err)
	}
	const where = " FROM llm_requests WHERE project_id = 9 AND is_deleted = 0 ORDER BY start"
	typed, err := s.QueryRequests(ctx, "SELECT "+RequestColumns+where)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Query(ctx, "SELECT "+RequestColumns+", "+DetailColumns+where)
	if err != nil {
		t.Fatal(err)
	}
	generic := ScanRequests(res)
	ScanDetails(res, generic)
	ScanDetails(res, typed)
	want := []telemetry.LLMRequest{full, bare}
	for name, got := range map[string][]telemetry.LLMRequest{"typed": typed, "generic": generic} {
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", name, len(got), len(want))
		}
		for i := range want {
			if !want[i].Equal(&got[i]) {
				t.Errorf("%s row %d:\n got %+v\nwant %+v", name, i, got[i], want[i])
			}
		}
	}

	kept, err := s.Query(ctx, "SELECT trace_id, model, version, is_deleted FROM llm_requests WHERE project_id = 9 ORDER BY trace_id, version")
	if err != nil {
		t.Fatal(err)
	}
	type stored struct {
		trace, model     string
		version, deleted int64
	}
	var got []stored
	for i := range kept.Len() {
		w := kept.Row(i)
		got = append(got, stored{w.String("trace_id"), w.String("model"), w.Int("version"), w.Int("is_deleted")})
	}
	wantStored := []stored{{"trace-a", "llama", 5, 0}, {"trace-b", "older", 4, 1}, {"trace-b", "", 5, 0}, {"trace-c", "", 5, 1}}
	if !reflect.DeepEqual(got, wantStored) {
		t.Errorf("stored versions %+v, want %+v", got, wantStored)
	}
}

// fullRequest is a request with every field set (none to its zero value).
func fullRequest() telemetry.LLMRequest {
	return telemetry.LLMRequest{ProjectID: 9, TraceID: "trace-a", SpanID: "span-a", Service: "chat", ServerService: "vllm",
		Model: "llama", Provider: "vllm", Instance: "pod-1", Start: time.Date(2026, 12, 6, 9, 0, 0, 123456789, time.UTC),
		TTFT: telemetry.Ptr(1.5), PreInference: telemetry.Ptr(2.5), Queue: telemetry.Ptr(3.5), Prefill: telemetry.Ptr(4.5),
		Network: telemetry.Ptr(5.5), Decode: telemetry.Ptr(6.5), E2E: telemetry.Ptr(7.5), ITL: telemetry.Ptr(8.5),
		ColdStartWait: telemetry.Ptr(9.5), InputTokens: telemetry.Ptr(int64(900)), OutputTokens: telemetry.Ptr(int64(120)),
		ColdStart: true, Error: true, ErrorType: "timeout", CallIndex: 3, Route: "/v1/chat", Tenant: "acme",
		Join: telemetry.JoinID, ServerTraceID: "trace-s", ServerSpanID: "span-s", TTFTSource: "event:first_token",
		TokenSource: telemetry.TokensMixed, Preemptions: telemetry.Ptr(int64(2))}
}
