package clickhouse

import (
	"strings"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/tokenpath/tokenpath/telemetry"
)

// spanSchema describes the spans table once, in insert order: each
// column's name, its ClickHouse type, which select lists read it, how
// SpansBatch lays it out, the Native block's column that EncodeSpans
// fills (spanBlock: its appends stay written out per column, the ingest
// hot path, BenchmarkEncodeSpans) and, for the columns the assembler
// reads, the typed decoder. SpansBatch, the block's column names and
// order, SpanBlocksBatch, SpanColumns, SpanCoreColumns and
// spanCoreFields all come from it. TestSpanSchemaMatchesTable holds it to
// the table the migrations build; TestSpanBlocksMatchSpansBatch holds the
// block's appends to SpansBatch.
var spanSchema = []spanColumn{
	spanCol("project_id", "UInt32", spanCore, func(s *sp) uint32 { return s.ProjectID },
		func(b *spanBlock) proto.ColInput { return &b.project }).
		decodedBy(stateless(typedColumn[sp]{"UInt32", func(r *binReader, v *sp, _ *numSlab) { v.ProjectID = r.u32() }})),
	spanStr("trace_id", spanCore, func(s *sp) *string { return &s.TraceID }, func(b *spanBlock) proto.ColInput { return &b.traceID }),
	spanStr("span_id", spanCore, func(s *sp) *string { return &s.SpanID }, func(b *spanBlock) proto.ColInput { return &b.spanID }),
	spanStr("parent_span_id", spanCore, func(s *sp) *string { return &s.ParentSpanID }, func(b *spanBlock) proto.ColInput { return &b.parent }),
	spanLC("service", spanCore, func(s *sp) *string { return &s.Service }, func(b *spanBlock) proto.ColInput { return b.service }),
	spanLC("instance", spanCore, func(s *sp) *string { return &s.Instance }, func(b *spanBlock) proto.ColInput { return b.instance }),
	spanLC("name", spanCore, func(s *sp) *string { return &s.Name }, func(b *spanBlock) proto.ColInput { return b.name }),
	spanLC("kind", spanStored, func(s *sp) *string { return &s.Kind }, func(b *spanBlock) proto.ColInput { return b.kind }),
	spanTime("start", func(s *sp) *time.Time { return &s.Start }, func(b *spanBlock) proto.ColInput { return b.start }),
	spanTime("end_time", func(s *sp) *time.Time { return &s.End }, func(b *spanBlock) proto.ColInput { return b.end }),
	spanCol("duration_ns", "Int64", spanDerived, func(s *sp) int64 { return int64(s.Duration()) },
		func(b *spanBlock) proto.ColInput { return &b.duration }),
	spanLC("status_code", spanCore, func(s *sp) *string { return &s.StatusCode }, func(b *spanBlock) proto.ColInput { return b.status }),
	spanStr("status_message", spanStored, func(s *sp) *string { return &s.StatusMessage }, func(b *spanBlock) proto.ColInput { return &b.statusMsg }),
	spanCol("llm_role", lowCardinality, spanCore, func(s *sp) string { return s.LLM.Role.String() },
		func(b *spanBlock) proto.ColInput { return b.role }).
		decodedBy(stateless(typedColumn[sp]{lowCardinality, func(r *binReader, v *sp, _ *numSlab) {
			v.LLM.Role = telemetry.ParseLLMRole(string(r.bytes()))
		}})),
	spanLC("provider", spanCore, func(s *sp) *string { return &s.LLM.Provider }, func(b *spanBlock) proto.ColInput { return b.provider }),
	spanLC("model", spanCore, func(s *sp) *string { return &s.LLM.Model }, func(b *spanBlock) proto.ColInput { return b.model }),
	spanLC("operation", spanCore, func(s *sp) *string { return &s.LLM.Operation }, func(b *spanBlock) proto.ColInput { return b.operation }),
	spanCount("input_tokens", func(s *sp) **int64 { return &s.LLM.InputTokens }, func(b *spanBlock) proto.ColInput { return b.inTok }),
	spanCount("output_tokens", func(s *sp) **int64 { return &s.LLM.OutputTokens }, func(b *spanBlock) proto.ColInput { return b.outTok }),
	spanNanos("client_ttft_ns", func(s *sp) **time.Duration { return &s.LLM.ClientTTFT }, func(b *spanBlock) proto.ColInput { return b.ttft }),
	spanNanos("queue_ns", func(s *sp) **time.Duration { return &s.LLM.QueueTime }, func(b *spanBlock) proto.ColInput { return b.queue }),
	spanNanos("prefill_ns", func(s *sp) **time.Duration { return &s.LLM.PrefillTime }, func(b *spanBlock) proto.ColInput { return b.prefill }),
	spanNanos("server_ttft_ns", func(s *sp) **time.Duration { return &s.LLM.ServerTTFT }, func(b *spanBlock) proto.ColInput { return b.serverTTFT }),
	spanNanos("decode_ns", func(s *sp) **time.Duration { return &s.LLM.DecodeTime }, func(b *spanBlock) proto.ColInput { return b.decode }),
	spanNanos("server_e2e_ns", func(s *sp) **time.Duration { return &s.LLM.ServerE2E }, func(b *spanBlock) proto.ColInput { return b.serverE2E }),
	spanCol("attributes", stringMap, spanStored, func(s *sp) map[string]string { return orEmpty(s.Attributes) },
		func(b *spanBlock) proto.ColInput { return b.attrs }),
	// A span that references a row of the resources table stores its hash,
	// not the map (inlineResource).
	spanCol("resource", stringMap, spanStored, func(s *sp) map[string]string { return orEmpty(inlineResource(s)) },
		func(b *spanBlock) proto.ColInput { return b.res }),
	spanCol("resource_hash", "UInt64", spanStored, func(s *sp) uint64 { return s.ResourceHash },
		func(b *spanBlock) proto.ColInput { return &b.resHash }),
	spanCol("event_names", "Array(String)", spanStored, func(s *sp) []string { return orEmptyOf(s.EventNames) },
		func(b *spanBlock) proto.ColInput { return b.eventNames }),
	spanCol("event_times", "Array("+dateTime64+")", spanStored, func(s *sp) []time.Time { return orEmptyOf(s.EventTimes) },
		func(b *spanBlock) proto.ColInput { return b.eventTimes }),
	// route and tenant: the request context assembly reads, taken from the
	// attributes (telemetry.RouteAttribute, SpanTenant); read back they go
	// into the attributes they came from (setSpanContext).
	spanCol("route", lowCardinality, spanDerived, func(s *sp) string { return s.Attributes[telemetry.RouteAttribute] },
		func(b *spanBlock) proto.ColInput { return b.route }).
		decodedBy(stateless(typedColumn[sp]{lowCardinality, func(r *binReader, v *sp, _ *numSlab) {
			if b := r.bytes(); len(b) > 0 {
				setSpanContext(v, string(b), "")
			}
		}})),
	spanCol("tenant", "String", spanDerived, func(s *sp) string { return telemetry.SpanTenant(s.Attributes) },
		func(b *spanBlock) proto.ColInput { return &b.tenant }).
		decodedBy(stateless(typedColumn[sp]{"String", func(r *binReader, v *sp, _ *numSlab) {
			if b := r.bytes(); len(b) > 0 {
				setSpanContext(v, "", string(b))
			}
		}})),
	// The call's identity, TTFT source and preemptions (migration 0020).
	spanStr("response_id", spanCore, func(s *sp) *string { return &s.LLM.ResponseID }, func(b *spanBlock) proto.ColInput { return &b.responseID }),
	spanLC("server_address", spanCore, func(s *sp) *string { return &s.LLM.ServerAddress }, func(b *spanBlock) proto.ColInput { return b.serverAddr }),
	spanCol("server_port", "UInt16", spanCore, func(s *sp) uint16 { return s.LLM.ServerPort },
		func(b *spanBlock) proto.ColInput { return &b.serverPort }).
		decodedBy(stateless(typedColumn[sp]{"UInt16", func(r *binReader, v *sp, _ *numSlab) { v.LLM.ServerPort = r.u16() }})),
	spanLC("ttft_source", spanCore, func(s *sp) *string { return &s.LLM.TTFTSource }, func(b *spanBlock) proto.ColInput { return b.ttftSource }),
	spanCount("preemptions", func(s *sp) **int64 { return &s.LLM.Preemptions }, func(b *spanBlock) proto.ColInput { return b.preemptions }),
	// The call's error class (migration 0022).
	spanLC("error_type", spanCore, func(s *sp) *string { return &s.LLM.ErrorType }, func(b *spanBlock) proto.ColInput { return b.errorType }),
}

type sp = telemetry.Span

const (
	lowCardinality = "LowCardinality(String)"
	dateTime64     = "DateTime64(9, 'UTC')"
	stringMap      = "Map(LowCardinality(String), String)"
)

// spanPart says which select lists read a column.
type spanPart uint8

const (
	// spanCore columns are SpanCoreColumns (and SpanColumns): the typed
	// columns the assembler reads, each with a typed decoder.
	spanCore spanPart = iota
	// spanStored columns are in SpanColumns only: the trace page's (the
	// kind, the attribute maps, the events).
	spanStored
	// spanDerived columns are computed from the span on insert and read by
	// name where needed (duration_ns in SQL, route and tenant by the
	// assembler).
	spanDerived
)

// spanColumn is one column of spans.
type spanColumn struct {
	name, typ string
	part      spanPart
	// batch lays the column out for SpansBatch: a typed slice.
	batch func(spans []sp) any
	// block is the column of a spanBlock EncodeSpans fills.
	block func(b *spanBlock) proto.ColInput
	// typed makes the column's RowBinary decoder (QuerySpanCores); nil for
	// a column it does not read.
	typed func() typedColumn[sp]
}

// spanCol is a column of Go type C, get's value of each span.
func spanCol[C any](name, typ string, part spanPart, get func(*sp) C, block func(*spanBlock) proto.ColInput) spanColumn {
	return spanColumn{name: name, typ: typ, part: part, block: block, batch: func(spans []sp) any {
		out := make([]C, len(spans))
		for i := range spans {
			out[i] = get(&spans[i])
		}
		return out
	}}
}

// decodedBy gives the column its typed decoder.
func (c spanColumn) decodedBy(typed func() typedColumn[sp]) spanColumn {
	c.typed = typed
	return c
}

// spanStr and spanLC are String and LowCardinality(String) columns; a
// core one is decoded into the field it is written from.
func spanStr(name string, part spanPart, f func(*sp) *string, block func(*spanBlock) proto.ColInput) spanColumn {
	c := spanCol(name, "String", part, func(s *sp) string { return *f(s) }, block)
	if part == spanCore {
		c.typed = func() typedColumn[sp] { return strColumn(f) }
	}
	return c
}

func spanLC(name string, part spanPart, f func(*sp) *string, block func(*spanBlock) proto.ColInput) spanColumn {
	c := spanCol(name, lowCardinality, part, func(s *sp) string { return *f(s) }, block)
	if part == spanCore {
		c.typed = func() typedColumn[sp] { return lcColumn(f) }
	}
	return c
}

func spanTime(name string, f func(*sp) *time.Time, block func(*spanBlock) proto.ColInput) spanColumn {
	return spanCol(name, dateTime64, spanCore, func(s *sp) time.Time { return *f(s) }, block).
		decodedBy(func() typedColumn[sp] { return timeColumn(f) })
}

// spanCount is a count, NULL when the span did not say.
func spanCount(name string, f func(*sp) **int64, block func(*spanBlock) proto.ColInput) spanColumn {
	return spanCol(name, "Nullable(Int64)", spanCore, func(s *sp) *int64 { return *f(s) }, block).
		decodedBy(func() typedColumn[sp] { return nullIntColumn(f) })
}

// spanNanos is a duration in nanoseconds, NULL when the span did not say.
func spanNanos(name string, f func(*sp) **time.Duration, block func(*spanBlock) proto.ColInput) spanColumn {
	return spanCol(name, "Nullable(Int64)", spanCore, func(s *sp) *int64 { return nanos(*f(s)) }, block).
		decodedBy(func() typedColumn[sp] { return nullDurationColumn(f) })
}

// spanColumnList is the select list of the columns parts name.
func spanColumnList(parts ...spanPart) string {
	var names []string
	for _, c := range spanSchema {
		for _, p := range parts {
			if c.part == p {
				names = append(names, c.name)
			}
		}
	}
	return strings.Join(names, ", ")
}

// SpanColumns is the select list that ScanSpans reads: every stored
// column but those derived on insert.
var SpanColumns = spanColumnList(spanCore, spanStored)

// SpanCoreColumns are the typed span columns SpanCore reads: what the
// assembler needs, without the attribute maps.
var SpanCoreColumns = spanColumnList(spanCore)

// spanCoreFields maps SpanCoreColumns, route and tenant to their decoders.
// The route and tenant land in Attributes under the keys ScanSpanCores
// uses, in whichever order the columns come.
func spanCoreFields() map[string]typedColumn[sp] {
	out := make(map[string]typedColumn[sp], len(spanSchema))
	for _, c := range spanSchema {
		if c.typed != nil {
			out[c.name] = c.typed()
		}
	}
	return out
}

// spanColumnNames are the columns EncodeSpans writes, in order.
var spanColumnNames = func() []string {
	out := make([]string, len(spanSchema))
	for i, c := range spanSchema {
		out[i] = c.name
	}
	return out
}()

// SpansBatch lays spans out as columns of the spans table. Spans with a
// ResourceHash store it instead of their resource map: insert their
// resources (ResourcesBatch) before them. It is a Foreground batch: the
// assembler reads spans by inserted_at and stays behind the inserts still
// under way (ingest.Pipeline.WritingSince), so on a cluster the insert must
// not return while its rows are still queued for their shards.
func SpansBatch(spans []telemetry.Span) *Batch {
	cols := make([]BatchColumn, len(spanSchema))
	for i, c := range spanSchema {
		cols[i] = BatchColumn{c.name, c.typ, c.batch(spans)}
	}
	return &Batch{Table: "spans", Foreground: true, Columns: cols}
}
