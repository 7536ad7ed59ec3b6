package clickhouse

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// Batch is a columnar block of rows for one table. Each column's Data is a
// typed Go slice matching its ClickHouse Type (see nativeColumn for the
// pairs): clickhouse-go appends the slices as they are, and the embedded
// engine receives them encoded as one Native block (its fast insert lane).
type Batch struct {
	Table   string
	Columns []BatchColumn
	// native holds pre-encoded Native blocks (SpanBlocksBatch) instead of
	// column data; Columns then only name the columns.
	native     [][]byte
	nativeRows int
	// nativeFile is a Native file to insert as it is (SpanStage.Batch);
	// native is then nil.
	nativeFile string
	// Foreground: on a cluster, Insert returns once the rows are on their
	// shards, not queued by the Distributed table (resources must be
	// readable before the spans that reference them, and spans by the time
	// their insert returns: SpansBatch).
	Foreground bool
}

// BatchColumn is one column of a Batch.
type BatchColumn struct {
	Name string
	Type string
	Data any
}

// Rows is the number of rows in the batch.
func (b *Batch) Rows() int {
	if b.preEncoded() {
		return b.nativeRows
	}
	if len(b.Columns) == 0 {
		return 0
	}
	return reflect.ValueOf(b.Columns[0].Data).Len()
}

// preEncoded reports whether the batch carries Native bytes (blocks or a
// file) instead of column values.
func (b *Batch) preEncoded() bool { return b.native != nil || b.nativeFile != "" }

func (b *Batch) check() error {
	if b.preEncoded() {
		return nil
	}
	n := b.Rows()
	for _, c := range b.Columns {
		if l := reflect.ValueOf(c.Data).Len(); l != n {
			return fmt.Errorf("batch %s: column %s has %d rows, want %d", b.Table, c.Name, l, n)
		}
	}
	return nil
}

// nativeInput converts the batch to ch-go columns for Native encoding.
func (b *Batch) nativeInput() (proto.Input, error) {
	in := make(proto.Input, 0, len(b.Columns))
	for _, c := range b.Columns {
		col, err := nativeColumn(c)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		in = append(in, proto.InputColumn{Name: c.Name, Data: col})
	}
	return in, nil
}

func newDateTime64() *proto.ColDateTime64 {
	c := &proto.ColDateTime64{}
	return c.WithPrecision(proto.PrecisionNano).WithLocation(time.UTC)
}

// nativeColumn is the one table of Go slice ↔ ClickHouse type pairs a Batch
// may hold.
func nativeColumn(c BatchColumn) (proto.ColInput, error) {
	switch c.Type {
	case "String":
		col := new(proto.ColStr)
		for _, v := range c.Data.([]string) {
			col.Append(v)
		}
		return col, nil
	case "LowCardinality(String)":
		col := new(proto.ColStr).LowCardinality()
		col.AppendArr(c.Data.([]string))
		return col, nil
	case "UInt8":
		col := new(proto.ColUInt8)
		for _, v := range c.Data.([]uint8) {
			col.Append(v)
		}
		return col, nil
	case "UInt16":
		col := new(proto.ColUInt16)
		for _, v := range c.Data.([]uint16) {
			col.Append(v)
		}
		return col, nil
	case "UInt32":
		col := new(proto.ColUInt32)
		for _, v := range c.Data.([]uint32) {
			col.Append(v)
		}
		return col, nil
	case "UInt64":
		col := new(proto.ColUInt64)
		for _, v := range c.Data.([]uint64) {
			col.Append(v)
		}
		return col, nil
	case "Int64":
		col := new(proto.ColInt64)
		for _, v := range c.Data.([]int64) {
			col.Append(v)
		}
		return col, nil
	case "Float64":
		col := new(proto.ColFloat64)
		for _, v := range c.Data.([]float64) {
			col.Append(v)
		}
		return col, nil
	case "Nullable(Int64)":
		col := proto.NewColNullable[int64](new(proto.ColInt64))
		for _, v := range c.Data.([]*int64) {
			if v == nil {
				col.Append(proto.Null[int64]())
			} else {
				col.Append(proto.NewNullable(*v))
			}
		}
		return col, nil
	case "Nullable(Int32)":
		col := proto.NewColNullable[int32](new(proto.ColInt32))
		for _, v := range c.Data.([]*int32) {
			if v == nil {
				col.Append(proto.Null[int32]())
			} else {
				col.Append(proto.NewNullable(*v))
			}
		}
		return col, nil
	case "Nullable(Float64)":
		col := proto.NewColNullable[float64](new(proto.ColFloat64))
		for _, v := range c.Data.([]*float64) {
			if v == nil {
				col.Append(proto.Null[float64]())
			} else {
				col.Append(proto.NewNullable(*v))
			}
		}
		return col, nil
	case "DateTime64(9, 'UTC')":
		col := newDateTime64()
		for _, v := range c.Data.([]time.Time) {
			col.Append(v)
		}
		return col, nil
	case "Map(LowCardinality(String), String)":
		// Labels go in key order: a Go map's iteration order varies, and a
		// stored map's order is what toString(labels) (histogram_points'
		// sorting key, the series a counter is read as) sees. Span
		// attributes keep the cheaper map order: nothing keys on it.
		col := proto.NewMap[string, string](new(proto.ColStr).LowCardinality(), new(proto.ColStr))
		if c.Name != "labels" {
			for _, v := range c.Data.([]map[string]string) {
				col.Append(v)
			}
			return col, nil
		}
		var kv []proto.KV[string, string]
		for _, v := range c.Data.([]map[string]string) {
			kv = kv[:0]
			for k, x := range v {
				kv = append(kv, proto.KV[string, string]{Key: k, Value: x})
			}
			slices.SortFunc(kv, func(a, b proto.KV[string, string]) int { return strings.Compare(a.Key, b.Key) })
			col.AppendKV(kv)
		}
		return col, nil
	case "Array(String)":
		col := new(proto.ColStr).Array()
		for _, v := range c.Data.([][]string) {
			col.Append(v)
		}
		return col, nil
	case "Array(Float64)":
		col := new(proto.ColFloat64).Array()
		for _, v := range c.Data.([][]float64) {
			col.Append(v)
		}
		return col, nil
	case "Array(UInt64)":
		col := new(proto.ColUInt64).Array()
		for _, v := range c.Data.([][]uint64) {
			col.Append(v)
		}
		return col, nil
	case "Array(DateTime64(9, 'UTC'))":
		col := proto.NewArray[time.Time](newDateTime64())
		for _, v := range c.Data.([][]time.Time) {
			col.Append(v)
		}
		return col, nil
	}
	return nil, fmt.Errorf("unsupported batch type %s", c.Type)
}

// encodeNative renders the batch in ClickHouse's Native format (revision 0:
// no block info, no custom serialization), as `FORMAT Native` files hold it.
func (b *Batch) encodeNative() ([]byte, error) {
	in, err := b.nativeInput()
	if err != nil {
		return nil, err
	}
	var buf proto.Buffer
	blk := proto.Block{Columns: len(in), Rows: b.Rows()}
	if err := blk.EncodeRawBlock(&buf, 0, in); err != nil {
		return nil, err
	}
	return buf.Buf, nil
}
