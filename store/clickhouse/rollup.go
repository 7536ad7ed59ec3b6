package clickhouse

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// Rollups (migration 0011) hold llm_requests aggregated per 5 minutes and
// per hour for each (service, server_service, model, provider): counts,
// token sums, and a log-scale histogram (buckets 5 % wide) of every latency and token column,
// so a day's or a week's series and overview read a few thousand rows
// instead of every request under FINAL.
//
// They stay right when the assembler rewrites a request: every row carries
// a sign, +1 for a live row and -1 for a row with is_deleted = 1, and the
// assembler writes, in the same insert as a request's new version, a
// deleted copy of the version it replaces (RequestsBatch's retracted rows).
// Counts and histogram buckets are sums, so the retraction cancels the old
// version exactly; a materialized view turns each insert into signed sums.

// RollupTier is one rollup table: its name, time column and width.
type RollupTier struct {
	Table  string
	Column string
	Width  time.Duration
}

// RollupTiers are the rollup tables, widest first.
var RollupTiers = []RollupTier{
	{Table: "llm_request_rollup_1h", Column: "hour", Width: time.Hour},
	{Table: "llm_request_rollup_5m", Column: "bucket", Width: 5 * time.Minute},
}

// RollupHistograms are the llm_requests columns with a histogram column
// (h_<name>) in the rollups.
var RollupHistograms = []string{
	"ttft_ms", "pre_inference_ms", "queue_ms", "prefill_ms", "network_ms", "decode_ms", "e2e_ms", "itl_ms",
	"cold_start_wait_ms", "input_tokens", "output_tokens",
}

// RollupSums are the rollups' summed counters (named apart from
// llm_requests' columns: an alias equal to a column would shadow it).
var RollupSums = []string{"requests", "errors", "cold_starts", "input_tokens_sum", "output_tokens_sum"}

// RollupKey are the columns a rollup row is kept per (besides the time).
var RollupKey = []string{"service", "server_service", "model", "provider"}

// histGamma is the ratio of a histogram bucket's bounds: a value is read
// back as its bucket's geometric middle, within ±2.5 % of what was stored.
// Reads cost what their histograms hold (sumMap, ~50 ns a key): 2 %-wide
// buckets held ~125 keys per 5-minute row of a 10M-request week, twice as
// many as these.
const histGamma = 1.05

// histZero is the key of values ≤ 0 (read back as 0).
const histZero = math.MinInt16

// HistKey is the bucket key of a value (what HistKeySQL computes).
func HistKey(v float64) int {
	if !(v > 0) {
		return histZero
	}
	k := math.Floor(math.Log(v) / math.Log(histGamma))
	return int(max(-math.MaxInt16, min(math.MaxInt16, k)))
}

// HistValue is the value a bucket key stands for.
func HistValue(key int) float64 {
	if key == histZero {
		return 0
	}
	return math.Exp((float64(key) + 0.5) * math.Log(histGamma))
}

// HistValues holds HistValue of every key, indexed by the key as a
// uint16: readers of a day of histograms look a value up instead of
// working it out per bucket (bench query --ops episodes).
var HistValues = sync.OnceValue(func() *[1 << 16]float64 {
	var out [1 << 16]float64
	for k := math.MinInt16; k <= math.MaxInt16; k++ {
		out[uint16(int16(k))] = HistValue(k)
	}
	return &out
})

// histKeySQL is HistKey of a Float64 expression in the engine.
func histKeySQL(v string) string {
	return fmt.Sprintf("toInt16(if(%[1]s > 0, greatest(-32767, least(32767, floor(log(%[1]s) / log(%[2]v)))), %[3]d))", v, histGamma, histZero)
}

// RollupFromRequests is the SELECT list aggregating llm_requests rows (a
// materialized view's block, or a FINAL read) into rollup columns with the
// given histograms; sign is the expression weighting each row (+1, or -1
// for a retraction).
func RollupFromRequests(sign string, hists []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sum(%[1]s) AS requests, sum(%[1]s * error) AS errors, sum(%[1]s * cold_start) AS cold_starts, "+
		"sum(%[1]s * ifNull(input_tokens, 0)) AS input_tokens_sum, sum(%[1]s * ifNull(output_tokens, 0)) AS output_tokens_sum", sign)
	for _, c := range hists {
		v := fmt.Sprintf("ifNull(toFloat64(%s), nan)", c)
		fmt.Fprintf(&b, ", sumMapIf(map(%s, %s), isFinite(%s)) AS h_%s", histKeySQL(v), sign, v, c)
	}
	return b.String()
}

// RequestSign weights a row of llm_requests in a rollup.
const RequestSign = "(1 - 2 * toInt64(is_deleted))"

// RollupMerge is the SELECT list merging rollup rows, with the given
// histograms (into a wider tier, or for a read).
func RollupMerge(hists []string) string {
	parts := make([]string, 0, len(RollupSums)+len(hists))
	for _, c := range RollupSums {
		parts = append(parts, fmt.Sprintf("sum(%[1]s) AS %[1]s", c))
	}
	for _, c := range hists {
		parts = append(parts, fmt.Sprintf("sumMap(h_%[1]s) AS h_%[1]s", c))
	}
	return strings.Join(parts, ", ")
}

// EpisodeRollup is the per-minute rollup the episode detector reads
// (migration 0018): the sums of the other rollups and the histograms of
// EpisodeHistograms only, so the extra view costs an insert little.
const EpisodeRollup = "llm_request_rollup_1m"

// EpisodeHistograms are the llm_requests columns with a histogram column in
// EpisodeRollup: the latencies an episode departs on.
var EpisodeHistograms = []string{"ttft_ms", "itl_ms"}

// rollupColumnsDDL are a rollup table's value columns with histograms of
// hists.
func rollupColumnsDDL(hists []string) string {
	parts := make([]string, 0, len(RollupSums)+len(hists))
	for _, c := range RollupSums {
		parts = append(parts, c+" SimpleAggregateFunction(sum, Int64)")
	}
	for _, c := range hists {
		parts = append(parts, "h_"+c+" SimpleAggregateFunction(sumMap, Map(Int16, Int64))")
	}
	return strings.Join(parts, ",\n    ")
}
