package clickhouse

import (
	"context"
	"fmt"
	"time"
)

// RollupMinute is one stored row of the per-minute rollup (EpisodeRollup):
// one minute of one (service, server_service, model, provider), or the
// share of it in a part not yet merged. Rows are signed like the rollup:
// a retracted request counts -1, so summing every row of a minute gives
// its requests.
type RollupMinute struct {
	Minute        time.Time
	Service       string
	ServerService string
	Requests      int64
	Errors        int64
	// TTFT and ITL count requests by histogram key (HistKey), in key
	// order as the engine keeps a Map.
	TTFT, ITL []HistCount
}

// HistCount is one bucket of a rollup histogram.
type HistCount struct {
	Key   int16
	Count int64
}

// RollupMinutesColumns is the select list QueryRollupMinutes reads from
// EpisodeRollup.
const RollupMinutesColumns = `minute, service, server_service, requests, errors,
	mapKeys(h_ttft_ms) AS ttft_keys, mapValues(h_ttft_ms) AS ttft_counts,
	mapKeys(h_itl_ms) AS itl_keys, mapValues(h_itl_ms) AS itl_counts`

// QueryRollupMinutes runs sql, which selects RollupMinutesColumns, and
// reads its rows as stored, unmerged: summing them in Go costs less than
// the engine's sumMap over Map columns, which took ~150 ms of a day's
// ~11k rows at 1M requests (bench query --ops episodes).
func (s *Store) QueryRollupMinutes(ctx context.Context, sql string, args ...any) ([]RollupMinute, error) {
	return queryTyped(ctx, s, rollupMinuteFields, 256, scanRollupMinutes, sql, args...)
}

// rollupMinuteFields decode RollupMinutesColumns from RowBinary; the
// rollup's counts keep their SimpleAggregateFunction type in the header.
var rollupMinuteFields = map[string]typedColumn[RollupMinute]{
	"minute": {"DateTime('UTC')", func(r *binReader, v *RollupMinute, _ *numSlab) {
		v.Minute = time.Unix(int64(r.u32()), 0).UTC()
	}},
	"service":        lcColumn(func(v *RollupMinute) *string { return &v.Service }),
	"server_service": lcColumn(func(v *RollupMinute) *string { return &v.ServerService }),
	"requests":       sumColumn(func(v *RollupMinute) *int64 { return &v.Requests }),
	"errors":         sumColumn(func(v *RollupMinute) *int64 { return &v.Errors }),
	"ttft_keys":      histKeysColumn(func(v *RollupMinute) *[]HistCount { return &v.TTFT }),
	"ttft_counts":    histCountsColumn(func(v *RollupMinute) *[]HistCount { return &v.TTFT }),
	"itl_keys":       histKeysColumn(func(v *RollupMinute) *[]HistCount { return &v.ITL }),
	"itl_counts":     histCountsColumn(func(v *RollupMinute) *[]HistCount { return &v.ITL }),
}

func sumColumn[T any](dst func(*T) *int64) typedColumn[T] {
	return typedColumn[T]{"SimpleAggregateFunction(sum, Int64)", func(r *binReader, v *T, _ *numSlab) { *dst(v) = int64(r.u64()) }}
}

// histKeysColumn reads a histogram's keys; the counts column that follows
// fills them in (histCountsColumn), so keys come first in the select list.
func histKeysColumn[T any](dst func(*T) *[]HistCount) typedColumn[T] {
	return typedColumn[T]{"Array(Int16)", func(r *binReader, v *T, _ *numSlab) {
		n := r.arrayLen(2)
		h := make([]HistCount, n)
		for i := range h {
			h[i].Key = int16(r.u16())
		}
		*dst(v) = h
	}}
}

func histCountsColumn[T any](dst func(*T) *[]HistCount) typedColumn[T] {
	return typedColumn[T]{"Array(Int64)", func(r *binReader, v *T, _ *numSlab) {
		n := r.arrayLen(8)
		h := *dst(v)
		if n != len(h) && r.err == nil {
			r.err = fmt.Errorf("histogram of %d keys with %d counts at byte %d", len(h), n, r.off)
			return
		}
		for i := range n {
			h[i].Count = int64(r.u64())
		}
	}}
}

// scanRollupMinutes reads RollupMinutesColumns from a generic Result (a
// ClickHouse server).
func scanRollupMinutes(r *Result) []RollupMinute {
	out := make([]RollupMinute, r.Len())
	hist := func(keys, counts []float64) []HistCount {
		h := make([]HistCount, min(len(keys), len(counts)))
		for i := range h {
			h[i] = HistCount{Key: int16(keys[i]), Count: int64(counts[i])}
		}
		return h
	}
	for i := range out {
		row := r.Row(i)
		out[i] = RollupMinute{Minute: row.Time("minute").UTC(), Service: row.String("service"), ServerService: row.String("server_service"),
			Requests: row.Int("requests"), Errors: row.Int("errors"),
			TTFT: hist(row.Floats("ttft_keys"), row.Floats("ttft_counts")), ITL: hist(row.Floats("itl_keys"), row.Floats("itl_counts"))}
	}
	return out
}
