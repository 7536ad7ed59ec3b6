package analysis

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"golang.org/x/sync/errgroup"
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
	// Partners are the services on the other side of its calls: the
	// inference servers a client called, the clients a server served
	// (sorted, at most 20). Unpaired: some of its requests had none (a
	// managed API call, a server span without its client).
	Partners []string
	Unpaired bool
	// SameRequestsAs names the partner whose requests are exactly this
	// service's (an app calling only one inference server that serves only
	// it): the two rows are one set of requests seen from both sides, and
	// get one verdict (VerdictService).
	SameRequestsAs string
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
	// Sampled: the busiest services' figures come from the stored sample
	// (1/16, or 1/256 for the very busiest), counts and token sums scaled.
	Sampled bool
	// FromRollups: every figure comes from the rollups (percentiles within
	// ±2.5 %, the window widened to whole 5 minutes).
	FromRollups bool
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
//
// A window whose trend buckets are 5 minutes or wider reads the rollups
// (every request counted, percentiles within ±2.5 %: overviewRollups);
// shorter windows read the requests themselves (overviewRequests).
func (q *Queries) Overview(ctx context.Context, r OverviewRequest) (Overview, error) {
	w := r.Window
	out := Overview{Window: w, Bucket: diagnose.Buckets(w)}
	var trends []trendPoint
	var err error
	if out.FromRollups = rollupServes(out.Bucket); out.FromRollups {
		out.Services, trends, out.Models, err = q.overviewRollups(ctx, r, out.Bucket)
	} else {
		out.Services, trends, out.Models, out.Sampled, err = q.overviewRequests(ctx, r, out.Bucket)
	}
	if err != nil {
		return out, err
	}
	if secs := w.Duration().Seconds(); secs > 0 {
		for i := range out.Services {
			out.Services[i].RatePerSec = float64(out.Services[i].Requests) / secs
		}
	}
	sort.Slice(out.Services, func(i, j int) bool {
		a, b := out.Services[i], out.Services[j]
		return a.Requests > b.Requests || a.Requests == b.Requests && a.Service < b.Service
	})
	sort.Slice(out.Models, func(i, j int) bool {
		a, b := out.Models[i], out.Models[j]
		return a.Requests > b.Requests || a.Requests == b.Requests && a.Model < b.Model
	})
	if len(out.Services) == 0 {
		return out, nil
	}
	pairServices(out.Services)
	index := map[string]int{}
	for i, s := range out.Services {
		index[s.Service] = i
	}
	first := w.From.Truncate(out.Bucket)
	for t := first; t.Before(w.To); t = t.Add(out.Bucket) {
		out.Buckets = append(out.Buckets, t)
	}
	for i := range out.Services {
		out.Services[i].Trend = make([]*float64, len(out.Buckets))
	}
	for _, p := range trends {
		si, ok := index[p.name]
		b := int(p.bucket.Sub(first) / out.Bucket)
		if !ok || b < 0 || b >= len(out.Buckets) {
			continue
		}
		out.Services[si].Trend[b] = p.p95
	}
	return out, nil
}

// trendPoint is one service's TTFT p95 in one bucket.
type trendPoint struct {
	name   string
	bucket time.Time
	p95    *float64
}

// overviewRollups reads an overview from the rollups: three reads of a few
// thousand rows each, merged in the engine.
func (q *Queries) overviewRollups(ctx context.Context, r OverviewRequest, width time.Duration) ([]ServiceOverview, []trendPoint, []ModelOverview, error) {
	base := rollupRead{project: r.Project, window: r.Window, width: width}
	svc, trend, model := overviewServicesRead(base), base, base
	trend.nameJoin, trend.groupBy, trend.hists = true, []string{"name", "b"}, []string{"ttft_ms"}
	model.groupBy, model.hists = []string{"model"}, []string{"ttft_ms", "itl_ms", "input_tokens", "output_tokens"}
	model.extra = ", anyHeavy(provider) AS provider"
	reads := []rollupRead{svc, trend, model}
	res := make([]*clickhouse.Result, len(reads))
	var g errgroup.Group
	for i, rd := range reads {
		g.Go(func() error {
			sql, args := rd.sql()
			var err error
			if res[i], err = q.CH.Query(ctx, sql, args...); err != nil {
				return fmt.Errorf("overview from rollups: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, err
	}
	var services []ServiceOverview
	for i := range res[0].Len() {
		row := res[0].Row(i)
		n := row.Int("requests")
		if n <= 0 {
			continue // every request retracted
		}
		ttft := rollupHist(row, "ttft_ms").quantiles(0.5, 0.95, 0.99)
		s := ServiceOverview{Service: row.String("name"), Models: row.Strings("models"), Requests: int(n),
			TTFT: diagnose.PercentilesOf(ttft[0], ttft[1], ttft[2]), ITLP50: known(rollupHist(row, "itl_ms").quantiles(0.5)[0]),
			ErrorRate: float64(row.Int("errors")) / float64(n), ColdStarts: int(row.Int("cold_starts")),
			InputTokens: row.Int("input_tokens_sum"), OutputTokens: row.Int("output_tokens_sum"),
			Role: serviceRole(row.Bool("is_client"), row.Bool("is_server"))}
		s.setPartners(row.Strings("partners"))
		sort.Strings(s.Models)
		services = append(services, s)
	}
	trends := make([]trendPoint, 0, res[1].Len())
	for i := range res[1].Len() {
		row := res[1].Row(i)
		if row.Int("requests") > 0 {
			p95 := rollupHist(row, "ttft_ms").quantiles(0.95)[0]
			trends = append(trends, trendPoint{row.String("name"), row.Time("b"), known(p95)})
		}
	}
	var models []ModelOverview
	for i := range res[2].Len() {
		row := res[2].Row(i)
		n := row.Int("requests")
		if n <= 0 {
			continue
		}
		ttft := rollupHist(row, "ttft_ms").quantiles(0.5, 0.95, 0.99)
		p50 := func(col string) *float64 { return known(rollupHist(row, col).quantiles(0.5)[0]) }
		models = append(models, ModelOverview{Model: row.String("model"), Provider: row.String("provider"), Requests: int(n),
			TTFT: diagnose.PercentilesOf(ttft[0], ttft[1], ttft[2]), ITLP50: p50("itl_ms"),
			InputTokensP50: p50("input_tokens"), OutputTokensP50: p50("output_tokens"), ErrorRate: float64(row.Int("errors")) / float64(n)})
	}
	return services, trends, models, nil
}

// known is a figure, nil when NaN (nothing to compute it from).
func known(x float64) *float64 {
	if math.IsNaN(x) {
		return nil
	}
	return &x
}

// overviewServicesRead is the overview's per-service rollup read.
func overviewServicesRead(base rollupRead) rollupRead {
	base.nameJoin, base.groupBy, base.hists = true, []string{"name"}, []string{"ttft_ms", "itl_ms"}
	base.extra = ", max(name = service) AS is_client, max(name = server_service) AS is_server, groupUniqArray(20)(model) AS models, " + partnerExpr
	return base
}

// serviceRole names a service's side of its LLM calls.
func serviceRole(client, server bool) string {
	switch {
	case client && server:
		return "both"
	case server:
		return "server"
	}
	return "client"
}

// overviewRequests reads an overview from the requests themselves.
//
// A busy window is not read row by row: services and models with many
// requests are aggregated over the stored 1/16 sample (llm_requests_sample)
// with counts and token sums scaled up, the others exactly, so a quiet
// service next to a busy one keeps exact figures (and never drops out).
func (q *Queries) overviewRequests(ctx context.Context, r OverviewRequest, width time.Duration) (services []ServiceOverview, trends []trendPoint, models []ModelOverview, sampled bool, err error) {
	svcSources, modelSources, err := q.overviewPlan(ctx, r)
	if err != nil {
		return nil, nil, nil, false, err
	}
	// Every source's services, trends and models are read at once: on two
	// cores one query's Go decoding overlaps another's engine work, and a
	// busy window has up to nine reads.
	svcRows := make([][]ServiceOverview, len(svcSources))
	trendRows := make([]*clickhouse.Result, len(svcSources))
	modelRows := make([][]ModelOverview, len(modelSources))
	var g errgroup.Group
	for i, src := range svcSources {
		g.Go(func() (err error) {
			svcRows[i], err = q.overviewServices(ctx, r, src)
			return err
		})
		g.Go(func() (err error) {
			trendRows[i], err = q.overviewTrends(ctx, r, src, int64(width/time.Second))
			return err
		})
	}
	for i, src := range modelSources {
		g.Go(func() (err error) {
			modelRows[i], err = q.overviewModels(ctx, r, src)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, false, err
	}
	for i, src := range svcSources {
		services = append(services, svcRows[i]...)
		sampled = sampled || src.scale > 1 && len(svcRows[i]) > 0
	}
	for _, res := range trendRows {
		for i := range res.Len() {
			row := res.Row(i)
			trends = append(trends, trendPoint{row.String("name"), row.Time("bucket"), row.FloatPtr("p95")})
		}
	}
	for _, rows := range modelRows {
		models = append(models, rows...)
	}
	return services, trends, models, sampled, nil
}

// overviewSource is one read of an overview: a table, the names it is
// restricted to (nil: every name) and how many requests a row stands for.
type overviewSource struct {
	table string
	names []string
	scale float64
	// level0 reads only sample_level 0 of the sample table (1/256).
	level0 bool
}

func (s overviewSource) final() string {
	return s.table + " FINAL"
}

// levelFilter keeps the first sample level when the source reads only it.
func (s overviewSource) levelFilter() string {
	if s.level0 {
		return " AND sample_level = 0"
	}
	return ""
}

// Overview sampling thresholds: a window with more stored rows than
// overviewExactRows reads the names with at least overviewSampleMin rows
// (≥ 4k of them in the 1/16 sample: p99 within a few percent) from the
// sample, and those 16 times busier from its first level (1/256).
const (
	overviewExactRows = 400_000
	overviewSampleMin = 64_000
	// sampleTableScale and level0Scale are how many requests a row of the
	// sample table, or of its level 0, stands for.
	sampleTableScale = float64(SampleBuckets) / sampleTableKeep
	level0Scale      = float64(SampleBuckets) / sampleLevel0Keep
)

// overviewPlan splits a busy window's services and models into those read
// from the stored sample (the busy ones) and the rest, read exactly, so a
// quiet service never drops out of the overview nor loses precision. The
// hourly name counts (llm_request_names) say which is which without
// scanning llm_requests; they count row versions and whole hours, which
// only shifts a threshold.
func (q *Queries) overviewPlan(ctx context.Context, r OverviewRequest) (services, models []overviewSource, err error) {
	exact := []overviewSource{{table: "llm_requests", scale: 1}}
	res, err := q.CH.Query(ctx, `SELECT service, server_service, model, sum(rows) AS n FROM llm_request_names
		WHERE project_id = ? AND hour >= toStartOfHour(?) AND hour < ? GROUP BY service, server_service, model`,
		r.Project, r.Window.From, r.Window.To)
	if err != nil {
		return nil, nil, fmt.Errorf("overview counts: %w", err)
	}
	byService, byModel, total := map[string]int{}, map[string]int{}, 0
	for i := 0; i < res.Len(); i++ {
		row := res.Row(i)
		n := int(row.Int("n"))
		total += n
		byModel[row.String("model")] += n
		svc, srv := row.String("service"), row.String("server_service")
		byService[svc] += n
		if srv != "" && srv != svc {
			byService[srv] += n
		}
	}
	if total <= orDefault(q.OverviewExactRows, overviewExactRows) {
		return exact, exact, nil
	}
	minRows := orDefault(q.OverviewSampleMin, overviewSampleMin)
	plan := func(counts map[string]int) []overviewSource {
		huge := overviewSource{table: "llm_requests_sample", scale: level0Scale, level0: true}
		big := overviewSource{table: "llm_requests_sample", scale: sampleTableScale}
		small := overviewSource{table: "llm_requests", scale: 1}
		for name, n := range counts {
			switch {
			case n >= minRows*int(level0Scale/sampleTableScale):
				huge.names = append(huge.names, name)
			case n >= minRows:
				big.names = append(big.names, name)
			default:
				small.names = append(small.names, name)
			}
		}
		if len(small.names) == len(counts) {
			return exact
		}
		var out []overviewSource
		for _, src := range []overviewSource{huge, big, small} {
			if len(src.names) > 0 {
				sort.Strings(src.names)
				out = append(out, src)
			}
		}
		return out
	}
	return plan(byService), plan(byModel), nil
}

// serviceFilter restricts a query over ARRAY JOIN serviceNames to the
// source's names. The first condition, on the row's own columns, lets the
// engine skip rows before the ARRAY JOIN (and the primary key skip other
// services).
func (s overviewSource) serviceFilter() (string, []any) {
	if s.names == nil {
		return "", nil
	}
	return " AND (service IN ? OR server_service IN ?) AND name IN ?", []any{s.names, s.names, s.names}
}

// modelFilter restricts a per-model query to the source's models.
func (s overviewSource) modelFilter() (string, []any) {
	if s.names == nil {
		return "", nil
	}
	return " AND model IN ?", []any{s.names}
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func scaled(n int64, scale float64) int64 { return int64(math.Round(float64(n) * scale)) }

// overviewServices aggregates the source's services.
func (q *Queries) overviewServices(ctx context.Context, r OverviewRequest, src overviewSource) ([]ServiceOverview, error) {
	filter, fargs := src.serviceFilter()
	res, err := q.CH.Query(ctx, `SELECT name, max(name = service) AS is_client, max(name = server_service) AS is_server,
			groupUniqArray(20)(model) AS models, `+partnerExpr+`, count() AS n,
			quantiles(0.5, 0.95, 0.99)(ttft_ms) AS ttft, quantile(0.5)(itl_ms) AS itl_p50, avg(error) AS error_rate,
			sum(cold_start) AS cold_starts, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens
		FROM `+src.final()+` ARRAY JOIN `+serviceNames+`
		WHERE project_id = ? AND start >= ? AND start < ?`+src.levelFilter()+filter+`
		GROUP BY name`+FinalSettings, append([]any{r.Project, r.Window.From, r.Window.To}, fargs...)...)
	if err != nil {
		return nil, fmt.Errorf("overview per service: %w", err)
	}
	out := make([]ServiceOverview, 0, res.Len())
	for i := 0; i < res.Len(); i++ {
		row := res.Row(i)
		s := ServiceOverview{
			Service: row.String("name"), Models: row.Strings("models"), Requests: int(scaled(row.Int("n"), src.scale)),
			TTFT: percentilesOf(row, "ttft"), ITLP50: row.FloatPtr("itl_p50"), ErrorRate: row.Float("error_rate"),
			ColdStarts:  int(scaled(row.Int("cold_starts"), src.scale)),
			InputTokens: scaled(row.Int("input_tokens"), src.scale), OutputTokens: scaled(row.Int("output_tokens"), src.scale),
		}
		s.Role = serviceRole(row.Bool("is_client"), row.Bool("is_server"))
		s.setPartners(row.Strings("partners"))
		sort.Strings(s.Models)
		out = append(out, s)
	}
	return out, nil
}

// percentilesOf reads quantiles(0.5, 0.95, 0.99) of an empty-or-not set:
// NaN (no value in the window) reads as unknown.
func percentilesOf(row clickhouse.Row, col string) diagnose.Percentiles {
	qs := row.Floats(col)
	at := func(i int) *float64 {
		if i >= len(qs) || math.IsNaN(qs[i]) {
			return nil
		}
		return &qs[i]
	}
	return diagnose.Percentiles{P50: at(0), P95: at(1), P99: at(2)}
}

// overviewTrends reads the source's services' TTFT p95 per bucket.
func (q *Queries) overviewTrends(ctx context.Context, r OverviewRequest, src overviewSource, width int64) (*clickhouse.Result, error) {
	filter, fargs := src.serviceFilter()
	res, err := q.CH.Query(ctx, `SELECT name, toStartOfInterval(start, INTERVAL ? SECOND) AS bucket, quantile(0.95)(ttft_ms) AS p95
		FROM `+src.final()+` ARRAY JOIN `+serviceNames+`
		WHERE project_id = ? AND start >= ? AND start < ?`+src.levelFilter()+filter+`
		GROUP BY name, bucket`+FinalSettings, append([]any{width, r.Project, r.Window.From, r.Window.To}, fargs...)...)
	if err != nil {
		return nil, fmt.Errorf("overview trends: %w", err)
	}
	return res, nil
}

// overviewModels aggregates the source's models.
func (q *Queries) overviewModels(ctx context.Context, r OverviewRequest, src overviewSource) ([]ModelOverview, error) {
	filter, fargs := src.modelFilter()
	args := append([]any{r.Project, r.Window.From, r.Window.To}, fargs...)
	res, err := q.CH.Query(ctx, `SELECT model, anyHeavy(provider) AS provider, count() AS n,
			quantiles(0.5, 0.95, 0.99)(ttft_ms) AS ttft, quantile(0.5)(itl_ms) AS itl_p50,
			quantiles(0.5)(input_tokens) AS in_p50, quantiles(0.5)(output_tokens) AS out_p50, avg(error) AS error_rate
		FROM `+src.final()+` WHERE project_id = ? AND start >= ? AND start < ?`+src.levelFilter()+filter+`
		GROUP BY model`+FinalSettings, args...)
	if err != nil {
		return nil, fmt.Errorf("overview per model: %w", err)
	}
	out := make([]ModelOverview, res.Len())
	for i := range out {
		row := res.Row(i)
		out[i] = ModelOverview{Model: row.String("model"), Provider: row.String("provider"), Requests: int(scaled(row.Int("n"), src.scale)),
			TTFT: percentilesOf(row, "ttft"), ITLP50: row.FloatPtr("itl_p50"), InputTokensP50: percentilesOf(row, "in_p50").P50,
			OutputTokensP50: percentilesOf(row, "out_p50").P50, ErrorRate: row.Float("error_rate")}
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
	// Baseline is zero for the default (GuardDiagnosis may set it).
	Baseline diagnose.Range
	Service  string
	SLO      *diagnose.SLO
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
	d, err := sampled.Diagnose(ctx, DiagnoseRequest{Project: r.Project, Window: r.Window, Baseline: r.Baseline, Service: r.Service, SLO: r.SLO})
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
	baseline diagnose.Range
	slo      diagnose.SLO
}

func verdictKeyOf(r VerdictRequest) verdictKey {
	k := verdictKey{project: r.Project, service: r.Service, from: r.Window.From.Unix() / 60, to: r.Window.To.Unix() / 60, baseline: r.Baseline}
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
