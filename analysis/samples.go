package analysis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// DefaultMaxRows bounds the requests one window loads: beyond it a diagnosis
// reads an even sample by hash of (trace, span). p99 over a 20k-row
// uniform sample is within ~1.5 % of the full figure (its standard error
// for exponential latencies), and a diagnosis over it costs ~40 % of one
// over 50k (bench query --max-rows). The chart's per-bucket figures come
// from every request when the window is small enough (SeriesExactMax).
const DefaultMaxRows = 20_000

// SampleBuckets is the hash modulus of the sample: a window keeps
// ⌈maxRows × SampleBuckets / total⌉ of every SampleBuckets hash values.
const SampleBuckets = 4096

// The llm_requests_sample table (migration 0005) holds the requests whose
// hash is below sampleTableKeep, those below sampleLevel0Keep first
// (sample_level 0); llm_requests_sample64 (migration 0017) those below
// sample64Keep. A sample that keeps no more hash values than one of them
// holds reads it instead of llm_requests: the same rows, a 16th, a 64th or
// a 256th of the reading.
const (
	sampleTableKeep  = 256
	sample64Keep     = 64
	sampleLevel0Keep = 16
	// sampleTableMin is the fewest rows of the stored sample a window is
	// read from when it keeps more than the sample holds (see PlanSample).
	sampleTableMin = 8_000
)

func (q *Queries) maxRows() int { return orDefault(q.MaxRows, DefaultMaxRows) }

func (q *Queries) exactCountMax() int { return orDefault(q.ExactCountRows, exactCountMax) }

func (q *Queries) seriesExactMax() int { return orDefault(q.SeriesExactRows, SeriesExactMax) }

// loadedRequests are a window's requests, time-ordered.
type loadedRequests struct {
	reqs []telemetry.LLMRequest
	// sampledFrom is the number of requests in the window when reqs is a
	// sample of them, else 0; estimated says it was scaled up from the
	// sample rather than counted.
	sampledFrom int
	estimated   bool
}

// SamplePlan says where a window's requests are read from, given a rough
// count of them (the number of stored rows, versions included).
type SamplePlan struct {
	Table string
	// Keep is how many of SampleBuckets hash values are read; SampleBuckets
	// (no sampling) when the window holds at most the row limit.
	Keep int
	// Level0 restricts the sample table to sample_level 0.
	Level0 bool
}

// PlanSample chooses the cheapest way to read about limit of rough rows.
func PlanSample(rough, limit int) SamplePlan {
	if rough <= limit {
		return SamplePlan{Table: "llm_requests", Keep: SampleBuckets}
	}
	keep := max(1, (limit*SampleBuckets+rough-1)/rough)
	switch {
	case keep <= sampleLevel0Keep:
		return SamplePlan{Table: "llm_requests_sample", Keep: keep, Level0: true}
	case keep <= sample64Keep:
		return SamplePlan{Table: "llm_requests_sample64", Keep: keep}
	case keep <= sampleTableKeep:
		return SamplePlan{Table: "llm_requests_sample", Keep: keep}
	case rough*sampleTableKeep/SampleBuckets >= max(sampleTableMin, limit*2/5):
		// The whole stored sample holds at least 40 % of the rows asked
		// for, and enough to size the window within ~1 %. A hash sample
		// of llm_requests picks rows from every granule, so it
		// decompresses the whole window (24 h at 1M rows: ~85 ms of CPU);
		// the stored one reads a sixteenth of it (~10 ms), and its
		// percentiles' error grows by 1/√0.4 at most (a p99 within ~1.5 %
		// at 20k rows, ~2.4 % at 8k).
		return SamplePlan{Table: "llm_requests_sample", Keep: sampleTableKeep}
	}
	return SamplePlan{Table: "llm_requests", Keep: keep}
}

// Sampled reports whether the plan reads a sample.
func (p SamplePlan) Sampled() bool { return p.Keep < SampleBuckets }

// SQL is the statement reading the plan's rows of a window (where, args);
// limit only guards memory, the sample already holds about limit rows.
func (p SamplePlan) SQL(where string, args []any, limit int) (string, []any) {
	where, args = p.cond(where, args)
	return "SELECT " + clickhouse.RequestColumns + " FROM " + p.Table + " FINAL WHERE " + where + " LIMIT ?" + FinalSettings,
		append(args, 2*limit)
}

// cond is the condition selecting the plan's rows of a window (where, args).
func (p SamplePlan) cond(where string, args []any) (string, []any) {
	args = slices.Clone(args)
	if p.Level0 {
		where += " AND sample_level = 0"
	}
	if p.Sampled() {
		where += " AND cityHash64(trace_id, span_id) % ? < ?"
		args = append(args, SampleBuckets, p.Keep)
	}
	return where, args
}

// loadPlanned reads the requests of a window (where, args) given a rough
// count of its stored rows: all of them up to limit, else a uniform sample
// chosen by hash modulo (a filter the engine applies while reading, far
// cheaper than ordering every row by hash).
func (q *Queries) loadPlanned(ctx context.Context, where string, args []any, rough, limit int) (loadedRequests, error) {
	// The rough count overcounts unmerged versions, so the sample errs on
	// the small side.
	plan := PlanSample(rough, limit)
	sql, sqlArgs := plan.SQL(where, args, limit)
	reqs, err := q.CH.QueryRequests(ctx, sql, sqlArgs...)
	if err != nil {
		return loadedRequests{}, fmt.Errorf("load requests: %w", err)
	}
	return q.sized(ctx, plan, where, args, reqs)
}

// windowRead is a window's range and where clause (with args), its rough
// count, and how many of its rows a read may keep.
type windowRead struct {
	where        string
	args         []any
	rough, limit int
	r            diagnose.Range
}

// loadPair is loadPlanned for a diagnosis's window and its baseline. When
// both are read from the same table and do not overlap, one statement
// reads both (the rows told apart by start): at 1M requests over 7 days
// a 24-hour window and its 72-hour baseline, both from the stored sample,
// cost ~22 ms of engine time together and ~33 apart.
func (q *Queries) loadPair(ctx context.Context, a, b windowRead) (loadedRequests, loadedRequests, error) {
	pa, pb := PlanSample(a.rough, a.limit), PlanSample(b.rough, b.limit)
	sql, args, ok := pairSQL(a, b, pa, pb)
	if !ok {
		var la, lb loadedRequests
		var g errgroup.Group
		g.Go(func() (err error) {
			lb, err = q.loadPlanned(ctx, b.where, b.args, b.rough, b.limit)
			return err
		})
		la, err := q.loadPlanned(ctx, a.where, a.args, a.rough, a.limit)
		return la, lb, errors.Join(err, g.Wait())
	}
	rows, err := q.CH.QueryRequests(ctx, sql, args...)
	if err != nil {
		return loadedRequests{}, loadedRequests{}, fmt.Errorf("load requests: %w", err)
	}
	// Split in place: the rows are large, and copying them into two
	// growing slices cost more than the diagnosis itself.
	k := 0
	for i := range rows {
		if a.r.Contains(rows[i].Start) {
			rows[i], rows[k] = rows[k], rows[i]
			k++
		}
	}
	ra, rb := rows[:k:k], rows[k:]
	var la, lb loadedRequests
	var g errgroup.Group
	g.Go(func() (err error) {
		lb, err = q.sized(ctx, pb, b.where, b.args, rb)
		return err
	})
	la, err = q.sized(ctx, pa, a.where, a.args, ra)
	return la, lb, errors.Join(err, g.Wait())
}

// pairSQL is the statement reading two windows at once by their plans
// (see loadPair); ok is false when they must be read apart.
func pairSQL(a, b windowRead, pa, pb SamplePlan) (sql string, args []any, ok bool) {
	if pa.Table != pb.Table || a.r.From.Before(b.r.To) && b.r.From.Before(a.r.To) {
		return "", nil, false
	}
	ca, aargs := pa.cond(a.where, a.args)
	cb, bargs := pb.cond(b.where, b.args)
	return "SELECT " + clickhouse.RequestColumns + " FROM " + pa.Table + " FINAL WHERE (" + ca + ") OR (" + cb + ") LIMIT ?" + FinalSettings,
		append(append(aargs, bargs...), 2*(a.limit+b.limit)), true
}

// sized is a window's rows read by plan, time-ordered, with the window's
// size when they are a sample of it.
func (q *Queries) sized(ctx context.Context, plan SamplePlan, where string, args []any, reqs []telemetry.LLMRequest) (loadedRequests, error) {
	out := loadedRequests{reqs: reqs}
	var err error
	switch {
	case !plan.Sampled():
	case plan.Table == "llm_requests" && estimateError(len(out.reqs), plan.Keep) > estimateMaxError:
		// Too few sampled rows to scale up well, and a window this small
		// is cheap to count. (A diagnosis's 10k-row baseline of up to
		// ~50k requests is estimated within 1 %.)
		if out.sampledFrom, err = q.countWhere(ctx, where, args); err != nil {
			return out, err
		}
	default:
		// Counting the window exactly under FINAL would cost as much as
		// the read again (or read every row the sample table spares); the
		// sample's size scaled up is within a percent or so (a 20k-row
		// sample's relative error is ~0.7 %).
		out.sampledFrom = max(len(out.reqs), int(math.Round(float64(len(out.reqs))*SampleBuckets/float64(plan.Keep))))
		out.estimated = true
	}
	sort.Slice(out.reqs, func(i, j int) bool { return out.reqs[i].Start.Before(out.reqs[j].Start) })
	return out, nil
}
