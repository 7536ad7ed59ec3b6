package web

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web/views"
)

// overviewQueries is what the overview reads beyond Queries
// (analysis.Queries provides it).
type overviewQueries interface {
	Overview(ctx context.Context, r analysis.OverviewRequest) (analysis.Overview, error)
	ServiceVerdict(ctx context.Context, r analysis.VerdictRequest) (analysis.ServiceVerdict, error)
	CachedServiceVerdict(r analysis.VerdictRequest) (analysis.ServiceVerdict, bool)
}

type sloStatusQueries interface {
	SLOStatuses(ctx context.Context, project uint32, slos []postgres.SLO, now time.Time) ([]analysis.SLOStatus, error)
}

// overviewVerdicts bounds the per-service diagnoses of one overview.
const overviewVerdicts = 10

// overviewChartServices is how many services the TTFT chart draws.
const overviewChartServices = 6

// overviewPage shows every service and model of the window, with a
// verdict and SLO status per service; a project without data gets the
// onboarding steps instead.
func (s *Server) overviewPage(c echo.Context) error {
	ctx := c.Request().Context()
	now := time.Now().UTC()
	rng, err := readPageRange(c, "1h", now)
	if err != nil {
		return err
	}
	q, ok := s.deps.Queries.(overviewQueries)
	if !ok {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "the overview is not available in this build")
	}
	project := projectOf(c)
	// A verdict part (up to overviewVerdicts per overview) has no layout,
	// so it skips the page's notices and their reads.
	if c.QueryParam("part") == "verdict" {
		return s.verdictPart(c, q, project, rng)
	}
	v := views.OverviewView{Page: s.page(c, "Overview", "overview"), Range: rng.rangeBar("/", nil)}
	slos, statuses := s.sloStatuses(ctx, project, now)
	ov, err := q.Overview(ctx, analysis.OverviewRequest{Project: project, Window: rng.Range})
	if err != nil {
		return s.internal(err)
	}
	if len(ov.Services) == 0 {
		known, err := s.deps.Queries.Services(ctx, project, now.Add(-analysis.MaxWindow))
		if err != nil {
			return s.internal(err)
		}
		if len(known) == 0 {
			o := s.onboarding(c)
			v.Setup = &o
		} else {
			v.Empty = fmt.Sprintf("No LLM requests between %s and %s UTC. The last one arrived %s: pick a longer range.",
				rng.From.Format(dayMinute), rng.To.Format(dayMinute), humanAgo(latest(known), now))
		}
		return render(c, http.StatusOK, views.Overview(v))
	}

	rangeQuery := rng.query()
	var total int
	var worst *float64
	var worstName string
	for i, so := range ov.Services {
		if so.Role != "server" {
			total += so.Requests
		}
		if so.TTFT.P95 != nil && (worst == nil || *so.TTFT.P95 > *worst) {
			worst, worstName = so.TTFT.P95, so.Service
		}
		row := serviceRow(so, rangeQuery, slos, statuses)
		// The busiest services get a verdict: from the cache, or loaded by
		// htmx after the page is shown (each one is a diagnosis).
		// An app and the inference server that saw exactly its requests
		// share one verdict: the app's (analysis.ServiceOverview.VerdictService).
		if i < overviewVerdicts {
			vr, guard := s.verdictRequest(ctx, project, rng, so.VerdictService(), slos)
			if verdict, ok := q.CachedServiceVerdict(vr); ok {
				guard.ExplainVerdict(&verdict)
				row.Verdict, row.VerdictTitle = string(verdict.Verdict), pairedTitle(so, verdict.Summary)
			} else {
				vq := url.Values{"part": {"verdict"}, "service": {so.VerdictService()}}
				if so.VerdictService() != so.Service {
					vq.Set("for", so.Service)
				}
				for k, vs := range rangeQuery {
					vq[k] = vs
				}
				row.VerdictHref = "/?" + vq.Encode()
			}
		}
		v.Services = append(v.Services, row)
	}
	if total == 0 { // only server-side spans: count those
		for _, so := range ov.Services {
			total += so.Requests
		}
	}
	secs := rng.Duration().Seconds()
	violated := 0
	for _, st := range statuses {
		if !st.Met || st.FastBurn {
			violated++
		}
	}
	v.KPIs = []views.KPI{
		{Label: "LLM requests", Value: humanInt(int64(total)), Sub: humanRate(float64(total)/secs) + " on average"},
		{Label: "Services", Value: strconv.Itoa(len(ov.Services)), Sub: countNoun(len(ov.Models), "model")},
		{Label: "Slowest TTFT p95", Value: views.HumanMsPtr(worst), Sub: worstName},
		sloKPI(len(slos), violated),
	}
	v.VerdictNote = "Verdicts diagnose a sample of each service's requests against the 3× longer window before; open a service for the full diagnosis."
	if len(ov.Services) > overviewVerdicts {
		v.VerdictNote = fmt.Sprintf("Verdicts are computed for the %d busiest services, on a sample of their requests; open a service for the full diagnosis.", overviewVerdicts)
	}
	if ov.Sampled {
		v.VerdictNote += fmt.Sprintf(" This window holds %s requests: the busiest services' and models' figures come from a stored sample of them (1/16, or 1/256 for the very busiest; counts scaled up, within a few percent); quieter ones are exact.",
			humanInt(int64(total)))
	}
	if ov.FromRollups {
		v.VerdictNote += " Counts cover every request; percentiles come from 5-minute rollups (histograms of 5 %-wide buckets, within ±2.5 %)."
	}
	v.Chart = overviewChart(ov)
	v.Episodes = s.episodes(ctx, project, "", rng.Range, now)
	for _, m := range ov.Models {
		mq := url.Values{}
		for k, vs := range rangeQuery {
			mq[k] = vs
		}
		mq.Set("model", m.Model)
		v.Models = append(v.Models, views.ModelRow{Model: orNone(m.Model), Provider: orNone(m.Provider), Requests: humanInt(int64(m.Requests)),
			TTFTP50: views.HumanMsPtr(m.TTFT.P50), TTFTP95: views.HumanMsPtr(m.TTFT.P95), ITLP50: views.HumanMsPtr(m.ITLP50),
			InputP50: humanTokensF(m.InputTokensP50), OutputP50: humanTokensF(m.OutputTokensP50), Errors: humanPct(m.ErrorRate),
			RequestsHref: "/requests?" + mq.Encode()})
	}
	return render(c, http.StatusOK, views.Overview(v))
}

// verdictRequest is the overview badge's diagnosis of service, its
// baseline and objective guarded as the diagnosis page's are.
func (s *Server) verdictRequest(ctx context.Context, project uint32, rng pageRange, service string, slos []postgres.SLO) (analysis.VerdictRequest, analysis.BaselineGuard) {
	d := analysis.DiagnoseRequest{Project: project, Window: rng.Range, Service: service, SLO: analysis.DiagnosisSLO(slos, service, "")}
	var g analysis.BaselineGuard
	if gd, ok := s.deps.Settings.(analysis.DiagnosisGuard); ok {
		g = gd.GuardDiagnosis(ctx, &d)
	}
	return analysis.VerdictRequest{Project: project, Window: d.Window, Baseline: d.Baseline, Service: service, SLO: d.SLO}, g
}

// verdictPart answers the htmx request of one service's verdict badge.
// A failure shows as a muted cell with the reason, not an error page:
// the rest of the overview is fine.
func (s *Server) verdictPart(c echo.Context, q overviewQueries, project uint32, rng pageRange) error {
	ctx := c.Request().Context()
	service := c.QueryParam("service")
	var slos []postgres.SLO
	if s.deps.PG != nil {
		var err error
		if slos, err = s.deps.PG.ListSLOs(ctx, int64(project)); err != nil {
			s.deps.Log.Error("overview verdict: read SLOs", "err", err)
		}
	}
	dq := url.Values{"service": {service}}
	for k, vs := range rng.query() {
		dq[k] = vs
	}
	row := views.ServiceRow{Name: service, DiagnoseHref: "/diagnose?" + dq.Encode()}
	vr, guard := s.verdictRequest(ctx, project, rng, service, slos)
	verdict, err := q.ServiceVerdict(ctx, vr)
	guard.ExplainVerdict(&verdict)
	if err != nil {
		if ctx.Err() != nil {
			return nil // the browser went away
		}
		s.deps.Log.Error("overview verdict", "service", service, "err", err, "request_id", requestID(c))
		row.VerdictTitle = "The diagnosis could not run (request id " + requestID(c) + " in the server log)"
	} else {
		row.Verdict, row.VerdictTitle = string(verdict.Verdict), verdict.Summary
		if f := c.QueryParam("for"); f != "" && f != service {
			row.VerdictTitle = pairedTitle(analysis.ServiceOverview{Service: f, Role: "server", SameRequestsAs: service}, verdict.Summary)
		}
	}
	return render(c, http.StatusOK, views.VerdictCell(row))
}

// sloStatuses reads the project's SLOs and their status now; a failure
// only costs the SLO column, so it is logged rather than returned.
func (s *Server) sloStatuses(ctx context.Context, project uint32, now time.Time) ([]postgres.SLO, []analysis.SLOStatus) {
	if s.deps.PG == nil {
		return nil, nil
	}
	slos, err := s.deps.PG.ListSLOs(ctx, int64(project))
	if err != nil {
		s.deps.Log.Error("overview: read SLOs", "err", err)
		return nil, nil
	}
	q, ok := s.deps.Queries.(sloStatusQueries)
	if !ok || len(slos) == 0 {
		return slos, nil
	}
	st, err := q.SLOStatuses(ctx, project, slos, now)
	if err != nil {
		s.deps.Log.Error("overview: SLO status", "err", err)
		return slos, nil
	}
	return slos, st
}

func sloKPI(n, violated int) views.KPI {
	switch {
	case n == 0:
		return views.KPI{Label: "SLOs", Value: "none", Sub: "define one on the SLOs page"}
	case violated == 0:
		return views.KPI{Label: "SLOs", Value: "all met", Sub: countNoun(n, "objective")}
	}
	return views.KPI{Label: "SLOs", Value: fmt.Sprintf("%d of %d missed", violated, n), Sub: "or burning fast"}
}

func serviceRow(so analysis.ServiceOverview, rangeQuery url.Values, slos []postgres.SLO, statuses []analysis.SLOStatus) views.ServiceRow {
	q := url.Values{}
	for k, vs := range rangeQuery {
		q[k] = vs
	}
	q.Set("service", so.Service)
	row := views.ServiceRow{
		Name: so.Service, Role: roleLabel(so.Role), Models: strings.Join(so.Models, ", "),
		DiagnoseHref: "/diagnose?" + q.Encode(), RequestsHref: "/requests?" + q.Encode(),
		Requests: countNoun(so.Requests, "request"), Rate: humanRate(so.RatePerSec),
		TTFTP50: views.HumanMsPtr(so.TTFT.P50), TTFTP95: views.HumanMsPtr(so.TTFT.P95), TTFTP99: views.HumanMsPtr(so.TTFT.P99),
		ITLP50: views.HumanMsPtr(so.ITLP50), Errors: humanPct(so.ErrorRate), ErrorsHigh: so.ErrorRate >= 0.05,
		SLO:   serviceSLOCell(so.Service, slos, statuses),
		Trend: sparkline(so.Trend, "TTFT p95"),
	}
	row.PairVerb, row.PairNames, row.PairMore = pairNames(so)
	row.SamePair = so.SameRequestsAs != ""
	row.VerdictTitle = "Not diagnosed on the overview: open the service"
	return row
}

// pairNames names the services on the other side of a service's calls:
// the verb, the first three and how many more.
func pairNames(so analysis.ServiceOverview) (verb string, names []string, more int) {
	if len(so.Partners) == 0 {
		return "", nil, 0
	}
	verb = "calls"
	if so.Role == "server" {
		verb = "serves"
	}
	names = so.Partners
	if len(names) > 3 {
		names, more = names[:3], len(names)-3
	}
	return verb, names, more
}

// pairedTitle says, on the server row of a pair, whose verdict it shows.
func pairedTitle(so analysis.ServiceOverview, summary string) string {
	if so.VerdictService() != so.Service {
		return "Same requests as " + so.VerdictService() + ", diagnosed once: " + summary
	}
	return summary
}

func roleLabel(role string) string {
	switch role {
	case "server":
		return "inference server"
	case "both":
		return "client + server"
	}
	return "client"
}

// serviceSLOCell sums up the SLOs that name the service (SLOs for every
// service are summed up on the SLO page, not repeated on every row).
func serviceSLOCell(service string, slos []postgres.SLO, statuses []analysis.SLOStatus) views.SLOCell {
	var n, missed, burning int
	var worst *analysis.SLOStatus
	for i := range statuses {
		st := &statuses[i]
		if st.SLO.Service != service {
			continue
		}
		n++
		if st.FastBurn {
			burning++
		}
		if !st.Met {
			missed++
		}
		if worst == nil || burnOf(st) > burnOf(worst) {
			worst = st
		}
	}
	if n == 0 {
		for _, s := range slos {
			if s.Service == service {
				return views.SLOCell{State: "none", Text: "not evaluated"}
			}
		}
		return views.SLOCell{State: "none", Text: "no SLO"}
	}
	title := analysis.DescribeSLO(worst.SLO)
	if worst.BurnLong != nil {
		title += ", burn rate " + diagnose.FormatRatio(*worst.BurnLong) + " over 1 h"
	}
	switch {
	case burning > 0:
		return views.SLOCell{State: "burning", Text: "burning " + diagnose.FormatRatio(burnOf(worst)), Title: title}
	case missed > 0:
		text := fmt.Sprintf("%d of %d missed", missed, n)
		if worst.BurnLong != nil {
			text += " · burn " + diagnose.FormatRatio(*worst.BurnLong)
		}
		return views.SLOCell{State: "violated", Text: text, Title: title}
	}
	return views.SLOCell{State: "met", Text: fmt.Sprintf("%d met", n), Title: title}
}

func burnOf(st *analysis.SLOStatus) float64 {
	if st.BurnLong == nil {
		return 0
	}
	return *st.BurnLong
}

// sparkline draws values on a 100×24 box, one polyline per run of
// buckets with data; the label states first, last and peak.
func sparkline(values []*float64, what string) views.Sparkline {
	var lo, hi = math.Inf(1), math.Inf(-1)
	var first, last *float64
	for _, p := range values {
		if p == nil {
			continue
		}
		if first == nil {
			first = p
		}
		last = p
		lo, hi = math.Min(lo, *p), math.Max(hi, *p)
	}
	if first == nil {
		return views.Sparkline{Label: "no TTFT data"}
	}
	label := fmt.Sprintf("%s from %s to %s, peak %s", what, diagnose.FormatMs(*first), diagnose.FormatMs(*last), diagnose.FormatMs(hi))
	lo = math.Min(lo, 0) // latency charts start at zero so small wiggles stay small
	span := hi - lo
	if span <= 0 {
		span = 1
	}
	n := len(values)
	x := func(i int) float64 {
		if n == 1 {
			return 50
		}
		return float64(i) * 100 / float64(n-1)
	}
	y := func(v float64) float64 { return 22 - (v-lo)/span*20 }
	var lines []string
	var run [][2]float64
	flush := func() {
		if len(run) == 1 { // a lone bucket: a short dash, so it shows
			p := run[0]
			run = [][2]float64{{p[0] - 0.8, p[1]}, {p[0] + 0.8, p[1]}}
		}
		if len(run) > 0 {
			pts := make([]string, len(run))
			for i, p := range run {
				pts[i] = strconv.FormatFloat(p[0], 'f', 2, 64) + "," + strconv.FormatFloat(p[1], 'f', 2, 64)
			}
			lines = append(lines, strings.Join(pts, " "))
		}
		run = nil
	}
	for i, p := range values {
		if p == nil {
			flush()
			continue
		}
		run = append(run, [2]float64{x(i), y(*p)})
	}
	flush()
	return views.Sparkline{Lines: lines, Label: label}
}

// chartColors are CSS variables of the Okabe–Ito palette, in series order.
var chartColors = []string{"--c-prefill", "--c-queue", "--c-decode", "--c-network", "--c-cold", "--info"}

// chartSpec is the JSON static/app.js renders with uPlot.
type chartSpec struct {
	YLabel string        `json:"yLabel,omitempty"`
	YUnit  string        `json:"yUnit,omitempty"`
	Height int           `json:"height,omitempty"`
	Series []chartSeries `json:"series"`
	Data   [][]*float64  `json:"data"`
}

type chartSeries struct {
	Label string `json:"label"`
	Color string `json:"color"`
	Dash  bool   `json:"dash,omitempty"`
}

// overviewChart draws TTFT p95 per bucket of the busiest services.
func overviewChart(ov analysis.Overview) *views.Chart {
	if len(ov.Buckets) < 2 {
		return nil
	}
	spec := chartSpec{YLabel: "TTFT p95", YUnit: "ms", Height: 240}
	xs := make([]*float64, len(ov.Buckets))
	for i, t := range ov.Buckets {
		x := float64(t.Unix())
		xs[i] = &x
	}
	spec.Data = append(spec.Data, xs)
	head := []string{"Bucket (UTC)"}
	services := ov.Services[:min(len(ov.Services), overviewChartServices)]
	for i, s := range services {
		spec.Series = append(spec.Series, chartSeries{Label: s.Service, Color: chartColors[i%len(chartColors)]})
		spec.Data = append(spec.Data, s.Trend)
		head = append(head, s.Service)
	}
	rows := make([][]string, len(ov.Buckets))
	for i, t := range ov.Buckets {
		row := []string{t.UTC().Format(dayMinute + ":05")}
		for _, s := range services {
			row = append(row, views.HumanMsPtr(s.Trend[i]))
		}
		rows[i] = row
	}
	return &views.Chart{ID: "overview-ttft", Title: "TTFT p95 by service, per " + humanDuration(ov.Bucket) + " bucket",
		Label: "Line chart of TTFT p95 per bucket for the " + countNoun(len(services), "busiest service"), Spec: spec, Head: head, Rows: rows}
}

// onboarding is the OTLP snippet for this server: the host the browser
// used (or the public URL's), with the OTLP ports of the config.
func (s *Server) onboarding(c echo.Context) views.Onboarding {
	host := c.Request().Host
	if u, err := url.Parse(s.deps.PublicURL); err == nil && u.Host != "" {
		host = u.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	httpPort, grpcPort := "4318", "4317"
	if _, p, err := net.SplitHostPort(s.deps.OTLPHTTPAddr); err == nil && p != "" {
		httpPort = p
	}
	if _, p, err := net.SplitHostPort(s.deps.OTLPGRPCAddr); err == nil && p != "" {
		grpcPort = p
	}
	hostPort := net.JoinHostPort(host, httpPort)
	return views.Onboarding{Endpoint: "http://" + hostPort, Header: "Authorization=Bearer%20<your key>",
		GRPC: net.JoinHostPort(host, grpcPort)}
}

func latest(services []analysis.ServiceInfo) time.Time {
	var t time.Time
	for _, s := range services {
		if s.LastSeen.After(t) {
			t = s.LastSeen
		}
	}
	return t
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
