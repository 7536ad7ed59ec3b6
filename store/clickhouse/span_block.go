package clickhouse

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/tokenpath/tokenpath/telemetry"
)

// spanBlock holds the spans table's columns as ch-go columns, so spans can
// be encoded to Native without the intermediate Go slices of SpansBatch.
// Blocks are pooled: Reset keeps the buffers for the next export.
type spanBlock struct {
	project                               proto.ColUInt32
	traceID, spanID, parent, statusMsg    proto.ColStr
	service, instance, name, kind, status *proto.ColLowCardinality[string]
	role, provider, model, operation      *proto.ColLowCardinality[string]
	start, end                            *proto.ColDateTime64
	duration                              proto.ColInt64
	resHash                               proto.ColUInt64
	inTok, outTok, ttft, queue, prefill   *proto.ColNullable[int64]
	serverTTFT, decode, serverE2E         *proto.ColNullable[int64]
	attrs, res                            *proto.ColMap[string, string]
	// flatAttrs replaces attrs in the block's input for EncodeSpansAttrs.
	flatAttrs  attrsColumn
	attrsAt    int // attributes' index in input
	eventNames *proto.ColArr[string]
	eventTimes *proto.ColArr[time.Time]
	// route and tenant: the request context assembly reads (telemetry.
	// RouteAttribute, SpanTenant), taken from the attributes.
	route  *proto.ColLowCardinality[string]
	tenant proto.ColStr
	// The call's identity, TTFT source and preemptions (migration 0020).
	responseID             proto.ColStr
	serverAddr, ttftSource *proto.ColLowCardinality[string]
	// The call's error class (migration 0022).
	errorType   *proto.ColLowCardinality[string]
	serverPort  proto.ColUInt16
	preemptions *proto.ColNullable[int64]
	input       proto.Input
	buf         proto.Buffer
	// rowBytes is the size of a row in the last block encoded, which
	// sizes the next one's buffer.
	rowBytes int
}

var spanBlocks = sync.Pool{New: func() any { return newSpanBlock() }}

func newSpanBlock() *spanBlock {
	lc := func() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }
	ni := func() *proto.ColNullable[int64] { return proto.NewColNullable[int64](new(proto.ColInt64)) }
	strMap := func() *proto.ColMap[string, string] {
		return proto.NewMap[string, string](new(proto.ColStr).LowCardinality(), new(proto.ColStr))
	}
	b := &spanBlock{
		service: lc(), instance: lc(), name: lc(), kind: lc(), status: lc(),
		role: lc(), provider: lc(), model: lc(), operation: lc(),
		start: newDateTime64(), end: newDateTime64(),
		inTok: ni(), outTok: ni(), ttft: ni(), queue: ni(), prefill: ni(), serverTTFT: ni(), decode: ni(), serverE2E: ni(),
		attrs: strMap(), res: strMap(),
		eventNames: new(proto.ColStr).Array(), eventTimes: proto.NewArray[time.Time](newDateTime64()),
		route: lc(), serverAddr: lc(), ttftSource: lc(), preemptions: ni(), errorType: lc(),
	}
	// spanSchema's columns, in its order (SpanBlocksBatch names them).
	b.input = make(proto.Input, len(spanSchema))
	for i, c := range spanSchema {
		b.input[i] = proto.InputColumn{Name: c.name, Data: c.block(b)}
	}
	for i, c := range b.input {
		if c.Name == "attributes" {
			b.attrsAt = i
		}
	}
	return b
}

func nullInt(p *int64) proto.Nullable[int64] {
	if p == nil {
		return proto.Null[int64]()
	}
	return proto.NewNullable(*p)
}

func nullNanos(d *time.Duration) proto.Nullable[int64] {
	if d == nil {
		return proto.Null[int64]()
	}
	return proto.NewNullable(int64(*d))
}

func (b *spanBlock) append(s *telemetry.Span) {
	b.appendFields(s)
	b.attrs.Append(s.Attributes)
	b.appendTail(s)
	b.route.Append(s.Attributes[telemetry.RouteAttribute])
	b.tenant.Append(telemetry.SpanTenant(s.Attributes))
}

// appendAttrs is append for a span whose attributes are entries [from,
// to) of attrs instead of its Attributes map; roles are attrs' names'
// contextRoles.
func (b *spanBlock) appendAttrs(s *telemetry.Span, attrs *SpanAttrs, roles []int8, from, to int) {
	b.appendFields(s)
	b.flatAttrs.append(attrs, from, to)
	b.appendTail(s)
	var route, tenant []byte
	best := int8(len(telemetry.TenantAttributes)) // tenant rank of tenant
	for j := from; j < to; j++ {
		switch r := roles[attrs.Keys[j]]; {
		case r == roleRoute:
			route = attrs.Values[attrs.Bounds[2*j]:attrs.Bounds[2*j+1]]
		case r >= 0 && r < best:
			if v := attrs.Values[attrs.Bounds[2*j]:attrs.Bounds[2*j+1]]; len(v) > 0 {
				tenant, best = v, r
			}
		}
	}
	b.route.Append(string(route))
	b.tenant.AppendBytes(tenant)
}

// roleRoute marks telemetry.RouteAttribute in contextRoles; a tenant
// attribute's role is its index in telemetry.TenantAttributes, any other
// name's roleNone.
const (
	roleNone  int8 = -1
	roleRoute int8 = -2
)

// contextRoles gives each attribute name its role in the route and tenant
// columns.
func contextRoles(names []string) []int8 {
	roles := make([]int8, len(names))
	for i, n := range names {
		roles[i] = roleNone
		if n == telemetry.RouteAttribute {
			roles[i] = roleRoute
		}
		for r, k := range telemetry.TenantAttributes {
			if n == k {
				roles[i] = int8(r)
			}
		}
	}
	return roles
}

// appendFields appends the columns before attributes.
func (b *spanBlock) appendFields(s *telemetry.Span) {
	b.project.Append(s.ProjectID)
	b.traceID.Append(s.TraceID)
	b.spanID.Append(s.SpanID)
	b.parent.Append(s.ParentSpanID)
	b.service.Append(s.Service)
	b.instance.Append(s.Instance)
	b.name.Append(s.Name)
	b.kind.Append(s.Kind)
	b.start.Append(s.Start)
	b.end.Append(s.End)
	b.duration.Append(int64(s.Duration()))
	b.status.Append(s.StatusCode)
	b.statusMsg.Append(s.StatusMessage)
	b.role.Append(s.LLM.Role.String())
	b.provider.Append(s.LLM.Provider)
	b.model.Append(s.LLM.Model)
	b.operation.Append(s.LLM.Operation)
	b.inTok.Append(nullInt(s.LLM.InputTokens))
	b.outTok.Append(nullInt(s.LLM.OutputTokens))
	b.ttft.Append(nullNanos(s.LLM.ClientTTFT))
	b.queue.Append(nullNanos(s.LLM.QueueTime))
	b.prefill.Append(nullNanos(s.LLM.PrefillTime))
	b.serverTTFT.Append(nullNanos(s.LLM.ServerTTFT))
	b.decode.Append(nullNanos(s.LLM.DecodeTime))
	b.serverE2E.Append(nullNanos(s.LLM.ServerE2E))
}

// appendTail appends the columns after attributes but route and tenant.
func (b *spanBlock) appendTail(s *telemetry.Span) {
	b.res.Append(inlineResource(s))
	b.resHash.Append(s.ResourceHash)
	b.eventNames.Append(s.EventNames)
	b.eventTimes.Append(s.EventTimes)
	b.responseID.Append(s.LLM.ResponseID)
	b.serverAddr.Append(s.LLM.ServerAddress)
	b.serverPort.Append(s.LLM.ServerPort)
	b.ttftSource.Append(s.LLM.TTFTSource)
	b.preemptions.Append(nullInt(s.LLM.Preemptions))
	b.errorType.Append(s.LLM.ErrorType)
}

func (b *spanBlock) reset() {
	b.input[b.attrsAt].Data = b.attrs
	for _, c := range b.input {
		c.Data.(proto.Resettable).Reset()
	}
	b.flatAttrs.Reset()
	b.buf.Reset()
}

// EncodeSpans renders spans as one Native block of the spans table, the
// form SpanBlocksBatch inserts. The bytes are compact and hold no pointers:
// the pipeline keeps them, not the spans with their attribute maps, until
// the insert.
func EncodeSpans(spans []telemetry.Span) ([]byte, error) {
	b := spanBlocks.Get().(*spanBlock)
	defer func() { b.reset(); spanBlocks.Put(b) }()
	for i := range spans {
		b.append(&spans[i])
	}
	return b.encode(len(spans))
}

// SpanAttrs are spans' attributes as one list instead of a map per span
// (normalize.Attrs has the same layout): span i's are the entries from
// Ends[i-1] (0 for the first span) to Ends[i]; entry j is the key
// Names[Keys[j]] with the value Values[Bounds[2j]:Bounds[2j+1]]. A key
// appears at most once per span.
type SpanAttrs struct {
	Ends   []int
	Names  []string
	Keys   []uint32
	Bounds []uint32
	Values []byte
}

// check reports what makes a unusable for spans rows.
func (a *SpanAttrs) check(rows int) error {
	if len(a.Ends) != rows {
		return fmt.Errorf("attributes for %d spans, want %d", len(a.Ends), rows)
	}
	n := len(a.Keys)
	if 2*n != len(a.Bounds) {
		return fmt.Errorf("%d attribute keys with %d bounds", n, len(a.Bounds))
	}
	from := 0
	for i, to := range a.Ends {
		if to < from || to > n {
			return fmt.Errorf("span %d's attributes end at %d (previous %d, %d in all)", i, to, from, n)
		}
		from = to
	}
	if from != n {
		return fmt.Errorf("the spans' attributes end at %d of %d", from, n)
	}
	for _, k := range a.Keys {
		if int(k) >= len(a.Names) {
			return fmt.Errorf("attribute key %d of %d names", k, len(a.Names))
		}
	}
	for j := 0; j < len(a.Bounds); j += 2 {
		if lo, hi := a.Bounds[j], a.Bounds[j+1]; lo > hi || int(hi) > len(a.Values) {
			return fmt.Errorf("attribute %d's value at %d..%d of %d bytes", j/2, lo, hi, len(a.Values))
		}
	}
	return nil
}

// EncodeSpansAttrs is EncodeSpans for spans whose attributes are in attrs
// (their Attributes maps are not read): no map is built or walked, and
// the stored attributes keep the order of attrs.
func EncodeSpansAttrs(spans []telemetry.Span, attrs *SpanAttrs) ([]byte, error) {
	if err := attrs.check(len(spans)); err != nil {
		return nil, fmt.Errorf("encode spans: %w", err)
	}
	b := spanBlocks.Get().(*spanBlock)
	defer func() { b.reset(); spanBlocks.Put(b) }()
	b.input[b.attrsAt].Data = &b.flatAttrs
	b.flatAttrs.begin(attrs)
	roles := contextRoles(attrs.Names)
	from := 0
	for i := range spans {
		to := attrs.Ends[i]
		b.appendAttrs(&spans[i], attrs, roles, from, to)
		from = to
	}
	return b.encode(len(spans))
}

// attrsColumn is the attributes column, Map(LowCardinality(String),
// String), encoded from SpanAttrs as ch-go's ColMap encodes a map per row
// (Native: offsets, then the keys as a LowCardinality column with their
// dictionary, then the values), with the dictionary indexed by the
// attributes' key ids instead of looked up key by key.
type attrsColumn struct {
	offsets proto.ColUInt64
	dict    proto.ColStr // distinct keys, in first use
	keys    []uint32     // dictionary index of each entry
	values  []byte       // the values as a Native String column
	// dictOf maps a SpanAttrs name id to 1 + its dictionary index (0:
	// not in the dictionary yet).
	dictOf []uint32
}

var (
	_ proto.ColInput     = (*attrsColumn)(nil)
	_ proto.StateEncoder = (*attrsColumn)(nil)
	_ proto.Resettable   = (*attrsColumn)(nil)
)

// begin readies c for a's spans, sized for all of a's entries at once
// (values up to 16 KiB have a length of one or two bytes).
func (c *attrsColumn) begin(a *SpanAttrs) {
	c.dictOf = append(c.dictOf[:0], make([]uint32, len(a.Names))...)
	c.keys = slices.Grow(c.keys[:0], len(a.Keys))
	c.values = slices.Grow(c.values[:0], len(a.Values)+2*len(a.Keys))
}

func (c *attrsColumn) append(a *SpanAttrs, from, to int) {
	for j := from; j < to; j++ {
		id := a.Keys[j]
		d := c.dictOf[id]
		if d == 0 {
			c.dict.Append(a.Names[id])
			d = uint32(c.dict.Rows())
			c.dictOf[id] = d
		}
		c.keys = append(c.keys, d-1)
		v := a.Values[a.Bounds[2*j]:a.Bounds[2*j+1]]
		c.values = binary.AppendUvarint(c.values, uint64(len(v)))
		c.values = append(c.values, v...)
	}
	c.offsets.Append(uint64(len(c.keys)))
}

func (c *attrsColumn) Type() proto.ColumnType {
	return proto.ColumnTypeMap.Sub(proto.ColumnTypeLowCardinality.Sub(proto.ColumnTypeString), proto.ColumnTypeString)
}

func (c *attrsColumn) Rows() int { return c.offsets.Rows() }

// EncodeState is the keys' LowCardinality serialization version (shared
// dictionaries with additional keys); String values have no state.
func (c *attrsColumn) EncodeState(b *proto.Buffer) { b.PutInt64(1) }

func (c *attrsColumn) EncodeColumn(b *proto.Buffer) {
	if c.Rows() == 0 {
		return
	}
	c.offsets.EncodeColumn(b)
	if len(c.keys) == 0 {
		return // as an empty LowCardinality and String column encode
	}
	// LowCardinality: flags and index width, the dictionary, the indexes.
	const hasAdditionalKeys, needUpdateDictionary = 1 << 9, 1 << 10
	n := c.dict.Rows()
	var width int64 // proto.KeyUInt8 … KeyUInt32
	switch {
	case n <= 1<<8:
		width = int64(proto.KeyUInt8)
	case n <= 1<<16:
		width = int64(proto.KeyUInt16)
	default:
		width = int64(proto.KeyUInt32)
	}
	b.PutInt64(hasAdditionalKeys | needUpdateDictionary | width)
	b.PutInt64(int64(n))
	c.dict.EncodeColumn(b)
	b.PutInt64(int64(len(c.keys)))
	for _, k := range c.keys {
		switch width {
		case int64(proto.KeyUInt8):
			b.Buf = append(b.Buf, byte(k))
		case int64(proto.KeyUInt16):
			b.Buf = binary.LittleEndian.AppendUint16(b.Buf, uint16(k))
		default:
			b.Buf = binary.LittleEndian.AppendUint32(b.Buf, k)
		}
	}
	b.Buf = append(b.Buf, c.values...)
}

func (c *attrsColumn) WriteColumn(w *proto.Writer) {
	w.ChainBuffer(c.EncodeColumn)
}

func (c *attrsColumn) Reset() {
	c.offsets.Reset()
	c.dict.Reset()
	c.keys, c.values, c.dictOf = c.keys[:0], c.values[:0], c.dictOf[:0]
}

// encode renders the block into a buffer the caller keeps, so the block
// (~1 MiB for 1000 spans) is not copied out of a pooled one; the buffer
// is sized from the last block's bytes a row, so it rarely grows.
func (b *spanBlock) encode(rows int) ([]byte, error) {
	b.buf.Buf = make([]byte, 0, rows*b.rowBytes*9/8+4096)
	blk := proto.Block{Columns: len(b.input), Rows: rows}
	if err := blk.EncodeRawBlock(&b.buf, 0, b.input); err != nil {
		return nil, fmt.Errorf("encode spans: %w", err)
	}
	out := b.buf.Buf
	b.buf.Buf = nil
	if rows > 0 {
		b.rowBytes = len(out) / rows
	}
	return out, nil
}

// SpanBlocksBatch inserts spans already encoded by EncodeSpans (rows in
// all). Only the embedded engine takes such a batch: see Store.TakesNative.
func SpanBlocksBatch(blocks [][]byte, rows int) *Batch {
	cols := make([]BatchColumn, len(spanColumnNames))
	for i, n := range spanColumnNames {
		cols[i] = BatchColumn{Name: n}
	}
	return &Batch{Table: "spans", Foreground: true, Columns: cols, native: blocks, nativeRows: rows}
}
