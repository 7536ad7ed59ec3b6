package clickhouse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The embedded engine answers in RowBinaryWithNamesAndTypes: decoding it is
// ~20× cheaper than JSONCompact (no text parsing, no number boxing through
// json.Number), which is what a 50k-row diagnosis load spends its time on.
// Types this decoder does not know make the query fall back to JSONCompact.
const rowBinaryFormat = "RowBinaryWithNamesAndTypes"

// errUnsupportedType asks the caller to re-run the query as JSONCompact.
var errUnsupportedType = errors.New("type not decodable from RowBinary")

// binReader walks a RowBinary buffer; the first short read sticks in err.
type binReader struct {
	b   []byte
	off int
	err error
}

func (r *binReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || r.off+n > len(r.b) {
		r.err = fmt.Errorf("engine output truncated at byte %d", r.off)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *binReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("bad length at byte %d of engine output", r.off)
		return 0
	}
	r.off += n
	return v
}

func (r *binReader) bytes() []byte { return r.take(int(r.uvarint())) }

func (r *binReader) u8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *binReader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *binReader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *binReader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// binDecoder reads one value of a column type and returns it normalized as
// Result documents (the same Go types as the JSON and server paths).
type binDecoder func(r *binReader) any

// newBinDecoder compiles a decoder for a ClickHouse type name.
func newBinDecoder(t string) (binDecoder, error) {
	switch {
	case strings.HasPrefix(t, "Nullable("):
		inner, err := newBinDecoder(t[len("Nullable(") : len(t)-1])
		if err != nil {
			return nil, err
		}
		return func(r *binReader) any {
			if r.u8() != 0 {
				return nil
			}
			return inner(r)
		}, nil
	case strings.HasPrefix(t, "LowCardinality("):
		inner := t[len("LowCardinality(") : len(t)-1]
		if unwrapType(inner) == "String" {
			// Few distinct values: share one string per value.
			seen := map[string]string{}
			nullable := strings.HasPrefix(inner, "Nullable(")
			return func(r *binReader) any {
				if nullable && r.u8() != 0 {
					return nil
				}
				b := r.bytes()
				if s, ok := seen[string(b)]; ok {
					return s
				}
				s := string(b)
				if len(seen) < 10_000 {
					seen[s] = s
				}
				return s
			}, nil
		}
		return newBinDecoder(inner)
	case t == "String":
		return func(r *binReader) any { return string(r.bytes()) }, nil
	case strings.HasPrefix(t, "FixedString("):
		n, err := strconv.Atoi(t[len("FixedString(") : len(t)-1])
		if err != nil {
			return nil, errUnsupportedType
		}
		return func(r *binReader) any { return string(r.take(n)) }, nil
	case t == "Bool":
		return func(r *binReader) any { return r.u8() != 0 }, nil
	case t == "UInt8":
		return func(r *binReader) any { return int64(r.u8()) }, nil
	case t == "UInt16":
		return func(r *binReader) any { return int64(r.u16()) }, nil
	case t == "UInt32":
		return func(r *binReader) any { return int64(r.u32()) }, nil
	case t == "UInt64":
		return func(r *binReader) any { return int64(r.u64()) }, nil
	case t == "Int8":
		return func(r *binReader) any { return int64(int8(r.u8())) }, nil
	case t == "Int16":
		return func(r *binReader) any { return int64(int16(r.u16())) }, nil
	case t == "Int32":
		return func(r *binReader) any { return int64(int32(r.u32())) }, nil
	case t == "Int64":
		return func(r *binReader) any { return int64(r.u64()) }, nil
	case t == "Float32":
		return func(r *binReader) any { return float64(math.Float32frombits(r.u32())) }, nil
	case t == "Float64":
		return func(r *binReader) any { return math.Float64frombits(r.u64()) }, nil
	case t == "Date":
		return func(r *binReader) any { return time.Unix(int64(r.u16())*86400, 0).UTC() }, nil
	case t == "Date32":
		return func(r *binReader) any { return time.Unix(int64(int32(r.u32()))*86400, 0).UTC() }, nil
	case t == "DateTime" || strings.HasPrefix(t, "DateTime("):
		return func(r *binReader) any { return time.Unix(int64(r.u32()), 0).UTC() }, nil
	case strings.HasPrefix(t, "DateTime64("):
		args := splitTypeArgs(t[len("DateTime64(") : len(t)-1])
		p, err := strconv.Atoi(args[0])
		if err != nil || p < 0 || p > 9 {
			return nil, errUnsupportedType
		}
		scale := int64(math.Pow10(p))
		return func(r *binReader) any {
			v := int64(r.u64())
			sec, frac := v/scale, v%scale
			if frac < 0 {
				sec, frac = sec-1, frac+scale
			}
			return time.Unix(sec, frac*(1_000_000_000/scale)).UTC()
		}, nil
	case t == "Array(Float64)":
		// Unboxed: rollup histograms arrive as hundreds of thousands of
		// numbers, and one allocation each fed the collector more than the
		// rest of a diagnosis. Row.Floats reads either form.
		return func(r *binReader) any {
			n := r.uvarint()
			if r.err != nil || n > uint64(len(r.b)-r.off)/8 {
				r.err = fmt.Errorf("bad array length at byte %d", r.off)
				return nil
			}
			out := make([]float64, n)
			for i := range out {
				out[i] = math.Float64frombits(r.u64())
			}
			return out
		}, nil
	case strings.HasPrefix(t, "Array("):
		elem, err := newBinDecoder(t[len("Array(") : len(t)-1])
		if err != nil {
			return nil, err
		}
		return func(r *binReader) any {
			n := r.uvarint()
			if r.err != nil || n > uint64(len(r.b)-r.off) {
				r.err = fmt.Errorf("bad array length at byte %d", r.off)
				return nil
			}
			out := make([]any, n)
			for i := range out {
				out[i] = elem(r)
			}
			return out
		}, nil
	case strings.HasPrefix(t, "Map("):
		args := splitTypeArgs(t[len("Map(") : len(t)-1])
		if len(args) != 2 {
			return nil, errUnsupportedType
		}
		key, err := newBinDecoder(args[0])
		if err != nil {
			return nil, err
		}
		val, err := newBinDecoder(args[1])
		if err != nil {
			return nil, err
		}
		return func(r *binReader) any {
			n := r.uvarint()
			if r.err != nil || n > uint64(len(r.b)-r.off) {
				r.err = fmt.Errorf("bad map length at byte %d", r.off)
				return nil
			}
			out := make(map[string]any, n)
			for range n {
				k := key(r)
				ks, ok := k.(string)
				if !ok {
					ks = fmt.Sprint(k)
				}
				out[ks] = val(r)
			}
			return out
		}, nil
	}
	// Decimal, Enum, UUID, Tuple, IPv4…: not read by Tokenpath's queries
	// today; the JSON path handles them.
	return nil, errUnsupportedType
}

// newBinSkipper compiles a reader that steps over one value of a column
// type without decoding it (a first look at rows, decodeTypedEach).
func newBinSkipper(t string) (func(r *binReader), error) {
	switch {
	case strings.HasPrefix(t, "Nullable("):
		inner, err := newBinSkipper(t[len("Nullable(") : len(t)-1])
		if err != nil {
			return nil, err
		}
		return func(r *binReader) {
			if r.u8() == 0 {
				inner(r)
			}
		}, nil
	case strings.HasPrefix(t, "LowCardinality("):
		return newBinSkipper(t[len("LowCardinality(") : len(t)-1])
	case t == "String":
		return func(r *binReader) { r.bytes() }, nil
	case strings.HasPrefix(t, "Array("):
		elem, err := newBinSkipper(t[len("Array(") : len(t)-1])
		if err != nil {
			return nil, err
		}
		return func(r *binReader) {
			n := r.uvarint()
			if r.err == nil && n > uint64(len(r.b)-r.off) {
				r.err = fmt.Errorf("bad array length at byte %d", r.off)
			}
			for i := uint64(0); i < n && r.err == nil; i++ {
				elem(r)
			}
		}, nil
	}
	if n := fixedWidth(t); n > 0 {
		return func(r *binReader) { r.take(n) }, nil
	}
	return nil, errUnsupportedType
}

// fixedWidth is the bytes of one value of a fixed-size type in RowBinary,
// 0 for other types.
func fixedWidth(t string) int {
	switch {
	case t == "Bool" || t == "UInt8" || t == "Int8":
		return 1
	case t == "UInt16" || t == "Int16" || t == "Date":
		return 2
	case t == "UInt32" || t == "Int32" || t == "Float32" || t == "Date32" || t == "DateTime" || strings.HasPrefix(t, "DateTime("):
		return 4
	case t == "UInt64" || t == "Int64" || t == "Float64" || strings.HasPrefix(t, "DateTime64("):
		return 8
	case strings.HasPrefix(t, "FixedString("):
		n, _ := strconv.Atoi(t[len("FixedString(") : len(t)-1])
		return n
	}
	return 0
}

// header reads RowBinaryWithNamesAndTypes' column names and types.
func (r *binReader) header() (names, types []string, err error) {
	n := int(r.uvarint())
	if r.err != nil || n > len(r.b) {
		return nil, nil, fmt.Errorf("decode engine output: bad column count")
	}
	names, types = make([]string, n), make([]string, n)
	for i := range names {
		names[i] = string(r.bytes())
	}
	for i := range types {
		types[i] = string(r.bytes())
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("decode engine output header: %w", r.err)
	}
	return names, types, nil
}

// decodeRowBinary parses RowBinaryWithNamesAndTypes output. It returns
// errUnsupportedType when a column's type has no binary decoder here.
func decodeRowBinary(buf []byte) (*Result, error) {
	res := &Result{}
	if len(buf) == 0 {
		return res, nil
	}
	r := &binReader{b: buf}
	var err error
	if res.Columns, res.Types, err = r.header(); err != nil {
		return nil, err
	}
	n := len(res.Columns)
	decoders := make([]binDecoder, n)
	for i := range res.Types {
		d, err := newBinDecoder(res.Types[i])
		if err != nil {
			return nil, fmt.Errorf("column %s %s: %w", res.Columns[i], res.Types[i], err)
		}
		decoders[i] = d
	}
	for r.off < len(buf) && r.err == nil {
		row := make([]any, n)
		for j, d := range decoders {
			row[j] = d(r)
		}
		res.Rows = append(res.Rows, row)
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode engine output: %w", r.err)
	}
	return res, nil
}

// arrayLen reads an array's length, each element width bytes wide; a
// length past the end of the output is an error, not an allocation.
func (r *binReader) arrayLen(width int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)-r.off)/uint64(width) {
		r.err = fmt.Errorf("bad array length at byte %d", r.off)
		return 0
	}
	return int(n)
}
