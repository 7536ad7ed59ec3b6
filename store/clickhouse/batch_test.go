package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// attrsOf lays the spans' Attributes maps out as SpanAttrs (keys sorted,
// ids in first use), as normalize.Attrs hands them to the pipeline.
func attrsOf(spans []telemetry.Span) *SpanAttrs {
	a := &SpanAttrs{}
	ids := map[string]uint32{}
	for _, s := range spans {
		keys := make([]string, 0, len(s.Attributes))
		for k := range s.Attributes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			id, ok := ids[k]
			if !ok {
				id = uint32(len(a.Names))
				ids[k] = id
				a.Names = append(a.Names, k)
			}
			a.Keys = append(a.Keys, id)
			a.Bounds = append(a.Bounds, uint32(len(a.Values)))
			a.Values = append(a.Values, s.Attributes[k]...)
			a.Bounds = append(a.Bounds, uint32(len(a.Values)))
		}
		a.Ends = append(a.Ends, len(a.Keys))
	}
	return a
}

// TestEncodeSpansAttrsMatchesEncodeSpans: spans encoded from one list of
// attributes (the receivers' path) are stored exactly as the same spans
// encoded from their maps, whatever the dictionary's index width (up to
// 256, 65536 and more distinct keys in a block) and with spans without
// attributes among them.
func TestEncodeSpansAttrsMatchesEncodeSpans(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()

	t0 := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	span := func(i int, attrs map[string]string) telemetry.Span {
		return telemetry.Span{ProjectID: 1, SpanID: fmt.Sprintf("%016x", i+1), Service: "chat", Name: "span", Kind: "internal",
			Start: t0.Add(time.Duration(i) * time.Millisecond), End: t0.Add(time.Duration(i)*time.Millisecond + time.Second), StatusCode: "unset", Attributes: attrs,
			Resource: map[string]string{"service.name": "chat"}}
	}
	// Block 1: the sample spans, a span without attributes, odd values.
	small := sampleSpans()
	small = append(small, span(10, nil), span(11, map[string]string{"": "", "k": "", "é": "naïve \x00 'quoted'\n", "long": strings.Repeat("v", 70000)}))
	// Block 2: 300 distinct keys (a UInt16 index).
	var mid []telemetry.Span
	for i := 0; i < 30; i++ {
		attrs := map[string]string{"shared": "x"}
		for k := 0; k < 10; k++ {
			attrs[fmt.Sprintf("mid.%d.%d", i, k)] = fmt.Sprint(i * k)
		}
		mid = append(mid, span(100+i, attrs))
	}
	// Block 3: 70000 distinct keys (a UInt32 index).
	var wide []telemetry.Span
	for i := 0; i < 700; i++ {
		attrs := map[string]string{}
		for k := 0; k < 100; k++ {
			attrs[fmt.Sprintf("wide.%d.%d", i, k)] = "v"
		}
		wide = append(wide, span(1000+i, attrs))
	}
	blocks := [][]telemetry.Span{small, mid, wide}

	encode := func(trace string, viaAttrs bool) {
		var data [][]byte
		rows := 0
		for _, blk := range blocks {
			spans := slices.Clone(blk)
			for i := range spans {
				spans[i].TraceID = trace
			}
			var b []byte
			var err error
			if viaAttrs {
				a := attrsOf(spans)
				for i := range spans {
					spans[i].Attributes = map[string]string{"ignored": "the maps are not read"}
				}
				b, err = EncodeSpansAttrs(spans, a)
			} else {
				b, err = EncodeSpans(spans)
			}
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, b)
			rows += len(spans)
		}
		if err := s.Insert(ctx, SpanBlocksBatch(data, rows)); err != nil {
			t.Fatalf("insert (attrs %v): %v", viaAttrs, err)
		}
	}
	viaMaps, viaAttrs := strings.Repeat("aa", 16), strings.Repeat("bb", 16)
	encode(viaMaps, false)
	encode(viaAttrs, true)
	want, got := traceSpansWithoutID(t, s, viaMaps), traceSpansWithoutID(t, s, viaAttrs)
	if n := len(small) + len(mid) + len(wide); len(want) != n {
		t.Fatalf("%d spans stored from maps, want %d", len(want), n)
	}
	if !reflect.DeepEqual(got, want) {
		for i := range want {
			if i >= len(got) || !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("span %d stored from one attribute list differs:\n got %+v\nwant %+v", i, got[min(i, len(got)-1)], want[i])
			}
		}
		t.Fatalf("%d spans stored from one attribute list, want %d", len(got), len(want))
	}
	if got[len(small)-2].Attributes == nil || len(got[len(small)-2].Attributes) != 0 {
		t.Errorf("a span without attributes: %v", got[len(small)-2].Attributes)
	}

	// The column announces the type the map column does.
	b := newSpanBlock()
	if got, want := b.flatAttrs.Type(), b.attrs.Type(); got != want {
		t.Errorf("attributes column type %q, want %q", got, want)
	}
}

// TestEncodeSpansAttrsRefusesInconsistentLists: a list that does not fit
// the spans is an error, never a panic or a wrong row.
func TestEncodeSpansAttrsRefusesInconsistentLists(t *testing.T) {
	spans := sampleSpans()
	spans[1].Attributes = map[string]string{"a": "1", "b": "2"}
	good := func() *SpanAttrs { return attrsOf(spans) }
	if _, err := EncodeSpansAttrs(spans, good()); err != nil {
		t.Fatalf("consistent list: %v", err)
	}
	cases := map[string]func(a *SpanAttrs){
		"fewer spans":         func(a *SpanAttrs) { a.Ends = a.Ends[:1] },
		"ends decrease":       func(a *SpanAttrs) { a.Ends[0], a.Ends[1] = a.Ends[1], a.Ends[0] },
		"ends short of keys":  func(a *SpanAttrs) { a.Ends[1]-- },
		"ends past keys":      func(a *SpanAttrs) { a.Ends[1]++ },
		"bounds missing":      func(a *SpanAttrs) { a.Bounds = a.Bounds[:len(a.Bounds)-2] },
		"value past the end":  func(a *SpanAttrs) { a.Bounds[1] = uint32(len(a.Values) + 1) },
		"value ends first":    func(a *SpanAttrs) { a.Bounds[0], a.Bounds[1] = 2, 1 },
		"key without a name":  func(a *SpanAttrs) { a.Keys[0] = uint32(len(a.Names)) },
		"names but no values": func(a *SpanAttrs) { a.Values = nil },
	}
	for name, spoil := range cases {
		a := good()
		spoil(a)
		if _, err := EncodeSpansAttrs(spans, a); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// TestSpanContextColumns: every way spans reach the table stores the route
// and tenant that telemetry.RouteAttribute and SpanTenant name (the first
// tenant key with a value wins, whatever order the attributes come in):
// Native blocks from maps and from one attribute list, SpansBatch, and an
// insert without the columns, whose defaults are how parts stored before
// the columns existed read.
func TestSpanContextColumns(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, t.TempDir())
	defer s.Close()

	t0 := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	cases := []map[string]string{
		{"http.route": "/v1/chat", "user.id": "u-1", "tenant.id": "acme", "http.method": "POST"},
		{"tenant": "", "enduser.id": "e-7", "zzz": "last"},
		{"langfuse.user.id": "lf-3"},
		{"http.route": "/health"},
		{"tenant": "t-0", "tenant.id": "later"},
		nil,
	}
	spansFor := func(trace string) []telemetry.Span {
		var out []telemetry.Span
		for i, attrs := range cases {
			out = append(out, telemetry.Span{ProjectID: 1, TraceID: trace, SpanID: fmt.Sprintf("%016x", i+1), Service: "chat",
				Name: "span", Kind: "internal", Start: t0.Add(time.Duration(i) * time.Millisecond), End: t0.Add(time.Second),
				StatusCode: "unset", Attributes: attrs})
		}
		return out
	}
	insertBlock := func(trace string, viaAttrs bool) {
		spans := spansFor(trace)
		var b []byte
		var err error
		if viaAttrs {
			a := attrsOf(spans)
			for i := range spans {
				spans[i].Attributes = nil
			}
			b, err = EncodeSpansAttrs(spans, a)
		} else {
			b, err = EncodeSpans(spans)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(ctx, SpanBlocksBatch([][]byte{b}, len(spans))); err != nil {
			t.Fatal(err)
		}
	}
	traces := map[string]string{"maps": strings.Repeat("a1", 16), "attrs": strings.Repeat("a2", 16),
		"rows": strings.Repeat("a3", 16), "defaults": strings.Repeat("a4", 16)}
	insertBlock(traces["maps"], false)
	insertBlock(traces["attrs"], true)
	if err := s.Insert(ctx, SpansBatch(spansFor(traces["rows"]))); err != nil {
		t.Fatal(err)
	}
	old := SpansBatch(spansFor(traces["defaults"]))
	old.Columns = slices.DeleteFunc(old.Columns, func(c BatchColumn) bool { return c.Name == "route" || c.Name == "tenant" })
	if len(old.Columns) != len(SpansBatch(nil).Columns)-2 {
		t.Fatalf("SpansBatch has no route and tenant columns to leave out")
	}
	if err := s.Insert(ctx, old); err != nil {
		t.Fatal(err)
	}
	// A part written before migration 0014: the columns did not exist when
	// it was written, so its rows read them from their defaults.
	if err := s.Exec(ctx, "ALTER TABLE spans DROP COLUMN route, DROP COLUMN tenant"); err != nil {
		t.Fatal(err)
	}
	traces["old part"] = strings.Repeat("a5", 16)
	pre := SpansBatch(spansFor(traces["old part"]))
	pre.Columns = slices.DeleteFunc(pre.Columns, func(c BatchColumn) bool { return c.Name == "route" || c.Name == "tenant" })
	if err := s.Insert(ctx, pre); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(ctx, "ALTER TABLE spans "+spanContextColumnsDDL()); err != nil {
		t.Fatal(err)
	}
	for path, trace := range traces {
		r, err := s.Query(ctx, "SELECT route, tenant FROM spans WHERE trace_id = ? ORDER BY span_id", trace)
		if err != nil {
			t.Fatal(err)
		}
		if r.Len() != len(cases) {
			t.Fatalf("%s: %d spans stored, want %d", path, r.Len(), len(cases))
		}
		for i, attrs := range cases {
			w := r.Row(i)
			if got, want := w.String("route"), attrs[telemetry.RouteAttribute]; got != want {
				t.Errorf("%s: span %d (%v): route %q, want %q", path, i, attrs, got, want)
			}
			if got, want := w.String("tenant"), telemetry.SpanTenant(attrs); got != want {
				t.Errorf("%s: span %d (%v): tenant %q, want %q", path, i, attrs, got, want)
			}
		}
	}
	// The expected values themselves: the precedence SpanTenant states.
	for i, want := range []string{"acme", "e-7", "lf-3", "", "t-0", ""} {
		if got := telemetry.SpanTenant(cases[i]); got != want {
			t.Errorf("SpanTenant(%v) = %q, want %q", cases[i], got, want)
		}
	}
}

// Every way spans are inserted waits, on a cluster, until the shards hold
// them: the assembler stays behind inserts still under way, not behind
// rows a Distributed table has yet to send (they would carry an older
// inserted_at than rows it has already passed).
func TestSpanBatchesAreForeground(t *testing.T) {
	span := telemetry.Span{ProjectID: 1, TraceID: "t", SpanID: "s", Start: time.Now(), End: time.Now()}
	for name, b := range map[string]*Batch{
		"SpansBatch":      SpansBatch([]telemetry.Span{span}),
		"SpanBlocksBatch": SpanBlocksBatch(nil, 1),
	} {
		if !b.Foreground {
			t.Errorf("%s is not a Foreground batch", name)
		}
	}
}
