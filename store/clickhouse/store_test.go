package clickhouse

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// openTemp opens the embedded engine in a fresh dir and migrates it.
func openTemp(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{DataDir: dir, RetentionDays: 7}, quietLog)
	if err != nil {
		t.Fatalf("open embedded clickhouse: %v", err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		s.Close()
		t.Fatalf("migrate: %v", err)
	}
	return s
}

func sampleSpans() []telemetry.Span {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	return []telemetry.Span{
		{
			ProjectID: 1, TraceID: strings.Repeat("ab", 16), SpanID: strings.Repeat("01", 8), Service: "chat",
			Instance: "chat-1", Name: "POST /chat", Kind: "server", Start: t0, End: t0.Add(2 * time.Second),
			StatusCode: "ok", Attributes: map[string]string{"http.route": "/chat", "evil": "'); DROP TABLE spans; --\\"},
			Resource: map[string]string{"service.name": "chat"},
		},
		{
			ProjectID: 1, TraceID: strings.Repeat("ab", 16), SpanID: strings.Repeat("02", 8), ParentSpanID: strings.Repeat("01", 8),
			Service: "chat", Name: "chat llama", Kind: "client", Start: t0.Add(300 * time.Millisecond), End: t0.Add(1900 * time.Millisecond),
			StatusCode: "unset",
			LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "vllm", Model: "llama-3-8b", InputTokens: telemetry.Ptr[int64](812),
				OutputTokens: telemetry.Ptr[int64](120), ClientTTFT: telemetry.Ptr(412 * time.Millisecond), ErrorType: "RateLimitError"},
			EventNames: []string{"gen_ai.first_token"}, EventTimes: []time.Time{t0.Add(712 * time.Millisecond)},
		},
	}
}

func TestEmbeddedRoundTripAndRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTemp(t, dir)
	want := sampleSpans()
	if err := s.Insert(ctx, SpansBatch(want)); err != nil {
		t.Fatal(err)
	}
	// A retried export of the same spans must not double them.
	if err := s.Insert(ctx, SpansBatch(want)); err != nil {
		t.Fatal(err)
	}
	read := func(s *Store) []telemetry.Span {
		r, err := s.Query(ctx, "SELECT "+SpanColumns+" FROM spans FINAL WHERE project_id = ? AND trace_id = ? ORDER BY start", uint32(1), want[0].TraceID)
		if err != nil {
			t.Fatal(err)
		}
		return ScanSpans(r)
	}
	got := read(s)
	if len(got) != 2 {
		t.Fatalf("got %d spans, want 2 (dedupe by trace_id, span_id)", len(got))
	}
	for i := range want {
		w := want[i]
		if w.Attributes == nil {
			w.Attributes = map[string]string{}
		}
		if w.Resource == nil {
			w.Resource = map[string]string{}
		}
		if w.EventNames == nil {
			w.EventNames, w.EventTimes = []string{}, []time.Time{}
		}
		if !reflect.DeepEqual(got[i], w) {
			t.Errorf("span %d:\n got %+v\nwant %+v", i, got[i], w)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Same process, same dir: data survives a restart of the engine.
	s2 := openTemp(t, dir)
	defer s2.Close()
	if got := read(s2); len(got) != 2 || got[1].LLM.Model != "llama-3-8b" {
		t.Fatalf("after restart: %+v", got)
	}
}

// TestSpanBlocksMatchSpansBatch: spans encoded on receipt (one Native block
// per export, several blocks per insert) are stored exactly as SpansBatch
// stores them.
func TestSpanBlocksMatchSpansBatch(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	if !s.TakesNative() {
		t.Fatal("the embedded engine must take Native blocks")
	}
	got, want, n := storedAsSpansBatch(t, s, strings.Repeat("cd", 16), func(viaBlocks []telemetry.Span) {
		var blocks [][]byte
		for i := range viaBlocks {
			b, err := EncodeSpans(viaBlocks[i : i+1])
			if err != nil {
				t.Fatal(err)
			}
			blocks = append(blocks, b)
		}
		if err := s.Insert(ctx, SpanBlocksBatch(blocks, len(viaBlocks))); err != nil {
			t.Fatal(err)
		}
	})
	if len(want) != n || !reflect.DeepEqual(got, want) {
		t.Errorf("spans inserted as Native blocks:\n got %+v\nwant %+v", got, want)
	}
}

// storedAsSpansBatch stores sampleSpans twice: under trace through insert,
// the way under test, and under their own trace id through SpansBatch. It
// returns both as read back (trace ids cleared) and how many were stored.
func storedAsSpansBatch(t *testing.T, s *Store, trace string, insert func([]telemetry.Span)) (got, want []telemetry.Span, n int) {
	t.Helper()
	spans := sampleSpans()
	other := make([]telemetry.Span, len(spans))
	copy(other, spans)
	for i := range other {
		other[i].TraceID = trace
	}
	insert(other)
	if err := s.Insert(context.Background(), SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}
	return traceSpansWithoutID(t, s, trace), traceSpansWithoutID(t, s, spans[0].TraceID), len(spans)
}

func TestEmbeddedOneOwner(t *testing.T) {
	dir := t.TempDir()
	s := openTemp(t, dir)
	defer s.Close()
	if _, err := Open(context.Background(), Config{DataDir: t.TempDir()}, nil); err == nil || !strings.Contains(err.Error(), "already open") {
		t.Fatalf("second engine in one process: err = %v", err)
	}
	// Another process would hold the flock; a second open file description
	// conflicts the same way.
	if _, err := lockDir(dir); err == nil || !strings.Contains(err.Error(), "in use by another Tokenpath process") {
		t.Fatalf("second lock on %s: err = %v", dir, err)
	}
}

func TestEmbeddedRequestsEventsMetrics(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	req := telemetry.LLMRequest{ProjectID: 3, TraceID: "t1", SpanID: "s1", Service: "chat", Model: "m", Start: t0,
		TTFT: telemetry.Ptr(412.5), Queue: telemetry.Ptr(12.0), InputTokens: telemetry.Ptr[int64](10), ColdStart: true, CallIndex: 2}
	if err := s.Insert(ctx, RequestsBatch([]telemetry.LLMRequest{req}, nil, 1)); err != nil {
		t.Fatal(err)
	}
	r, err := s.Query(ctx, "SELECT "+RequestColumns+" FROM llm_requests FINAL WHERE project_id = ?", uint32(3))
	if err != nil {
		t.Fatal(err)
	}
	got := ScanRequests(r)
	if len(got) != 1 || !reflect.DeepEqual(got[0], req) {
		t.Fatalf("requests:\n got %+v\nwant %+v", got, req)
	}
	// A tombstone with a higher version hides the row.
	if err := s.Insert(ctx, RequestsBatch(nil, []telemetry.LLMRequest{req}, 2)); err != nil {
		t.Fatal(err)
	}
	r, err = s.Query(ctx, "SELECT count() AS n FROM llm_requests FINAL WHERE project_id = ?", uint32(3))
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Row(0).Int("n"); n != 0 {
		t.Fatalf("after tombstone: %d rows", n)
	}

	ev := telemetry.Event{ProjectID: 3, Time: t0, Kind: telemetry.EventScale, Service: "vllm", FromReplicas: telemetry.Ptr[int32](0),
		ToReplicas: telemetry.Ptr[int32](2), Reason: "KEDAScaleTargetActivated", Source: "keda", Attributes: map[string]string{"a": "b"}}
	if err := s.Insert(ctx, EventsBatch([]telemetry.Event{ev})); err != nil {
		t.Fatal(err)
	}
	r, err = s.Query(ctx, "SELECT "+EventColumns+" FROM events WHERE project_id = ?", uint32(3))
	if err != nil {
		t.Fatal(err)
	}
	if evs := ScanEvents(r); len(evs) != 1 || !reflect.DeepEqual(evs[0], ev) {
		t.Fatalf("events: %+v", evs)
	}

	pts := []telemetry.MetricPoint{{ProjectID: 3, Time: t0, Service: "vllm", Instance: "p1", Name: "kv_cache_usage", Value: 0.97, Labels: map[string]string{"model_name": "m"}}}
	if err := s.Insert(ctx, MetricsBatch(pts)); err != nil {
		t.Fatal(err)
	}
	r, err = s.Query(ctx, "SELECT max(value) AS v, any(labels) AS l FROM metric_points WHERE name = ? AND time >= ?", "kv_cache_usage", t0)
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Row(0).Float("v"); v != 0.97 || r.Row(0).StringMap("l")["model_name"] != "m" {
		t.Fatalf("metric: %v %v", v, r.Row(0).StringMap("l"))
	}
}

func TestBindHostileStrings(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	hostile := []string{"plain", "it's", `back\slash`, "\x00nul", "new\nline", "'; DROP TABLE spans; --", "\xff\xfe invalid utf8", "?", "{param:String}", `"quoted", <tag> & é`}
	for _, in := range hostile {
		r, err := s.Query(ctx, "SELECT ? AS v, '?' AS q", in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := r.Row(0).String("v"); got != in && !strings.Contains(in, "\xff") {
			t.Errorf("round trip %q → %q", in, got)
		}
		if q := r.Row(0).String("q"); q != "?" {
			t.Errorf("literal ? in SQL was bound: %q", q)
		}
	}
	// A StringSet holds exactly its strings, whether it renders as JSON
	// (valid UTF-8) or as an array literal (a set with invalid bytes).
	for _, set := range []StringSet{hostile[:6], hostile} {
		for _, in := range append(set, "absent", "plain ") {
			r, err := s.Query(ctx, "SELECT ? IN ? AS member", in, set)
			if err != nil {
				t.Fatalf("%q IN a set of %d: %v", in, len(set), err)
			}
			if got, want := r.Row(0).Bool("member"), slices.Contains(set, in); got != want {
				t.Errorf("%q IN a set of %d = %v, want %v", in, len(set), got, want)
			}
		}
	}
	if _, err := Bind("SELECT ?, ?", 1); err == nil {
		t.Error("too few args accepted")
	}
	if _, err := Bind("SELECT ?", Ident("x; DROP")); err == nil {
		t.Error("hostile identifier accepted")
	}
}

func TestClusterDDLParses(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	migs, err := RenderMigrations("prod", 30)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range migs {
		for _, st := range m.Statements {
			n++
			// The embedded engine cannot run ON CLUSTER, but its parser
			// validates every rendered statement.
			if _, err := s.Query(ctx, "SELECT formatQuery(?) AS f", st); err != nil {
				t.Errorf("%s: %v\n%s", m.Version, err, st)
			}
			if strings.Contains(st, "CREATE TABLE IF NOT EXISTS spans_local") && !strings.Contains(st, "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/spans_local', '{replica}', inserted_at)") {
				t.Errorf("spans_local engine not replicated:\n%s", st)
			}
		}
	}
	// Every replicated table has its Distributed table in front, and a
	// migration that alters tables alters them on every node.
	for _, m := range migs {
		local, dist, alters := 0, 0, 0
		for _, st := range m.Statements {
			if strings.HasPrefix(st, "CREATE TABLE IF NOT EXISTS") && strings.Contains(st, "_local ON CLUSTER") {
				local++
			}
			if strings.Contains(st, "ENGINE = Distributed(") {
				dist++
			}
			if strings.HasPrefix(st, "ALTER TABLE") {
				alters++
				if !strings.Contains(strings.SplitN(st, "\n", 2)[0], " ON CLUSTER ") {
					t.Errorf("%s: alters a table on one node only:\n%s", m.Version, st)
				}
			}
		}
		if local+alters == 0 || local != dist {
			t.Errorf("%s: %d local tables, %d Distributed tables, %d alterations", m.Version, local, dist, alters)
		}
	}
	if n < 2*len(migs) {
		t.Errorf("cluster DDL has %d statements for %d migrations", n, len(migs))
	}
}

// The embedded engine merges spans with a larger fan-in (fewer rewrites of
// each row) but at most 30 parts at once (a merge's memory), and writes
// parts up to 64 MiB compact, also on a store migrated before the settings
// existed.
func TestSpansMergeTuning(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	setting := func() string {
		t.Helper()
		r, err := s.Query(ctx, "SELECT create_table_query AS q FROM system.tables WHERE database = currentDatabase() AND name = 'spans'")
		if err != nil {
			t.Fatal(err)
		}
		return r.Row(0).String("q")
	}
	want := []string{"merge_selector_base = 25", "min_bytes_for_wide_part = 67108864", "max_parts_to_merge_at_once = 30"}
	for _, w := range want {
		if q := setting(); !strings.Contains(q, w) {
			t.Fatalf("spans lacks %s:\n%s", w, q)
		}
	}
	if err := s.Exec(ctx, "ALTER TABLE spans RESET SETTING merge_selector_base, min_bytes_for_wide_part, max_parts_to_merge_at_once"); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if q := setting(); !strings.Contains(q, w) {
			t.Fatalf("after a migration, spans lacks %s:\n%s", w, q)
		}
	}
}

// spans are written in granules of at most ~2 MiB, not the default
// 10 MiB: a merge holds one granule of a column from each of its parts.
func TestSpansGranulesAreBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	// Spans the size of the bench's (~40 attributes): ~2 KB each.
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	spans := make([]telemetry.Span, 16384)
	for i := range spans {
		attrs := make(map[string]string, 40)
		for a := range 40 {
			attrs[fmt.Sprintf("app.attribute.%02d", a)] = fmt.Sprintf("value %d of span %d, long enough to count", a, i)
		}
		spans[i] = telemetry.Span{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i/4), SpanID: fmt.Sprintf("%016x", i), Service: "chat",
			Name: "chat llama", Start: t0.Add(time.Duration(i) * time.Millisecond), End: t0.Add(time.Duration(i+900) * time.Millisecond), Attributes: attrs}
	}
	if err := s.Insert(ctx, SpansBatch(spans)); err != nil {
		t.Fatal(err)
	}
	r, err := s.Query(ctx, "SELECT sum(rows) AS rows, sum(marks) AS marks, sum(data_uncompressed_bytes) AS bytes FROM system.parts WHERE database = currentDatabase() AND table = 'spans' AND active")
	if err != nil {
		t.Fatal(err)
	}
	rows, marks, bytes := r.Row(0).Int("rows"), r.Row(0).Int("marks"), r.Row(0).Int("bytes")
	if rows != int64(len(spans)) || marks < 2 {
		t.Fatalf("spans has %d rows in %d marks, want %d rows", rows, marks, len(spans))
	}
	// The last mark closes the part and holds no rows.
	if perGranule := float64(bytes) / float64(marks-1); perGranule > 2.5*(1<<20) {
		t.Errorf("%d spans of %d MiB were written in %d granules of %.1f MiB each, want at most ~2 MiB", rows, bytes>>20, marks-1, perGranule/(1<<20))
	}
}

func TestRetentionChange(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTemp(t, dir)
	s.Close()
	s, err := Open(ctx, Config{DataDir: dir, RetentionDays: 90}, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for table := range retentionTables {
		r, err := s.Query(ctx, "SELECT create_table_query AS q FROM system.tables WHERE database = currentDatabase() AND name = ?", table)
		if err != nil {
			t.Fatal(err)
		}
		if r.Len() != 1 {
			t.Errorf("retention table %s does not exist", table)
			continue
		}
		if q := r.Row(0).String("q"); !strings.Contains(q, "toIntervalDay(90)") {
			t.Errorf("TTL of %s not updated: %s", table, q)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		have, want string
		ok         bool
	}{{"18.16.1", "24.8", false}, {"24.8.1", "24.8", true}, {"25.3", "24.8", true}, {"24.7.9", "24.8", false}, {"26.5.3.1", "24.8", true}, {"24.10", "24.8", true}} {
		if got := versionAtLeast(c.have, c.want); got != c.ok {
			t.Errorf("versionAtLeast(%s, %s) = %v", c.have, c.want, got)
		}
	}
}

// traceSpansWithoutID reads a trace's stored spans in start order, their
// trace ids blanked, to compare two traces written alike.
func traceSpansWithoutID(t *testing.T, s *Store, trace string) []telemetry.Span {
	t.Helper()
	r, err := s.Query(context.Background(), "SELECT "+SpanColumns+" FROM spans FINAL WHERE trace_id = ? ORDER BY start, span_id", trace)
	if err != nil {
		t.Fatal(err)
	}
	out := ScanSpans(r)
	for i := range out {
		out[i].TraceID = ""
	}
	return out
}

// TestRecorderSeesOnlyItsContext: a recorder hears of the inserts (as
// "INSERT INTO table") and reads run under its context, typed reads
// included, and of nothing run under another context; a recorded statement
// runs again as it is.
func TestRecorderSeesOnlyItsContext(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	rec := &Recorder{}
	ctx := WithRecorder(context.Background(), rec)
	if err := s.Insert(ctx, SpansBatch(sampleSpans())); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(context.Background(), "SELECT 1 AS other"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(ctx, "SELECT count() AS n FROM spans WHERE service != ?", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.QueryRequests(ctx, "SELECT "+RequestColumns+" FROM llm_requests"); err != nil {
		t.Fatal(err)
	}
	heard := rec.Statements()
	if len(heard) != 3 || heard[0].SQL != "INSERT INTO spans" || heard[1].SQL != "SELECT count() AS n FROM spans WHERE service != 'x'" ||
		!strings.HasPrefix(heard[2].SQL, "SELECT "+RequestColumns) {
		t.Fatalf("recorded %+v, want the insert, the bound count and the typed read", heard)
	}
	for _, st := range heard {
		if st.Took <= 0 {
			t.Errorf("%s took %s", st.SQL, st.Took)
		}
	}
	// The insert wrote the spans, the count read one row, the typed read
	// none (no request was stored).
	if heard[0].Rows != len(sampleSpans()) || heard[1].Rows != 1 || heard[2].Rows != 0 {
		t.Errorf("rows recorded %d, %d, %d; want %d, 1, 0", heard[0].Rows, heard[1].Rows, heard[2].Rows, len(sampleSpans()))
	}
	r, err := s.Query(context.Background(), heard[1].SQL)
	if err != nil || r.Len() != 1 || r.Row(0).Int("n") != int64(len(sampleSpans())) {
		t.Errorf("the recorded count again: %v rows, error %v", r, err)
	}
}

// A label map is stored with its keys in order, whatever Go's map order:
// its text form names one series (histogram_points sorts by its hash).
func TestLabelMapsStoreInKeyOrder(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var pts []telemetry.MetricPoint
	for i := range 64 {
		pts = append(pts, telemetry.MetricPoint{ProjectID: 1, Time: t0.Add(time.Duration(i) * time.Second), Service: "vllm", Name: "preemptions_total",
			Value: float64(i), Labels: map[string]string{"model_name": "m", "engine": "0", "gpu": "1", "zone": "a", "a": "b"}})
	}
	if err := s.Insert(ctx, MetricsBatch(pts)); err != nil {
		t.Fatal(err)
	}
	r, err := s.Query(ctx, "SELECT groupUniqArray(toString(labels)) AS forms FROM metric_points WHERE name = ?", "preemptions_total")
	if err != nil {
		t.Fatal(err)
	}
	if forms := r.Row(0).Strings("forms"); len(forms) != 1 || forms[0] != "{'a':'b','engine':'0','gpu':'1','model_name':'m','zone':'a'}" {
		t.Fatalf("one label set stored as %q", forms)
	}
}
