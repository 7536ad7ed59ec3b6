package clickhouse

import (
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// requestSchema describes the llm_requests table once: each column's name,
// its ClickHouse type, how it reads and writes a telemetry.LLMRequest and
// its key in the public API (the column's name unless publicAs names
// another; none when internal). RequestsRewriteBatch, the select lists
// (RequestColumns, DetailColumns), the typed decoder (requestFields), the
// generic readers (ScanRequests, ScanDetail) and the API's request JSON
// (RequestFields) all come from it. The core columns keep the order of
// llm_request_top's state tuples (migration 0012), which topStatesSQL
// unpacks by position; the API writes its keys in this order too.
// TestRequestSchemaMatchesTable holds it to the table the migrations build;
// TestRequestSchemaRoundTrip sends every field through the engine and back.
var requestSchema = []requestColumn{
	uint32Col("project_id", requestCore, func(q *rq) *uint32 { return &q.ProjectID }).internal(),
	stringCol("trace_id", requestCore, func(q *rq) *string { return &q.TraceID }),
	stringCol("span_id", requestCore, func(q *rq) *string { return &q.SpanID }),
	lcCol("service", requestCore, func(q *rq) *string { return &q.Service }),
	lcCol("server_service", requestCore, func(q *rq) *string { return &q.ServerService }).omitEmpty(),
	lcCol("model", requestCore, func(q *rq) *string { return &q.Model }),
	lcCol("provider", requestCore, func(q *rq) *string { return &q.Provider }),
	lcCol("instance", requestCore, func(q *rq) *string { return &q.Instance }),
	timeCol("start", requestCore, func(q *rq) *time.Time { return &q.Start }),
	msCol("ttft_ms", func(q *rq) **float64 { return &q.TTFT }),
	msCol("pre_inference_ms", func(q *rq) **float64 { return &q.PreInference }),
	msCol("queue_ms", func(q *rq) **float64 { return &q.Queue }),
	msCol("prefill_ms", func(q *rq) **float64 { return &q.Prefill }),
	msCol("network_ms", func(q *rq) **float64 { return &q.Network }),
	msCol("decode_ms", func(q *rq) **float64 { return &q.Decode }),
	msCol("e2e_ms", func(q *rq) **float64 { return &q.E2E }),
	msCol("itl_ms", func(q *rq) **float64 { return &q.ITL }),
	msCol("cold_start_wait_ms", func(q *rq) **float64 { return &q.ColdStartWait }),
	countCol("input_tokens", requestCore, func(q *rq) **int64 { return &q.InputTokens }),
	countCol("output_tokens", requestCore, func(q *rq) **int64 { return &q.OutputTokens }),
	flagCol("cold_start", func(q *rq) *bool { return &q.ColdStart }),
	flagCol("error", func(q *rq) *bool { return &q.Error }),
	// The API writes error_type (and error_class) for failed calls only
	// (web/request_json.go).
	lcCol("error_type", requestDetail, func(q *rq) *string { return &q.ErrorType }),
	callIndexCol("call_index", func(q *rq) *int { return &q.CallIndex }),
	lcCol("route", requestCore, func(q *rq) *string { return &q.Route }).omitEmpty(),
	stringCol("tenant", requestCore, func(q *rq) *string { return &q.Tenant }).omitEmpty(),
	lcCol("join_method", requestDetail, func(q *rq) *string { return &q.Join }).publicAs("join").omitEmpty(),
	stringCol("server_trace_id", requestDetail, func(q *rq) *string { return &q.ServerTraceID }).omitEmpty(),
	stringCol("server_span_id", requestDetail, func(q *rq) *string { return &q.ServerSpanID }).omitEmpty(),
	lcCol("ttft_source", requestDetail, func(q *rq) *string { return &q.TTFTSource }),
	lcCol("token_source", requestDetail, func(q *rq) *string { return &q.TokenSource }),
	countCol("preemptions", requestDetail, func(q *rq) **int64 { return &q.Preemptions }),
	{name: "version", typ: "UInt64", part: requestVersioning, encode: func(w requestRows) any {
		out := make([]uint64, len(w.all))
		for i := range out {
			out[i] = w.version
			if i >= w.replacedFrom {
				out[i] = w.version - 1
			}
		}
		return out
	}},
	{name: "is_deleted", typ: "UInt8", part: requestVersioning, encode: func(w requestRows) any {
		out := make([]uint8, len(w.all))
		for i := w.live; i < len(out); i++ {
			out[i] = 1
		}
		return out
	}},
}

type rq = telemetry.LLMRequest

// requestPart says which select list a column is in.
type requestPart uint8

const (
	// requestCore columns are RequestColumns: the samples and the top
	// rows keep them too, and the typed decoder reads them.
	requestCore requestPart = iota
	// requestDetail columns are DetailColumns, kept by llm_requests only.
	requestDetail
	// requestVersioning columns (version, is_deleted) are the batch's, not
	// the request's: statements that need them name them.
	requestVersioning
)

// requestColumn is one column of llm_requests.
type requestColumn struct {
	name, typ string
	part      requestPart
	// encode lays the column out for a batch: a typed slice (nativeColumn).
	encode func(w requestRows) any
	// typed makes the column's RowBinary decoder (a fresh one per answer:
	// lcColumn keeps its own strings); nil for requestVersioning.
	typed func() typedColumn[rq]
	// scan reads the column from a generic Result row.
	scan func(w Row, q *rq)
	// api is the column in the public API's request JSON.
	api apiField
}

// requestRows is what a batch writes: live rows, then tombstones from
// live on, then from replacedFrom the superseded rows one version below.
type requestRows struct {
	all                []rq
	live, replacedFrom int
	version            uint64
}

// fillColumn copies one field of every row into a column.
func fillColumn[C any](rows []rq, field func(*rq) *C) []C {
	out := make([]C, len(rows))
	for i := range rows {
		out[i] = *field(&rows[i])
	}
	return out
}

func uint32Col(name string, part requestPart, f func(*rq) *uint32) requestColumn {
	return requestColumn{name: name, typ: "UInt32", part: part, api: apiOf(name, jsonUint(f)),
		encode: func(w requestRows) any { return fillColumn(w.all, f) },
		typed:  stateless(typedColumn[rq]{"UInt32", func(r *binReader, q *rq, _ *numSlab) { *f(q) = r.u32() }}),
		scan:   func(w Row, q *rq) { *f(q) = uint32(w.Int(name)) }}
}

func stringCol(name string, part requestPart, f func(*rq) *string) requestColumn {
	return requestColumn{name: name, typ: "String", part: part, api: apiOf(name, jsonString(f)),
		encode: func(w requestRows) any { return fillColumn(w.all, f) },
		typed:  func() typedColumn[rq] { return strColumn(f) },
		scan:   func(w Row, q *rq) { *f(q) = w.String(name) }}
}

func lcCol(name string, part requestPart, f func(*rq) *string) requestColumn {
	return requestColumn{name: name, typ: "LowCardinality(String)", part: part, api: apiOf(name, jsonString(f)),
		encode: func(w requestRows) any { return fillColumn(w.all, f) },
		typed:  func() typedColumn[rq] { return lcColumn(f) },
		scan:   func(w Row, q *rq) { *f(q) = w.String(name) }}
}

func timeCol(name string, part requestPart, f func(*rq) *time.Time) requestColumn {
	return requestColumn{name: name, typ: "DateTime64(9, 'UTC')", part: part, api: apiOf(name, jsonTime(f)),
		encode: func(w requestRows) any { return fillColumn(w.all, f) },
		typed:  func() typedColumn[rq] { return timeColumn(f) },
		scan:   func(w Row, q *rq) { *f(q) = w.Time(name) }}
}

// msCol is a component duration in milliseconds, NULL when unknown.
func msCol(name string, f func(*rq) **float64) requestColumn {
	return requestColumn{name: name, typ: "Nullable(Float64)", part: requestCore, api: apiOf(name, jsonNullFloat(f)),
		encode: func(w requestRows) any { return fillColumn(w.all, f) },
		typed:  func() typedColumn[rq] { return nullFloatColumn(f) },
		scan:   func(w Row, q *rq) { *f(q) = w.FloatPtr(name) }}
}

// countCol is a count, NULL when the spans did not say.
func countCol(name string, part requestPart, f func(*rq) **int64) requestColumn {
	return requestColumn{name: name, typ: "Nullable(Int64)", part: part, api: apiOf(name, jsonNullInt(f)),
		encode: func(w requestRows) any { return fillColumn(w.all, f) },
		typed:  func() typedColumn[rq] { return nullIntColumn(f) },
		scan:   func(w Row, q *rq) { *f(q) = w.IntPtr(name) }}
}

func flagCol(name string, f func(*rq) *bool) requestColumn {
	c := convertedCol(name, "UInt8", f, b2u, func(r *binReader) bool { return r.u8() != 0 }, Row.Bool)
	c.api = apiOf(name, jsonBool(f))
	return c
}

func callIndexCol(name string, f func(*rq) *int) requestColumn {
	c := convertedCol(name, "UInt16", f, func(v int) uint16 { return uint16(v) },
		func(r *binReader) int { return int(r.u16()) }, func(w Row, c string) int { return int(w.Int(c)) })
	c.api = apiOf(name, jsonInt(f))
	return c
}

// convertedCol stores a field of Go type F as a column of Go type C (a
// bool as UInt8, an int as UInt16): store converts for the batch, read
// and scan convert back from RowBinary and from a Result row.
func convertedCol[F, C any](name, typ string, f func(*rq) *F, store func(F) C, read func(*binReader) F, scan func(Row, string) F) requestColumn {
	return requestColumn{name: name, typ: typ, part: requestCore,
		encode: func(w requestRows) any {
			out := make([]C, len(w.all))
			for i := range w.all {
				out[i] = store(*f(&w.all[i]))
			}
			return out
		},
		typed: stateless(typedColumn[rq]{typ, func(r *binReader, q *rq, _ *numSlab) { *f(q) = read(r) }}),
		scan:  func(w Row, q *rq) { *f(q) = scan(w, name) }}
}

// stateless hands out the one decoder of a column that keeps no state,
// made once: a new closure per answer cost an allocation each
// (BenchmarkDecodeRequests -benchmem).
func stateless[T any](c typedColumn[T]) func() typedColumn[T] {
	return func() typedColumn[T] { return c }
}

// requestColumnList is the select list of one part of requestSchema.
func requestColumnList(part requestPart) string {
	var names []string
	for _, c := range requestSchema {
		if c.part == part {
			names = append(names, c.name)
		}
	}
	return strings.Join(names, ", ")
}

// RequestColumns is the select list that ScanRequests and QueryRequests
// read: requestSchema's core columns.
var RequestColumns = requestColumnList(requestCore)

// DetailColumns say how a request was paired (migration 0021), the failed
// call's error class (migration 0022) and where its figures came from
// (migration 0023); the samples and rollups do not keep them, so they are
// read from llm_requests only, beside RequestColumns (ScanDetails).
var DetailColumns = requestColumnList(requestDetail)

// RequestsBatch lays decomposed requests out as llm_requests columns, all
// with the given version (newer versions replace older rows of a trace).
// Tombstones (rows that a re-assembly no longer produces) are passed in
// deleted with is_deleted = 1.
func RequestsBatch(reqs []telemetry.LLMRequest, deleted []telemetry.LLMRequest, version uint64) *Batch {
	return RequestsRewriteBatch(reqs, deleted, nil, version)
}

// RequestsRewriteBatch is RequestsBatch for a re-assembly that replaces
// live rows: replaced holds the live versions that reqs supersede, written
// again as deleted rows one version below, so the rollups (rollup.go)
// subtract them in the same insert that adds their successors. FINAL never
// sees them: the new version of each key is higher.
func RequestsRewriteBatch(reqs, deleted, replaced []telemetry.LLMRequest, version uint64) *Batch {
	w := requestRows{all: append(append(append([]telemetry.LLMRequest{}, reqs...), deleted...), replaced...),
		live: len(reqs), replacedFrom: len(reqs) + len(deleted), version: version}
	cols := make([]BatchColumn, len(requestSchema))
	for i, c := range requestSchema {
		cols[i] = BatchColumn{c.name, c.typ, c.encode(w)}
	}
	return &Batch{Table: "llm_requests", Columns: cols}
}

// ScanRequests reads rows selected with RequestColumns.
func ScanRequests(r *Result) []telemetry.LLMRequest {
	out := make([]telemetry.LLMRequest, r.Len())
	for i := range out {
		scanRequestPart(r.Row(i), &out[i], requestCore)
	}
	return out
}

// ScanDetails sets reqs' DetailColumns fields from rows of r; reqs[i] is
// row i.
func ScanDetails(r *Result, reqs []telemetry.LLMRequest) {
	for i := range reqs {
		ScanDetail(r.Row(i), &reqs[i])
	}
}

// ScanDetail sets req's DetailColumns fields from one row.
func ScanDetail(w Row, req *telemetry.LLMRequest) { scanRequestPart(w, req, requestDetail) }

func scanRequestPart(w Row, q *rq, part requestPart) {
	for i := range requestSchema {
		if c := &requestSchema[i]; c.part == part {
			c.scan(w, q)
		}
	}
}

// requestFields maps each column of RequestColumns, with the type the
// engine reports for it, to its decoder.
func requestFields() map[string]typedColumn[rq] {
	out := make(map[string]typedColumn[rq], len(requestSchema))
	for _, c := range requestSchema {
		if c.part == requestCore {
			out[c.name] = c.typed()
		}
	}
	return out
}
