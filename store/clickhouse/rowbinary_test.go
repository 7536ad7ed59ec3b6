package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
)

// TestRowBinaryMatchesJSON runs statements covering every type the binary
// decoder reads and checks it yields exactly what the JSONCompact decoder
// yields from the same engine, NULLs, negative times and empty maps included.
func TestRowBinaryMatchesJSON(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	if err := s.Insert(context.Background(), SpansBatch(sampleSpans())); err != nil {
		t.Fatal(err)
	}
	e := s.b.(*embedded)
	ctx := context.Background()
	stmts := []string{
		`SELECT toInt8(-5) a, toInt16(-300) b, toInt32(-70000) c, toInt64(-5000000000) d,
			toUInt8(250) e, toUInt16(65000) f, toUInt32(4000000000) g, toUInt64(18000000000000000000) h,
			toFloat32(1.5) i, toFloat64(-2.25) j, true k, 'héllo' l, toFixedString('ab', 2) m`,
		`SELECT toDate('2026-12-01') a, toDate32('1950-06-30') b, toDateTime('2026-12-01 10:00:05', 'UTC') c,
			toDateTime64('2026-12-01 10:00:05.123456789', 9, 'UTC') d, toDateTime64('1969-12-31 23:59:59.5', 3, 'UTC') e,
			toDateTime64('2026-12-01 10:00:05.25', 6) f`,
		`SELECT CAST(NULL AS Nullable(Float64)) a, CAST(3.5 AS Nullable(Float64)) b, CAST(NULL AS Nullable(Int64)) c,
			CAST('x' AS LowCardinality(String)) d, CAST(NULL AS LowCardinality(Nullable(String))) e,
			CAST('y' AS LowCardinality(Nullable(String))) f, nan g, inf h`,
		`SELECT [1, 2, 3] a, ['x', 'y'] b, CAST([] AS Array(String)) c, map('k', 'v', 'k2', '') d,
			CAST(map() AS Map(String, String)) e, [[1], [2, 3]] f, map(1, 2.5) g`,
		`SELECT [1.5, -2, nan] a, CAST([] AS Array(Float64)) b, quantiles(0.5, 0.9)(number) c, [[0.5]] d FROM numbers(10)`,
		"SELECT " + SpanColumns + " FROM spans FINAL ORDER BY start",
		"SELECT * FROM system.numbers LIMIT 0",
	}
	for _, q := range stmts {
		bin, err := e.run(ctx, q, rowBinaryFormat)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		got, err := decodeRowBinary(bin)
		if err != nil {
			t.Fatalf("%s: decode RowBinary: %v", q, err)
		}
		txt, err := e.run(ctx, q, "JSONCompact")
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeJSONCompact(txt)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Columns, want.Columns) || len(got.Rows) != len(want.Rows) {
			t.Fatalf("%s:\n columns %v rows %d\n want %v rows %d", q, got.Columns, len(got.Rows), want.Columns, len(want.Rows))
		}
		for i := range want.Rows {
			for j := range want.Rows[i] {
				if !sameValue(got.Rows[i][j], want.Rows[i][j]) {
					t.Errorf("%s: row %d column %s (%s): RowBinary %#v, JSON %#v", q[:min(len(q), 40)], i, got.Columns[j], got.Types[j], got.Rows[i][j], want.Rows[i][j])
				}
			}
		}
	}
}

// sameValue is DeepEqual, except that JSONCompact writes NaN and ±Inf as
// null while RowBinary (like the server transport) keeps them.
func sameValue(bin, json any) bool {
	if f, ok := bin.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return json == nil
	}
	if fs, ok := bin.([]float64); ok { // Array(Float64), decoded unboxed
		a, ok := json.([]any)
		if !ok || len(a) != len(fs) {
			return false
		}
		for i, f := range fs {
			if !sameValue(f, a[i]) {
				return false
			}
		}
		return true
	}
	if ba, ok := bin.([]any); ok { // nested arrays may hold unboxed ones
		a, ok := json.([]any)
		if !ok || len(a) != len(ba) {
			return false
		}
		for i := range ba {
			if !sameValue(ba[i], a[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(bin, json)
}

// TestRowBinaryFallsBackForOtherTypes: a type without a binary decoder
// still answers, through the JSON path.
func TestRowBinaryFallsBackForOtherTypes(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	bin, err := s.b.(*embedded).run(context.Background(), "SELECT toDecimal64(1.25, 2) d", rowBinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeRowBinary(bin); !errors.Is(err, errUnsupportedType) {
		t.Fatalf("Decimal decoded from RowBinary: %v", err)
	}
	r, err := s.Query(context.Background(), "SELECT toDecimal64(1.25, 2) d, toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0') u")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Row(0).Float("d"); got != 1.25 {
		t.Fatalf("decimal via fallback = %v", got)
	}
	if got := fmt.Sprint(r.Row(0).Value("u")); got != "61f0c404-5cb3-11e7-907b-a6006ad3dba0" {
		t.Fatalf("uuid via fallback = %q", got)
	}
}

// TestRowBinaryTruncated: a cut buffer is an error, never a panic.
func TestRowBinaryTruncated(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	bin, err := s.b.(*embedded).run(context.Background(), "SELECT number, toString(number) s, [number] a FROM system.numbers LIMIT 20", rowBinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeRowBinary(bin); err != nil {
		t.Fatal(err)
	}
	for cut := 1; cut < len(bin); cut++ {
		r, err := decodeRowBinary(bin[:cut])
		if err == nil && r != nil && len(r.Rows) == 20 {
			t.Fatalf("cut at %d decoded all rows", cut)
		}
	}
}
