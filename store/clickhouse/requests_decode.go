package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// QueryRequests runs a SELECT of RequestColumns and returns its rows as
// requests. On the embedded engine the RowBinary answer is decoded straight
// into the structs: a diagnosis loads 75k rows, and going through Result
// (a boxed value per cell, then ScanRequests) cost it ~0.2 CPU-seconds and
// most of its garbage.
func (s *Store) QueryRequests(ctx context.Context, sql string, args ...any) ([]telemetry.LLMRequest, error) {
	e, ok := s.b.(*embedded)
	if !ok {
		r, err := s.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return ScanRequests(r), nil
	}
	q, err := Bind(sql, args...)
	if err != nil {
		return nil, err
	}
	defer s.timed(q)()
	out, err := e.run(ctx, q, rowBinaryFormat)
	if err != nil {
		return nil, err
	}
	reqs, err := decodeRequests(out)
	if !errors.Is(err, errUnsupportedType) {
		return reqs, err
	}
	// Columns other than RequestColumns' own: the generic path.
	r, err := decodeRowBinary(out)
	if err != nil {
		return nil, err
	}
	return ScanRequests(r), nil
}

// requestField decodes one column of a row into a request.
type requestField func(r *binReader, q *telemetry.LLMRequest, slab *numSlab)

// numSlab hands out the pointers of nullable numbers from shared chunks
// instead of one allocation each.
type numSlab struct {
	floats []float64
	ints   []int64
}

func (s *numSlab) float(v float64) *float64 {
	if len(s.floats) == 0 {
		s.floats = make([]float64, 4096)
	}
	p := &s.floats[0]
	*p, s.floats = v, s.floats[1:]
	return p
}

func (s *numSlab) int(v int64) *int64 {
	if len(s.ints) == 0 {
		s.ints = make([]int64, 1024)
	}
	p := &s.ints[0]
	*p, s.ints = v, s.ints[1:]
	return p
}

// requestFields maps each column of RequestColumns, with the type the
// engine reports for it, to its decoder.
func requestFields() map[string]struct {
	typ string
	set requestField
} {
	type f = struct {
		typ string
		set requestField
	}
	lc := "LowCardinality(String)"
	str := func(dst func(*telemetry.LLMRequest) *string) requestField {
		return func(r *binReader, q *telemetry.LLMRequest, _ *numSlab) { *dst(q) = string(r.bytes()) }
	}
	// LowCardinality columns hold few values: one string per value.
	interned := func(dst func(*telemetry.LLMRequest) *string) requestField {
		seen := map[string]string{}
		return func(r *binReader, q *telemetry.LLMRequest, _ *numSlab) {
			b := r.bytes()
			s, ok := seen[string(b)]
			if !ok {
				s = string(b)
				if len(seen) < 10_000 {
					seen[s] = s
				}
			}
			*dst(q) = s
		}
	}
	nf := func(dst func(*telemetry.LLMRequest) **float64) requestField {
		return func(r *binReader, q *telemetry.LLMRequest, slab *numSlab) {
			if r.u8() == 0 {
				*dst(q) = slab.float(math.Float64frombits(r.u64()))
			}
		}
	}
	ni := func(dst func(*telemetry.LLMRequest) **int64) requestField {
		return func(r *binReader, q *telemetry.LLMRequest, slab *numSlab) {
			if r.u8() == 0 {
				*dst(q) = slab.int(int64(r.u64()))
			}
		}
	}
	fl, in := "Nullable(Float64)", "Nullable(Int64)"
	return map[string]f{
		"project_id":     {"UInt32", func(r *binReader, q *telemetry.LLMRequest, _ *numSlab) { q.ProjectID = r.u32() }},
		"trace_id":       {"String", str(func(q *telemetry.LLMRequest) *string { return &q.TraceID })},
		"span_id":        {"String", str(func(q *telemetry.LLMRequest) *string { return &q.SpanID })},
		"tenant":         {"String", str(func(q *telemetry.LLMRequest) *string { return &q.Tenant })},
		"service":        {lc, interned(func(q *telemetry.LLMRequest) *string { return &q.Service })},
		"server_service": {lc, interned(func(q *telemetry.LLMRequest) *string { return &q.ServerService })},
		"model":          {lc, interned(func(q *telemetry.LLMRequest) *string { return &q.Model })},
		"provider":       {lc, interned(func(q *telemetry.LLMRequest) *string { return &q.Provider })},
		"instance":       {lc, interned(func(q *telemetry.LLMRequest) *string { return &q.Instance })},
		"route":          {lc, interned(func(q *telemetry.LLMRequest) *string { return &q.Route })},
		"start": {"DateTime64(9, 'UTC')", func(r *binReader, q *telemetry.LLMRequest, _ *numSlab) {
			q.Start = time.Unix(0, int64(r.u64())).UTC()
		}},
		"ttft_ms":            {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.TTFT })},
		"pre_inference_ms":   {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.PreInference })},
		"queue_ms":           {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.Queue })},
		"prefill_ms":         {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.Prefill })},
		"network_ms":         {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.Network })},
		"decode_ms":          {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.Decode })},
		"e2e_ms":             {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.E2E })},
		"itl_ms":             {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.ITL })},
		"cold_start_wait_ms": {fl, nf(func(q *telemetry.LLMRequest) **float64 { return &q.ColdStartWait })},
		"input_tokens":       {in, ni(func(q *telemetry.LLMRequest) **int64 { return &q.InputTokens })},
		"output_tokens":      {in, ni(func(q *telemetry.LLMRequest) **int64 { return &q.OutputTokens })},
		"cold_start":         {"UInt8", func(r *binReader, q *telemetry.LLMRequest, _ *numSlab) { q.ColdStart = r.u8() != 0 }},
		"error":              {"UInt8", func(r *binReader, q *telemetry.LLMRequest, _ *numSlab) { q.Error = r.u8() != 0 }},
		"call_index":         {"UInt16", func(r *binReader, q *telemetry.LLMRequest, _ *numSlab) { q.CallIndex = int(r.u16()) }},
	}
}

// decodeRequests decodes RowBinaryWithNamesAndTypes whose columns are all
// RequestColumns ones with their table types; anything else is
// errUnsupportedType.
func decodeRequests(buf []byte) ([]telemetry.LLMRequest, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	r := &binReader{b: buf}
	n := int(r.uvarint())
	if r.err != nil || n > len(buf) {
		return nil, fmt.Errorf("decode engine output: bad column count")
	}
	names := make([]string, n)
	for i := range names {
		names[i] = string(r.bytes())
	}
	known := requestFields()
	fields := make([]requestField, n)
	for i := range fields {
		typ := string(r.bytes())
		f, ok := known[names[i]]
		if r.err != nil || !ok || f.typ != typ {
			return nil, errUnsupportedType
		}
		fields[i] = f.set
	}
	var slab numSlab
	// A row of RequestColumns takes ~150 bytes: a close guess of the count.
	out := make([]telemetry.LLMRequest, 0, (len(buf)-r.off)/150+1)
	for r.off < len(buf) && r.err == nil {
		out = append(out, telemetry.LLMRequest{})
		q := &out[len(out)-1]
		for _, f := range fields {
			f(r, q, &slab)
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode engine output: %w", r.err)
	}
	return out, nil
}
