package clickhouse

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// spanEngineColumns are the spans columns the engine fills itself, which
// spanSchema leaves out: when a span was inserted (migration 0001).
var spanEngineColumns = map[string]bool{"inserted_at": true}

// TestSpanSchemaMatchesTable: every column the migrations give spans is in
// spanSchema with the type DESCRIBE reports (or is one the engine fills),
// every schema column is in the table, and the Native block's column, the
// batch's slice and the typed decoder of each hold the schema's type.
func TestSpanSchemaMatchesTable(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	r, err := s.Query(context.Background(), "DESCRIBE TABLE spans")
	if err != nil {
		t.Fatal(err)
	}
	schema := map[string]spanColumn{}
	b := newSpanBlock()
	batch := SpansBatch(sampleSpans())
	for i, c := range spanSchema {
		if _, dup := schema[c.name]; dup {
			t.Errorf("column %s described twice", c.name)
		}
		schema[c.name] = c
		if got := string(c.block(b).Type()); got != c.typ {
			t.Errorf("column %s: the Native block writes %s, schema says %s", c.name, got, c.typ)
		}
		if b.input[i].Name != c.name || b.input[i].Data != c.block(b) {
			t.Errorf("block column %d is %s, schema column %s", i, b.input[i].Name, c.name)
		}
		if col := batch.Columns[i]; col.Name != c.name || col.Type != c.typ || reflect.ValueOf(col.Data).Len() != len(sampleSpans()) {
			t.Errorf("batch column %d is %s %s, schema column %s %s", i, col.Name, col.Type, c.name, c.typ)
		}
		if (c.typed != nil) != (c.part == spanCore || c.name == "route" || c.name == "tenant") {
			t.Errorf("column %s (part %d): a typed decoder exactly when the assembler reads it", c.name, c.part)
		}
		if c.typed != nil && c.typed().typ != c.typ {
			t.Errorf("column %s: decoder reads %s, schema says %s", c.name, c.typed().typ, c.typ)
		}
	}
	table := map[string]bool{}
	for i := range r.Len() {
		w := r.Row(i)
		name, typ := w.String("name"), w.String("type")
		table[name] = true
		if spanEngineColumns[name] {
			if _, ok := schema[name]; ok {
				t.Errorf("column %s is filled by the engine: list it in spanEngineColumns only", name)
			}
			continue
		}
		c, ok := schema[name]
		if !ok {
			t.Errorf("table column %s %s (%s) is not in spanSchema", name, typ, w.String("default_type"))
		} else if c.typ != typ {
			t.Errorf("column %s: table type %s, schema type %s", name, typ, c.typ)
		}
	}
	for _, c := range spanSchema {
		if !table[c.name] {
			t.Errorf("schema column %s is not in the table", c.name)
		}
	}
	for name := range spanEngineColumns {
		if !table[name] {
			t.Errorf("engine column %s is not in the table", name)
		}
	}
	// The select lists read what is stored, never the derived columns.
	for _, list := range []string{SpanColumns, SpanCoreColumns} {
		for _, name := range strings.Split(list, ", ") {
			if schema[name].part == spanDerived {
				t.Errorf("select list reads derived column %s", name)
			}
		}
	}
}
