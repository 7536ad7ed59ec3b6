package analysis

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// ServiceOverview is one service's LLM traffic in a window: the calling
// service's requests, or the requests an inference service served.
type ServiceOverview struct {
	Service string
	// Role is client (calls models), server (serves them) or both.
	Role         string
	Models       []string
	Requests     int
	RatePerSec   float64
	TTFT         diagnose.Percentiles
	ITLP50       *float64
	ErrorRate    float64 // 0..1
	ColdStarts   int
	InputTokens  int64
	OutputTokens int64
	// Trend is TTFT p95 per bucket, aligned with Overview.Buckets.
	Trend []*float64
}

// ModelOverview is one model's traffic in a window.
type ModelOverview struct {
	Model           string
	Provider        string
	Requests        int
	TTFT            diagnose.Percentiles
	ITLP50          *float64
	InputTokensP50  *float64
	OutputTokensP50 *float64
	ErrorRate       float64
}

// Overview is the front page: every service and model with traffic in the
// window, busiest first.
type Overview struct {
	Window   diagnose.Range
	Bucket   time.Duration
	Buckets  []time.Time
	Services []ServiceOverview
	Models   []ModelOverview
}

// OverviewRequest names the window of an overview.
type OverviewRequest struct {
	Project uint32
	Window  diagnose.Range
}

// verdictSample bounds the rows one overview verdict loads per window: a
// badge needs the shape of the tail, not every request.
const verdictSample = 5_000

// serviceNames attributes each request to its calling service and to the
// inference service that served it (once when they are the same), the
// same either-side match RequestFilter.Service uses.
const serviceNames = "arrayDistinct(arrayFilter(x -> x != '', [service, server_service])) AS name"

// Overview aggregates the window per service and per model, with a TTFT
// p95 trend per service. Verdicts are separate (ServiceVerdict): each is a
// diagnosis, too slow to hold the page for.
func (q *Queries) Overview(ctx context.Context, r OverviewRequest) (Overview, error) {
	w := r.Window
	out := Overview{Window: w, Bucket: diagnose.Buckets(w)}
	secs := w.Duration().Seconds()
	res, err := q.CH.Query(ctx, `SELECT name, max(name = service) AS is_client, max(name = server_service) AS is_server,
			groupUniqArray(20)(model) AS models, count() AS n,
			quantile(0.5)(ttft_ms) AS ttft_p50, quantile(0.95)(ttft_ms) AS ttft_p95, quantile(0.99)(ttft_ms) AS ttft_p99,
			quantile(0.5)(itl_ms) AS itl_p50, avg(error) AS error_rate, sum(cold_start) AS cold_starts,
			sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens
		FROM llm_requests FINAL ARRAY JOIN `+serviceNames+`
		WHERE project_id = ? AND start >= ? AND start < ?
		GROUP BY name ORDER BY n DESC, name`+FinalSettings, r.Project, w.From, w.To)
	if err != nil {
		return out, fmt.Errorf("overview per service: %w", err)
	}
	index := map[string]int{}
	for i := 0; i < res.Len(); i++ {
		row := res.Row(i)
		s := ServiceOverview{
			Service: row.String("name"), Models: row.Strings("models"), Requests: int(row.Int("n")),
			TTFT:   diagnose.Percentiles{P50: row.FloatPtr("ttft_p50"), P95: row.FloatPtr("ttft_p95"), P99: row.FloatPtr("ttft_p99")},
			ITLP50: row.FloatPtr("itl_p50"), ErrorRate: row.Float("error_rate"), ColdStarts: int(row.Int("cold_starts")),
			InputTokens: row.Int("input_tokens"), OutputTokens: row.Int("output_tokens"),
		}
		sort.Strings(s.Models)
		switch client, server := row.Bool("is_client"), row.Bool("is_server"); {
		case client && server:
			s.Role = "both"
		case server:
			s.Role = "server"
		default:
			s.Role = "client"
		}
		if secs > 0 {
			s.RatePerSec = float64(s.Requests) / secs
		}
		index[s.Service] = len(out.Services)
		out.Services = append(out.Services, s)
	}
	if len(out.Services) == 0 {
		return out, nil
	}
	if err := q.overviewTrends(ctx, r, &out, index); err != nil {
		return out, err
	}
	if out.Models, err = q.overviewModels(ctx, r); err != nil {
		return out, err
	}
	return out, nil
}

// overviewTrends fills each service's TTFT p95 per bucket.
func (q *Queries) overviewTrends(ctx context.Context, r OverviewRequest, out *Overview, index map[string]int) error {
	width := int64(out.Bucket / time.Second)
	first := r.Window.From.Truncate(out.Bucket)
	for t := first; t.Before(r.Window.To); t = t.Add(out.Bucket) {
		out.Buckets = append(out.Buckets, t)
	}
	for i := range out.Services {
		out.Services[i].Trend = make([]*float64, len(out.Buckets))
	}
	res, err := q.CH.Query(ctx, `SELECT name, toStartOfInterval(start, INTERVAL ? SECOND) AS bucket, quantile(0.95)(ttft_ms) AS p95
		FROM llm_requests FINAL ARRAY JOIN `+serviceNames+`
		WHERE project_id = ? AND start >= ? AND start < ?
		GROUP BY name, bucket`+FinalSettings, width, r.Project, r.Window.From, r.Window.To)
	if err != nil {
		return fmt.Errorf("overview trends: %w", err)
	}
	for i := 0; i < res.Len(); i++ {
		row := res.Row(i)
		si, ok := index[row.String("name")]
		b := int(row.Time("bucket").Sub(first) / out.Bucket)
		if !ok || b < 0 || b >= len(out.Buckets) {
			continue
		}
		out.Services[si].Trend[b] = row.FloatPtr("p95")
	}
	return nil
}

func (q *Queries) overviewModels(ctx context.Context, r OverviewRequest) ([]ModelOverview, error) {
	res, err := q.CH.Query(ctx, `SELECT model, anyHeavy(provider) AS provider, count() AS n,
			quantile(0.5)(ttft_ms) AS ttft_p50, quantile(0.95)(ttft_ms) AS ttft_p95, quantile(0.99)(ttft_ms) AS ttft_p99,
			quantile(0.5)(itl_ms) AS itl_p50, quantile(0.5)(input_tokens) AS in_p50, quantile(0.5)(output_tokens) AS out_p50,
			avg(error) AS error_rate
		FROM llm_requests FINAL WHERE project_id = ? AND start >= ? AND start < ?
		GROUP BY model ORDER BY n DESC, model`+FinalSettings, r.Project, r.Window.From, r.Window.To)
	if err != nil {
		return nil, fmt.Errorf("overview per model: %w", err)
	}
	out := make([]ModelOverview, res.Len())
	for i := range out {
		row := res.Row(i)
		out[i] = ModelOverview{Model: row.String("model"), Provider: row.String("provider"), Requests: int(row.Int("n")),
			TTFT:   diagnose.Percentiles{P50: row.FloatPtr("ttft_p50"), P95: row.FloatPtr("ttft_p95"), P99: row.FloatPtr("ttft_p99")},
			ITLP50: row.FloatPtr("itl_p50"), InputTokensP50: row.FloatPtr("in_p50"), OutputTokensP50: row.FloatPtr("out_p50"),
			ErrorRate: row.Float("error_rate")}
	}
	return out, nil
}

// ServiceVerdict is the verdict badge of one service over a window.
type ServiceVerdict struct {
	Verdict    diagnose.Verdict
	Summary    string
	Confidence float64
}

// VerdictRequest names the service whose verdict the overview shows.
type VerdictRequest struct {
	Project uint32
	Window  diagnose.Range
	Service string
	SLO     *diagnose.SLO
}

// ServiceVerdict diagnoses one service on a sample of its requests
// (verdictSample per window) for the overview's badge. Answers are kept
// for verdictTTL per service and minute of the window, so reloading the
// overview does not diagnose everything again.
func (q *Queries) ServiceVerdict(ctx context.Context, r VerdictRequest) (ServiceVerdict, error) {
	if v, ok := q.CachedServiceVerdict(r); ok {
		return v, nil
	}
	sampled := *q
	if sampled.MaxRows <= 0 || sampled.MaxRows > verdictSample {
		sampled.MaxRows = verdictSample
	}
	d, err := sampled.Diagnose(ctx, DiagnoseRequest{Project: r.Project, Window: r.Window, Service: r.Service, SLO: r.SLO})
	if err != nil {
		return ServiceVerdict{}, err
	}
	v := ServiceVerdict{Verdict: d.Verdict, Summary: d.Summary, Confidence: d.Confidence}
	verdicts.put(verdictKeyOf(r), v)
	return v, nil
}

// CachedServiceVerdict returns a verdict computed within verdictTTL for
// the same service and minute of the window, without diagnosing.
func (q *Queries) CachedServiceVerdict(r VerdictRequest) (ServiceVerdict, bool) {
	return verdicts.get(verdictKeyOf(r))
}

// verdictTTL is how long an overview verdict is reused.
const verdictTTL = time.Minute

type verdictKey struct {
	project  uint32
	service  string
	from, to int64 // unix minutes
	slo      diagnose.SLO
}

func verdictKeyOf(r VerdictRequest) verdictKey {
	k := verdictKey{project: r.Project, service: r.Service, from: r.Window.From.Unix() / 60, to: r.Window.To.Unix() / 60}
	if r.SLO != nil {
		k.slo = *r.SLO
	}
	return k
}

type verdictEntry struct {
	v       ServiceVerdict
	expires time.Time
}

// verdictCache is a small TTL map shared by every Queries of the process.
type verdictCache struct {
	mu      sync.Mutex
	entries map[verdictKey]verdictEntry
}

var verdicts = &verdictCache{entries: map[verdictKey]verdictEntry{}}

func (c *verdictCache) get(k verdictKey) (ServiceVerdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || time.Now().After(e.expires) {
		return ServiceVerdict{}, false
	}
	return e.v, true
}

func (c *verdictCache) put(k verdictKey, v ServiceVerdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if len(c.entries) >= 1000 { // drop what expired; a flood of windows must not grow memory
		for key, e := range c.entries {
			if now.After(e.expires) {
				delete(c.entries, key)
			}
		}
		if len(c.entries) >= 1000 {
			c.entries = map[verdictKey]verdictEntry{}
		}
	}
	c.entries[k] = verdictEntry{v: v, expires: now.Add(verdictTTL)}
}
