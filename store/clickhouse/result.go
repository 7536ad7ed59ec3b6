package clickhouse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Result is a fully read query result with values normalized to a small set
// of Go types, the same for both transports: nil, string, int64, float64,
// bool, time.Time (UTC), map[string]any, []any.
type Result struct {
	Columns []string
	Types   []string
	Rows    [][]any
	index   map[string]int
}

// Len is the number of rows.
func (r *Result) Len() int { return len(r.Rows) }

// Row returns row i for typed access by column name.
func (r *Result) Row(i int) Row { return Row{r: r, i: i} }

func (r *Result) col(name string) int {
	if r.index == nil {
		r.index = make(map[string]int, len(r.Columns))
		for i, c := range r.Columns {
			r.index[c] = i
		}
	}
	i, ok := r.index[name]
	if !ok {
		panic(fmt.Sprintf("clickhouse result has no column %q (have %v)", name, r.Columns))
	}
	return i
}

// Row is one result row. Accessors return the zero value for NULL; the
// pointer variants return nil for NULL so "unknown" stays unknown.
type Row struct {
	r *Result
	i int
}

// Value returns the raw normalized value of a column.
func (w Row) Value(col string) any { return w.r.Rows[w.i][w.r.col(col)] }

// String returns a String column (or any value formatted).
func (w Row) String(col string) string {
	switch v := w.Value(col).(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// Int returns an integer column; floats are truncated.
func (w Row) Int(col string) int64 {
	if p := w.IntPtr(col); p != nil {
		return *p
	}
	return 0
}

// IntPtr returns an integer column, nil for NULL.
func (w Row) IntPtr(col string) *int64 {
	switch v := w.Value(col).(type) {
	case int64:
		return &v
	case float64:
		n := int64(v)
		return &n
	case bool:
		n := int64(0)
		if v {
			n = 1
		}
		return &n
	}
	return nil
}

// Float returns a numeric column, 0 for NULL.
func (w Row) Float(col string) float64 {
	if p := w.FloatPtr(col); p != nil {
		return *p
	}
	return 0
}

// FloatPtr returns a numeric column, nil for NULL or NaN.
func (w Row) FloatPtr(col string) *float64 {
	switch v := w.Value(col).(type) {
	case float64:
		if math.IsNaN(v) {
			return nil
		}
		return &v
	case int64:
		f := float64(v)
		return &f
	}
	return nil
}

// Bool returns a Bool/UInt8 column.
func (w Row) Bool(col string) bool { return w.Int(col) != 0 }

// Time returns a DateTime/DateTime64 column in UTC.
func (w Row) Time(col string) time.Time {
	t, _ := w.Value(col).(time.Time)
	return t
}

// StringMap returns a Map(String, String) column.
func (w Row) StringMap(col string) map[string]string {
	m, _ := w.Value(col).(map[string]any)
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// Strings returns an Array(String) column.
func (w Row) Strings(col string) []string {
	a, _ := w.Value(col).([]any)
	out := make([]string, 0, len(a))
	for _, v := range a {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// Floats returns an Array of numbers (quantiles(…)); a NULL element (JSON
// writes NaN so) reads as NaN.
func (w Row) Floats(col string) []float64 {
	v := w.Value(col)
	if f, ok := v.([]float64); ok {
		return f // decoded unboxed (Array(Float64))
	}
	a, _ := v.([]any)
	out := make([]float64, 0, len(a))
	for _, v := range a {
		switch v := v.(type) {
		case float64:
			out = append(out, v)
		case int64:
			out = append(out, float64(v))
		default:
			out = append(out, math.NaN())
		}
	}
	return out
}

// Times returns an Array(DateTime64) column.
func (w Row) Times(col string) []time.Time {
	a, _ := w.Value(col).([]any)
	out := make([]time.Time, 0, len(a))
	for _, v := range a {
		t, _ := v.(time.Time)
		out = append(out, t)
	}
	return out
}

// decodeJSONCompact parses the embedded engine's JSONCompact output, typing
// each value from the column's ClickHouse type in "meta". One decoder pass
// over the whole document: per-cell decoders cost 10× more in allocations.
func decodeJSONCompact(buf []byte) (*Result, error) {
	if len(buf) == 0 {
		return &Result{}, nil
	}
	var raw struct {
		Meta []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"meta"`
		Data [][]any `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("decode engine output: %w", err)
	}
	res := &Result{Rows: raw.Data}
	for _, m := range raw.Meta {
		res.Columns = append(res.Columns, m.Name)
		res.Types = append(res.Types, m.Type)
	}
	for _, row := range raw.Data {
		for j, cell := range row {
			v, err := fromJSON(cell, res.Types[j])
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", res.Columns[j], err)
			}
			row[j] = v
		}
	}
	return res, nil
}

// unwrapType strips Nullable(…) and LowCardinality(…).
func unwrapType(t string) string {
	for {
		switch {
		case strings.HasPrefix(t, "Nullable("):
			t = t[len("Nullable(") : len(t)-1]
		case strings.HasPrefix(t, "LowCardinality("):
			t = t[len("LowCardinality(") : len(t)-1]
		default:
			return t
		}
	}
}

// splitTypeArgs splits "A, B(C, D)" at top-level commas.
func splitTypeArgs(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

func fromJSON(v any, chType string) (any, error) {
	if v == nil {
		return nil, nil
	}
	t := unwrapType(chType)
	switch {
	case strings.HasPrefix(t, "Int") || strings.HasPrefix(t, "UInt"):
		switch x := v.(type) {
		case json.Number:
			if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				return n, nil
			}
			u, err := strconv.ParseUint(string(x), 10, 64)
			return int64(u), err
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				return n, nil
			}
			u, err := strconv.ParseUint(x, 10, 64)
			return int64(u), err
		}
	case strings.HasPrefix(t, "Float") || strings.HasPrefix(t, "Decimal"):
		switch x := v.(type) {
		case json.Number:
			return strconv.ParseFloat(string(x), 64)
		case string:
			switch x {
			case "nan", "-nan":
				return math.NaN(), nil
			case "inf", "+inf":
				return math.Inf(1), nil
			case "-inf":
				return math.Inf(-1), nil
			}
			return strconv.ParseFloat(x, 64)
		}
	case t == "Bool":
		b, _ := v.(bool)
		return b, nil
	case strings.HasPrefix(t, "DateTime") || t == "Date" || t == "Date32":
		s, _ := v.(string)
		return parseCHTime(s)
	case strings.HasPrefix(t, "Array("):
		elem := t[len("Array(") : len(t)-1]
		a, _ := v.([]any)
		out := make([]any, len(a))
		for i, e := range a {
			ev, err := fromJSON(e, elem)
			if err != nil {
				return nil, err
			}
			out[i] = ev
		}
		return out, nil
	case strings.HasPrefix(t, "Map("):
		args := splitTypeArgs(t[len("Map(") : len(t)-1])
		m, _ := v.(map[string]any)
		out := make(map[string]any, len(m))
		for k, e := range m {
			ev, err := fromJSON(e, args[len(args)-1])
			if err != nil {
				return nil, err
			}
			out[k] = ev
		}
		return out, nil
	case strings.HasPrefix(t, "Tuple("):
		return v, nil
	}
	if n, ok := v.(json.Number); ok {
		return strconv.ParseFloat(string(n), 64)
	}
	return v, nil
}

// parseCHTime parses the engine's text form of Date/DateTime/DateTime64.
// The session runs in UTC, so the text is UTC.
func parseCHTime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("unparseable time %q", s)
}

// normalizeValue maps what clickhouse-go scanned into the same Go types the
// embedded decoder produces.
func normalizeValue(v any) any {
	if v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	switch x := rv.Interface().(type) {
	case time.Time:
		return x.UTC()
	case string:
		return x
	case bool:
		return x
	}
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return rv.Float()
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = normalizeValue(rv.Index(i).Interface())
		}
		return out
	case reflect.Map:
		out := make(map[string]any, rv.Len())
		it := rv.MapRange()
		for it.Next() {
			out[fmt.Sprint(normalizeValue(it.Key().Interface()))] = normalizeValue(it.Value().Interface())
		}
		return out
	}
	return fmt.Sprint(rv.Interface())
}
