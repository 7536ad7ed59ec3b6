package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// QueryRequests runs a SELECT of RequestColumns and returns its rows as
// requests. On the embedded engine the RowBinary answer is decoded straight
// into the structs: a diagnosis loads 75k rows, and going through Result
// (a boxed value per cell, then ScanRequests) cost it ~0.2 CPU-seconds and
// most of its garbage.
func (s *Store) QueryRequests(ctx context.Context, sql string, args ...any) ([]telemetry.LLMRequest, error) {
	return queryTyped(ctx, s, requestFields(), 150, ScanRequests, sql, args...)
}

// QuerySpanCores runs a SELECT of SpanCoreColumns, optionally with the
// route and tenant columns, and hands its rows to each as spans
// (ScanSpanCores) in batches of whole traces: every span of a trace id
// comes in one batch, and a batch holds about per spans (more when a trace
// does). A batch's memory is reused once each returns, so each keeps what
// it derives, never the spans. The assembler reads every span of its
// traces this way: holding a 200k-span pass at once took ~110 MiB of
// structs and strings, half the pass's live heap, and the receivers
// sharing the process paid for it in back-to-back collections.
func (s *Store) QuerySpanCores(ctx context.Context, per int, each func([]telemetry.Span) error, sql string, args ...any) error {
	return queryTypedEach(ctx, s, spanCoreFields(), ScanSpanCores, "trace_id", func(v *telemetry.Span) string { return v.TraceID }, per, each, sql, args...)
}

// ScanSpanCores reads rows selected with SpanCoreColumns (SpanCore). The
// route and tenant columns, when selected, go back into the span as the
// attributes they come from: the route under telemetry.RouteAttribute, the
// tenant under the first tenant key (telemetry.SpanTenant of it is the
// stored tenant).
func ScanSpanCores(r *Result) []telemetry.Span {
	out := make([]telemetry.Span, r.Len())
	hasRoute := slices.Contains(r.Columns, "route")
	for i := range out {
		w := r.Row(i)
		out[i] = SpanCore(w)
		if hasRoute {
			setSpanContext(&out[i], w.String("route"), w.String("tenant"))
		}
	}
	return out
}

func setSpanContext(s *telemetry.Span, route, tenant string) {
	if route == "" && tenant == "" {
		return
	}
	if s.Attributes == nil {
		s.Attributes = make(map[string]string, 2)
	}
	if route != "" {
		s.Attributes[telemetry.RouteAttribute] = route
	}
	if tenant != "" {
		s.Attributes[telemetry.TenantAttributes[0]] = tenant
	}
}

// queryTyped runs sql and decodes its rows into Ts with fields (the columns
// it knows, each with the type the engine reports for it; rowSize guesses
// a row's bytes). Statements with other columns, and a ClickHouse server,
// take the generic path: Result, then scan.
func queryTyped[T any](ctx context.Context, s *Store, fields map[string]typedColumn[T], rowSize int, scan func(*Result) []T, sql string, args ...any) (rows []T, err error) {
	e, ok := s.b.(*embedded)
	if !ok {
		r, err := s.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return scan(r), nil
	}
	q, err := Bind(sql, args...)
	if err != nil {
		return nil, err
	}
	t := timed(ctx, q, func(ctx context.Context) (int, error) {
		rows, err := queryTyped(ctx, s, fields, rowSize, scan, q)
		return len(rows), err
	})
	defer func() { t.done(len(rows)) }()
	out, err := e.run(ctx, q, rowBinaryFormat)
	if err != nil {
		return nil, err
	}
	rows, err = decodeTyped(out, fields, rowSize)
	if !errors.Is(err, errUnsupportedType) {
		return rows, err
	}
	r, err := decodeRowBinary(out)
	if err != nil {
		return nil, err
	}
	return scan(r), nil
}

// queryTypedEach runs sql like queryTyped and hands its rows to each in
// batches of about per rows, every row of one value of the key column in
// the same batch (decodeTypedEach); keyOf reads that value on the generic
// path.
func queryTypedEach[T any](ctx context.Context, s *Store, fields map[string]typedColumn[T], scan func(*Result) []T, key string, keyOf func(*T) string,
	per int, each func([]T) error, sql string, args ...any) error {
	e, ok := s.b.(*embedded)
	if !ok {
		r, err := s.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		return eachBatch(scan(r), keyOf, per, each)
	}
	q, err := Bind(sql, args...)
	if err != nil {
		return err
	}
	t := timed(ctx, q, func(ctx context.Context) (n int, err error) {
		err = queryTypedEach(ctx, s, fields, scan, key, keyOf, per, func(rows []T) error { n += len(rows); return nil }, q)
		return n, err
	})
	// The statement's time ends with the engine's answer: the batches'
	// work is the caller's. Its rows are counted as they are handed on.
	n := 0
	defer func() { t.done(n) }()
	counted := func(rows []T) error {
		n += len(rows)
		return each(rows)
	}
	out, err := e.run(ctx, q, rowBinaryFormat)
	t.ran()
	if err != nil {
		return err
	}
	err = decodeTypedEach(out, fields, key, per, counted)
	if !errors.Is(err, errUnsupportedType) {
		return err
	}
	r, err := decodeRowBinary(out)
	if err != nil {
		return err
	}
	return eachBatch(scan(r), keyOf, per, counted)
}

// batches says how many batches of about per rows n rows make.
func batches(n, per int) int { return max(1, (n+max(per, 1)-1)/max(per, 1)) }

// keyHash picks a key's batch: keyHash(key) % batches.
func keyHash(key []byte) uint32 { return crc32.Checksum(key, castagnoli) }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// eachBatch hands rows to each in batches of whole keys, as
// decodeTypedEach does, for rows already decoded (the generic path).
func eachBatch[T any](rows []T, keyOf func(*T) string, per int, each func([]T) error) error {
	k := batches(len(rows), per)
	if k == 1 {
		if len(rows) == 0 {
			return nil
		}
		return each(rows)
	}
	by := make([][]T, k)
	for i := range rows {
		b := keyHash([]byte(keyOf(&rows[i]))) % uint32(k)
		by[b] = append(by[b], rows[i])
	}
	for _, batch := range by {
		if len(batch) > 0 {
			if err := each(batch); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeTypedEach decodes RowBinaryWithNamesAndTypes like decodeTyped,
// into one reused batch at a time: a first look at the rows notes where
// each starts and which batch its key (a String column) sends it to, then
// each batch's rows are decoded and handed to each. The rows decoded at
// once are a batch's, not the answer's.
func decodeTypedEach[T any](buf []byte, known map[string]typedColumn[T], key string, per int, each func([]T) error) error {
	if len(buf) == 0 {
		return nil
	}
	r := &binReader{b: buf}
	names, types, err := r.header()
	if err != nil {
		return err
	}
	fields, err := typedFields(names, types, known)
	if err != nil {
		return err
	}
	skips := make([]func(*binReader), len(names))
	keyCol := -1
	for i := range names {
		if skips[i], err = newBinSkipper(types[i]); err != nil {
			return err
		}
		if names[i] == key && types[i] == "String" {
			keyCol = i
		}
	}
	if keyCol < 0 {
		return fmt.Errorf("batches by %s: the statement selects no String column %s", key, key)
	}
	var starts []int
	var hashes []uint32
	for r.off < len(buf) && r.err == nil {
		starts = append(starts, r.off)
		for i, skip := range skips {
			if i == keyCol {
				hashes = append(hashes, keyHash(r.bytes()))
			} else {
				skip(r)
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("decode engine output: %w", r.err)
	}
	// The rows of each batch, in answer order (a counting sort).
	k := batches(len(starts), per)
	bounds := make([]int, k+1)
	for i, h := range hashes {
		hashes[i] = h % uint32(k)
		bounds[hashes[i]+1]++
	}
	for b := range k {
		bounds[b+1] += bounds[b]
	}
	order := make([]int32, len(starts))
	next := slices.Clone(bounds[:k])
	for i, b := range hashes {
		order[next[b]] = int32(i)
		next[b]++
	}
	// Sized for the largest batch at once: grown by appends, a batch of
	// ~25k spans (~0.5 KiB each) was copied and cleared again at every
	// doubling, a quarter of the assembler's decoding CPU.
	most := 0
	for b := range k {
		most = max(most, bounds[b+1]-bounds[b])
	}
	batch := make([]T, 0, most)
	var slab numSlab
	var zero T
	for b := range k {
		batch = batch[:0]
		for _, row := range order[bounds[b]:bounds[b+1]] {
			r.off = starts[row]
			batch = append(batch, zero)
			v := &batch[len(batch)-1]
			for _, f := range fields {
				f(r, v, &slab)
			}
		}
		if r.err != nil {
			return fmt.Errorf("decode engine output: %w", r.err)
		}
		if len(batch) > 0 {
			if err := each(batch); err != nil {
				return err
			}
		}
	}
	return nil
}

// typedFields returns the decoders of an answer's columns, in order: all
// must be known, with the type the engine reports, or errUnsupportedType.
func typedFields[T any](names, types []string, known map[string]typedColumn[T]) ([]func(*binReader, *T, *numSlab), error) {
	fields := make([]func(*binReader, *T, *numSlab), len(names))
	for i := range fields {
		f, ok := known[names[i]]
		if !ok || f.typ != types[i] {
			return nil, errUnsupportedType
		}
		fields[i] = f.set
	}
	return fields, nil
}

// typedColumn decodes one column of a row into a T.
type typedColumn[T any] struct {
	typ string
	set func(r *binReader, v *T, slab *numSlab)
}

// numSlab hands out the pointers of nullable numbers from shared chunks
// instead of one allocation each.
type numSlab struct {
	floats []float64
	ints   []int64
	durs   []time.Duration
}

func (s *numSlab) float(v float64) *float64                { return slabTake(&s.floats, 4096, v) }
func (s *numSlab) int(v int64) *int64                      { return slabTake(&s.ints, 1024, v) }
func (s *numSlab) duration(v time.Duration) *time.Duration { return slabTake(&s.durs, 1024, v) }

// slabTake stores v in the next free slot of *free, a new chunk of chunk
// slots when it is used up, and returns its address.
func slabTake[T any](free *[]T, chunk int, v T) *T {
	if len(*free) == 0 {
		*free = make([]T, chunk)
	}
	p := &(*free)[0]
	*p, *free = v, (*free)[1:]
	return p
}

// Column decoders shared by the typed readers; dst picks the field.

func strColumn[T any](dst func(*T) *string) typedColumn[T] {
	return typedColumn[T]{"String", func(r *binReader, v *T, _ *numSlab) { *dst(v) = string(r.bytes()) }}
}

// lcColumn reads a LowCardinality column: it holds few values, so one
// string per value.
func lcColumn[T any](dst func(*T) *string) typedColumn[T] {
	seen := map[string]string{}
	return typedColumn[T]{"LowCardinality(String)", func(r *binReader, v *T, _ *numSlab) {
		b := r.bytes()
		s, ok := seen[string(b)]
		if !ok {
			s = string(b)
			if len(seen) < 10_000 {
				seen[s] = s
			}
		}
		*dst(v) = s
	}}
}

func timeColumn[T any](dst func(*T) *time.Time) typedColumn[T] {
	return typedColumn[T]{"DateTime64(9, 'UTC')", func(r *binReader, v *T, _ *numSlab) {
		*dst(v) = time.Unix(0, int64(r.u64())).UTC()
	}}
}

func nullFloatColumn[T any](dst func(*T) **float64) typedColumn[T] {
	return typedColumn[T]{"Nullable(Float64)", func(r *binReader, v *T, slab *numSlab) {
		if r.u8() == 0 {
			*dst(v) = slab.float(math.Float64frombits(r.u64()))
		}
	}}
}

func nullIntColumn[T any](dst func(*T) **int64) typedColumn[T] {
	return typedColumn[T]{"Nullable(Int64)", func(r *binReader, v *T, slab *numSlab) {
		if r.u8() == 0 {
			*dst(v) = slab.int(int64(r.u64()))
		}
	}}
}

// nullDurationColumn reads nanoseconds stored as Nullable(Int64).
func nullDurationColumn[T any](dst func(*T) **time.Duration) typedColumn[T] {
	return typedColumn[T]{"Nullable(Int64)", func(r *binReader, v *T, slab *numSlab) {
		if r.u8() == 0 {
			*dst(v) = slab.duration(time.Duration(r.u64()))
		}
	}}
}

// decodeRequests decodes RowBinaryWithNamesAndTypes whose columns are all
// RequestColumns ones with their table types; anything else is
// errUnsupportedType.
func decodeRequests(buf []byte) ([]telemetry.LLMRequest, error) {
	return decodeTyped(buf, requestFields(), 150)
}

// decodeTyped decodes RowBinaryWithNamesAndTypes whose columns fields all
// know, with their types; anything else is errUnsupportedType. rowSize,
// a row's bytes about, sizes the answer.
func decodeTyped[T any](buf []byte, known map[string]typedColumn[T], rowSize int) ([]T, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	r := &binReader{b: buf}
	names, types, err := r.header()
	if err != nil {
		return nil, err
	}
	fields, err := typedFields(names, types, known)
	if err != nil {
		return nil, err
	}
	// Rows go into chunks sized from rowSize, then into one slice of the
	// exact length: a guess short of the real count grew the slice by a
	// quarter at a time, copying the rows (~350 bytes a span) again each
	// time (most of the decoder's time for 200k spans).
	var slab numSlab
	chunk := max((len(buf)-r.off)/rowSize/8, 256)
	var chunks [][]T
	n := 0
	for r.off < len(buf) && r.err == nil {
		if len(chunks) == 0 || len(chunks[len(chunks)-1]) == cap(chunks[len(chunks)-1]) {
			chunks = append(chunks, make([]T, 0, chunk))
		}
		c := &chunks[len(chunks)-1]
		*c = (*c)[:len(*c)+1]
		v := &(*c)[len(*c)-1]
		for _, f := range fields {
			f(r, v, &slab)
		}
		n++
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode engine output: %w", r.err)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	out := make([]T, 0, n)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, nil
}
