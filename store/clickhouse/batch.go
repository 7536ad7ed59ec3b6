package clickhouse

import (
	"fmt"
	"reflect"
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
}

// BatchColumn is one column of a Batch.
type BatchColumn struct {
	Name string
	Type string
	Data any
}

// Rows is the number of rows in the batch.
func (b *Batch) Rows() int {
	if len(b.Columns) == 0 {
		return 0
	}
	return reflect.ValueOf(b.Columns[0].Data).Len()
}

func (b *Batch) check() error {
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
		col := proto.NewMap[string, string](new(proto.ColStr).LowCardinality(), new(proto.ColStr))
		for _, v := range c.Data.([]map[string]string) {
			col.Append(v)
		}
		return col, nil
	case "Array(String)":
		col := new(proto.ColStr).Array()
		for _, v := range c.Data.([][]string) {
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
