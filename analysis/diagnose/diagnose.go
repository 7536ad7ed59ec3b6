// Package diagnose answers "why are these LLM requests slow?" over rows that
// were already decomposed: it compares the slow requests of a window with a
// baseline, attributes their regression to one part of the request
// (pre-inference, queue, prefill, network, decode, cold start, or the
// provider when a managed API bundles them), corroborates the attribution
// with KV-cache, waiting-request and scaling signals, and writes the verdict
// with numbered evidence. It is pure Go over telemetry rows: no HTTP, no
// database, so a page, an API handler and a share snapshot all read the same
// Diagnosis.
package diagnose

import (
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Range is the half-open time interval [From, To).
type Range struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Duration is To − From.
func (r Range) Duration() time.Duration { return r.To.Sub(r.From) }

// IsZero reports whether the range was left unset.
func (r Range) IsZero() bool { return r.From.IsZero() && r.To.IsZero() }

// Contains reports whether t lies in [From, To).
func (r Range) Contains(t time.Time) bool { return !t.Before(r.From) && t.Before(r.To) }

// DefaultBaseline is the baseline used when none is given: the 3× window
// right before it, long enough that its p95 is steadier than the window's.
func DefaultBaseline(window Range) Range {
	return Range{From: window.From.Add(-3 * window.Duration()), To: window.From}
}

// SLO is a latency objective read at one percentile, e.g. TTFT p95 < 500 ms
// and TPOT ≥ 30 tok/s at p95. A zero target means "no objective" for it.
type SLO struct {
	// Percentile is 0..1 (0.95) or 0..100 (95); both are accepted.
	Percentile float64 `json:"percentile"`
	// TTFTMs is the TTFT the percentile must stay under, in milliseconds.
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	// TPOT is the decode speed, tokens per second, the percentile's slow
	// tail must reach (TPOT = 1000 / ITL ms).
	TPOT float64 `json:"tpot_tok_s,omitempty"`
}

// quantile returns the SLO percentile as 0..1 (p95 when unset).
func (s SLO) quantile() float64 {
	p := s.Percentile
	if p > 1 {
		p /= 100
	}
	if p <= 0 || p > 1 {
		return 0.95
	}
	return p
}

// Price is what a model costs, in dollars per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
}

// Input is everything a diagnosis reads. The caller filters rows by
// project, service and model; Diagnose only splits them by time.
type Input struct {
	Window Range
	// Baseline is what the window is compared with; zero means
	// DefaultBaseline(Window). The caller loads BaselineRequests for it.
	Baseline         Range
	Requests         []telemetry.LLMRequest // started in Window
	BaselineRequests []telemetry.LLMRequest // started in Baseline
	// WindowTotal and BaselineTotal are the true request counts when
	// Requests / BaselineRequests are uniform samples of them (0: the rows
	// are complete). Percentiles and shares read the sample; counts, rates
	// and token sums are scaled up to the total.
	WindowTotal, BaselineTotal int
	// TotalsEstimated says a total was scaled up from its sample rather
	// than counted (long windows read a stored sample; see analysis).
	TotalsEstimated bool
	// Metrics and Events cover both windows; names are canonical
	// (MetricKVCacheUsage, MetricRequestsWaiting, MetricRequestsRunning).
	Metrics []telemetry.MetricPoint
	Events  []telemetry.Event
	// RequestBuckets, when not nil, hold the request figures (counts,
	// rates, percentiles, tokens) of every Buckets(Window)-wide bucket of
	// the window, computed by the store over every request rather than
	// over Requests (a sample of a busy window): the series reads them
	// instead.
	RequestBuckets []Bucket
	// Attributes adds span attributes per span_id (region, route, any key)
	// for bubble-up; optional.
	Attributes map[string]map[string]string
	SLO        *SLO             // optional
	Prices     map[string]Price // model → price; a missing model means cost unknown
	// ServerMetrics are the histograms, gauges and counters of the
	// inference servers the calls reached, optional: when the calls carry
	// no server split they stand in for it, and the verdict rules claim
	// the window from them.
	ServerMetrics *ServerMetrics
	// ErrorTypes, when not nil, counts the failed requests of the window
	// and the baseline by error type over every request (the store's
	// count; the rows of a sampled window are fewer and do not carry
	// their error type). Nil: the errors are counted from the rows.
	ErrorTypes *ErrorTypeCounts
}

// ErrorTypeCounts are failed requests per error type
// (telemetry.LLMRequest.ErrorType, "" when the spans named none).
type ErrorTypeCounts struct {
	Window, Baseline map[string]int
}

// Canonical metric names, as ingest normalizes vLLM/SGLang gauges.
const (
	MetricKVCacheUsage    = "kv_cache_usage" // 0..1
	MetricRequestsWaiting = "requests_waiting"
	MetricRequestsRunning = "requests_running"
)

// Evidence is one numbered finding with the figures it quotes, so a page can
// chart or highlight them without parsing the sentence.
type Evidence struct {
	N       int                `json:"n"`
	Text    string             `json:"text"`
	Figures map[string]float64 `json:"figures,omitempty"`
}

// Percentiles is a tail read of a latency (ms) or other value; nil = no data.
type Percentiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
}

// ComponentStats is one part of the request in the window and the baseline.
type ComponentStats struct {
	P50           *float64 `json:"p50"`
	P95           *float64 `json:"p95"`
	P99           *float64 `json:"p99"`
	BaselineP50   *float64 `json:"baseline_p50"`
	BaselineP95   *float64 `json:"baseline_p95"`
	BaselineP99   *float64 `json:"baseline_p99"`
	Count         int      `json:"count"`          // window requests with a value
	BaselineCount int      `json:"baseline_count"` // baseline requests with a value
}

// Diagnosis is the answer of one diagnosis page and of GET /api/v1/diagnose.
type Diagnosis struct {
	Verdict    Verdict     `json:"verdict"`
	Confidence float64     `json:"confidence"` // 0..1
	Summary    string      `json:"summary"`    // one sentence
	Evidence   []Evidence  `json:"evidence"`
	TTFT       Percentiles `json:"ttft"`
	// Components is keyed by the Component* names.
	Components   map[string]ComponentStats `json:"components"`
	Series       []Bucket                  `json:"series"`
	Correlations []Correlation             `json:"correlations"`
	BubbleUp     []Attribution             `json:"bubble_up"`
	Answers      Answers                   `json:"answers"`
	Window       Range                     `json:"window"`
	Baseline     Range                     `json:"baseline"`
	// BucketSeconds is the width of Series buckets.
	BucketSeconds    float64 `json:"bucket_seconds"`
	Requests         int     `json:"requests"`
	BaselineRequests int     `json:"baseline_requests"`
	// BaselineDataFrom is the first baseline request's start when it comes
	// more than a tenth of the way into the baseline, which then holds
	// requests for only part of its range: a new service, or data younger
	// than the baseline. Read from the sample when the baseline is sampled.
	BaselineDataFrom *time.Time `json:"baseline_data_from,omitempty"`
	// AnalyzedRequests is how many of the window's requests the figures
	// were computed from: fewer than Requests when the window was sampled.
	AnalyzedRequests int `json:"analyzed_requests"`
	// RequestsEstimated: Requests and BaselineRequests are estimates from
	// the sample (within about a percent), not counts.
	RequestsEstimated bool `json:"requests_estimated,omitempty"`
	// AssembledThrough is set (by the API) when the window reaches past
	// what the assembler has done by more than a minute: requests in spans
	// received after it are not in the figures yet.
	AssembledThrough *time.Time `json:"assembled_through,omitempty"`
	// ServerMetrics is set when the split and the verdict come from the
	// inference servers' histograms (no server spans): which servers, and
	// each component's interpolated quantiles with their resolution.
	ServerMetrics *ServerMetricsFigures `json:"server_metrics,omitempty"`
}

// sampleScale is how many requests each loaded one stands for.
func sampleScale(total, loaded int) float64 {
	if total <= loaded || loaded == 0 {
		return 1
	}
	return float64(total) / float64(loaded)
}

// orLen is total when set, else n.
func orLen(total, n int) int {
	if total > 0 {
		return total
	}
	return n
}
