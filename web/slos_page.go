package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/alerts"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web/views"
)

// alertRules reads and writes the webhook rule (analysis.StoredSettings).
type alertRules interface {
	AlertRule(ctx context.Context, project uint32) (analysis.AlertRule, error)
	SaveAlertRule(ctx context.Context, project uint32, r analysis.AlertRule) error
}

// burnRules reads and writes the burn rules of each SLO
// (analysis.StoredSettings).
type burnRules interface {
	BurnRules(ctx context.Context, project uint32) (analysis.SLOBurnRules, error)
	SaveBurnRules(ctx context.Context, project uint32, slo int64, rules []analysis.BurnRule) error
}

// slosFlash are the fixed notices a redirect to /slos can ask for.
var slosFlash = map[string]string{
	"slo-created":     "SLO added. Diagnoses of its service now judge against it.",
	"slo-deleted":     "SLO deleted, with its alert history.",
	"alerts-saved":    "Alert rule saved. SLOs are checked every minute.",
	"rules-saved":     "Burn rules saved. The SLO is checked against them every minute.",
	"objective-saved": "Objective saved. Diagnoses and episodes of the service are judged against it from now on.",
}

// recentAlerts is how many fired alerts the page lists.
const recentAlerts = 20

func (s *Server) slosPage(c echo.Context) error {
	v, err := s.slosView(c, views.SLOForm{Metric: postgres.SLOMetricTTFT, Percentile: "95", Window: "28d"})
	if err != nil {
		return err
	}
	v.Flash = slosFlash[c.QueryParam("done")]
	return render(c, http.StatusOK, views.SLOs(v))
}

func (s *Server) slosView(c echo.Context, form views.SLOForm) (views.SLOsView, error) {
	ctx := c.Request().Context()
	now := time.Now().UTC()
	project := projectOf(c)
	if s.deps.PG == nil {
		return views.SLOsView{}, echo.NewHTTPError(http.StatusServiceUnavailable, "SLOs need PostgreSQL, which is not configured")
	}
	v := views.SLOsView{Page: s.page(c, "SLOs and alerts", "slos"), Form: form,
		BurnRule: fmt.Sprintf("Every minute, each SLO's burn rate — the share of requests missing it over its error budget — is read over a long and a short window. "+
			"When both reach a rule's rate (by default the Google SRE multiwindow rule: %s×, 2 %% of a 30-day budget gone in an hour, over 1 h and 5 min; slower rules such as 6h/30m:6 can be set per SLO), "+
			"the webhook gets the verdict of the diagnosis and a link to a frozen copy of it; at most once per SLO every 30 minutes. "+
			"A rule never needs more than half of a window's requests to miss: for a p95 SLO (5 %% budget) the hour rule fires at 10×, when half the hour's requests miss it.",
			strconv.FormatFloat(analysis.FastBurn, 'f', -1, 64))}
	slos, err := s.deps.PG.ListSLOs(ctx, int64(project))
	if err != nil {
		return v, s.storeError(err)
	}
	var statuses []analysis.SLOStatus
	if q, ok := s.deps.Queries.(sloStatusQueries); ok && len(slos) > 0 {
		if statuses, err = q.SLOStatuses(ctx, project, slos, now); err != nil {
			return v, s.internal(err)
		}
	}
	perSLO := analysis.SLOBurnRules{}
	if br, ok := s.deps.Settings.(burnRules); ok {
		if perSLO, err = br.BurnRules(ctx, project); err != nil {
			return v, s.storeError(err)
		}
	}
	for i, slo := range slos {
		row := views.SLORow{ID: slo.ID, Scope: analysis.SLOScope(slo), Objective: analysis.DescribeSLO(slo), Window: slo.Window,
			Current: noValue, Requests: "0", Bad: "0", BudgetLeft: noValue, BurnLong: noValue, BurnShort: noValue,
			State: views.SLOCell{State: "none", Text: "not evaluated"}}
		row.DiagnoseHref = "/diagnose?" + diagnoseQuery(slo.Service, slo.Model)
		if i < len(statuses) {
			fillSLORow(&row, statuses[i])
		}
		rules := perSLO.For(slo.ID)
		if _, custom := perSLO[slo.ID]; custom {
			row.RulesText = analysis.FormatBurnRules(rules)
		}
		for _, r := range rules {
			row.Rules = append(row.Rules, "Fires "+r.Describe(analysis.SLOBudget(slo.Percentile))+".")
		}
		v.SLOs = append(v.SLOs, row)
	}
	services, err := s.deps.Queries.Services(ctx, project, now.Add(-sloScopeLookback))
	if err != nil {
		s.deps.Log.Error("slos: list services", "err", err)
	}
	models := map[string]bool{}
	for _, svc := range services {
		v.Form.Services = append(v.Form.Services, svc.Service)
		for _, m := range svc.Models {
			models[m] = true
		}
	}
	v.Form.Models = sortedKeys(models)
	if rules, ok := s.deps.Settings.(alertRules); ok {
		r, err := rules.AlertRule(ctx, project)
		if err != nil {
			return v, s.storeError(err)
		}
		v.Alert = views.AlertForm{WebhookURL: r.WebhookURL, Enabled: r.Enabled, Episodes: r.Episodes}
	}
	v.Objectives = s.objectivesView(ctx, project, v.Form.Services)
	fired, err := s.deps.PG.ListSLOAlerts(ctx, int64(project), recentAlerts)
	if err != nil {
		return v, s.storeError(err)
	}
	byID := map[int64]postgres.SLO{}
	for _, slo := range slos {
		byID[slo.ID] = slo
	}
	for _, a := range fired {
		slo := byID[a.SLOID]
		v.Alerts = append(v.Alerts, views.AlertRow{Time: humanTime(a.FiredAt, now) + " · " + humanAgo(a.FiredAt, now),
			Scope: analysis.SLOScope(slo), Objective: analysis.DescribeSLO(slo),
			Burn:    diagnose.FormatRatio(a.BurnLong) + " / " + diagnose.FormatRatio(a.BurnShort),
			Verdict: a.Verdict, Summary: a.Summary, Link: a.ShareURL, Delivered: a.Delivered, Error: a.Error})
	}
	episodeAlerts, err := s.deps.PG.ListEpisodeAlerts(ctx, int64(project), recentAlerts)
	if err != nil {
		return v, s.storeError(err)
	}
	for _, a := range episodeAlerts {
		v.EpisodeAlerts = append(v.EpisodeAlerts, views.AlertRow{Time: humanTime(a.FiredAt, now) + " · " + humanAgo(a.FiredAt, now),
			Scope: a.Service, Objective: "episode since " + a.EpisodeStart.UTC().Format("15:04"),
			Verdict: a.Verdict, Summary: a.Summary, Link: a.ShareURL, Delivered: a.Delivered, Error: a.Error})
	}
	return v, nil
}

// saveSLORules sets one SLO's burn rules from the form ("1h/5m:14.4,
// 6h/30m:6"; empty: back to the default), or shows what is wrong beside
// them.
func (s *Server) saveSLORules(c echo.Context) error {
	br, ok := s.deps.Settings.(burnRules)
	if !ok || s.deps.PG == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "burn rules need PostgreSQL, which is not configured")
	}
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such SLO")
	}
	ctx := c.Request().Context()
	slos, err := s.deps.PG.ListSLOs(ctx, int64(projectOf(c)))
	if err != nil {
		return s.storeError(err)
	}
	if !slices.ContainsFunc(slos, func(x postgres.SLO) bool { return x.ID == id }) {
		return echo.NewHTTPError(http.StatusNotFound, "There is no such SLO in this project.")
	}
	text := strings.TrimSpace(c.FormValue("rules"))
	rules, perr := analysis.ParseBurnRules(text)
	if perr == nil {
		if text == "" {
			rules = nil
		}
		if err := br.SaveBurnRules(ctx, projectOf(c), id, rules); err != nil {
			return s.storeError(err)
		}
		return c.Redirect(http.StatusSeeOther, "/slos?done=rules-saved")
	}
	v, err := s.slosView(c, views.SLOForm{Metric: postgres.SLOMetricTTFT, Percentile: "95", Window: "28d"})
	if err != nil {
		return err
	}
	for i := range v.SLOs {
		if v.SLOs[i].ID == id {
			v.SLOs[i].RulesText, v.SLOs[i].RulesError = text, capitalize(perr.Error())+"."
		}
	}
	return render(c, http.StatusUnprocessableEntity, views.SLOs(v))
}

func diagnoseQuery(service, model string) string {
	q := url.Values{"last": {"1h"}}
	if service != "" {
		q.Set("service", service)
	}
	if model != "" {
		q.Set("model", model)
	}
	return q.Encode()
}

func fillSLORow(row *views.SLORow, st analysis.SLOStatus) {
	row.Requests, row.Bad = humanInt(int64(st.Requests)), humanInt(int64(st.Bad))
	if st.Current != nil {
		row.Current = analysis.FormatSLOValue(st.SLO, *st.Current)
	}
	if st.BudgetLeft != nil {
		left := *st.BudgetLeft
		row.BudgetLow = left < 0.25
		if left <= 0 {
			row.BudgetLeft = "spent"
		} else {
			row.BudgetLeft = humanPct(left)
		}
	}
	if st.BurnLong != nil {
		row.BurnLong = diagnose.FormatRatio(*st.BurnLong)
	}
	if st.BurnShort != nil {
		row.BurnShort = diagnose.FormatRatio(*st.BurnShort)
	}
	row.FastBurn = st.FastBurn
	switch {
	case st.Requests == 0:
		row.State = views.SLOCell{State: "none", Text: "no data in the window"}
	case st.FastBurn:
		row.State = views.SLOCell{State: "burning", Text: "burning fast", Title: "both burn rates ≥ " + strconv.FormatFloat(analysis.FastBurn, 'f', -1, 64) + "×"}
	case !st.Met:
		row.State = views.SLOCell{State: "violated", Text: "violated"}
	default:
		row.State = views.SLOCell{State: "met", Text: "met"}
	}
}

// createSLO validates and saves a new SLO; a TPOT target in tok/s is
// stored as its time per token.
func (s *Server) createSLO(c echo.Context) error {
	form := views.SLOForm{Service: strings.TrimSpace(c.FormValue("service")), Model: strings.TrimSpace(c.FormValue("model")),
		Metric: c.FormValue("metric"), Percentile: strings.TrimSpace(c.FormValue("percentile")),
		Threshold: strings.TrimSpace(c.FormValue("threshold")), Window: strings.TrimSpace(c.FormValue("window"))}
	slo, problem, field := parseSLOForm(form)
	if problem == "" {
		problem, field = s.checkSLOScope(c, form)
	}
	if problem == "" {
		slo.ProjectID = int64(projectOf(c))
		if s.deps.PG == nil {
			return echo.NewHTTPError(http.StatusServiceUnavailable, "SLOs need PostgreSQL, which is not configured")
		}
		if _, err := s.deps.PG.CreateSLO(c.Request().Context(), slo); err != nil {
			return s.storeError(err)
		}
		return c.Redirect(http.StatusSeeOther, "/slos?done=slo-created")
	}
	form.Error, form.ErrorField = problem, field
	v, err := s.slosView(c, form)
	if err != nil {
		return err
	}
	return render(c, http.StatusUnprocessableEntity, views.SLOs(v))
}

// parseSLOForm turns the form into an SLO, or says what is wrong with it
// and in which field.
func parseSLOForm(f views.SLOForm) (postgres.SLO, string, string) {
	slo := postgres.SLO{Service: f.Service, Model: f.Model, Metric: f.Metric, Window: f.Window}
	if len([]rune(f.Service)) > maxNameLen || len([]rune(f.Model)) > maxNameLen*2 {
		return slo, "The service or model name is too long.", "service"
	}
	switch f.Metric {
	case postgres.SLOMetricTTFT, postgres.SLOMetricTPOT, postgres.SLOMetricE2E:
	default:
		return slo, "Pick a metric: TTFT, TPOT or E2E.", "metric"
	}
	p, err := strconv.ParseFloat(f.Percentile, 64)
	if err != nil || p < 50 || p >= 100 {
		return slo, "The percentile must be at least 50 and below 100 (e.g. 95 or 99.9).", "percentile"
	}
	slo.Percentile = p
	x, err := strconv.ParseFloat(f.Threshold, 64)
	if err != nil || x <= 0 || x > 1e9 {
		if f.Metric == postgres.SLOMetricTPOT {
			return slo, "The TPOT target must be a positive number of tokens per second, e.g. 30.", "threshold"
		}
		return slo, "The threshold must be a positive number of milliseconds, e.g. 800.", "threshold"
	}
	slo.ThresholdMs = x
	if f.Metric == postgres.SLOMetricTPOT {
		slo.ThresholdMs = 1000 / x
	}
	d, err := analysis.ParseSLOWindow(f.Window)
	if err != nil || d > analysis.MaxWindow {
		return slo, "The window must be a duration like 1h, 7d or 28d, at most 31 days.", "window"
	}
	return slo, "", ""
}

// checkSLOScope refuses an SLO for a service or model that has sent no LLM
// request in the last week: a typo would otherwise make an SLO that is never
// evaluated and never alerts.
func (s *Server) checkSLOScope(c echo.Context, f views.SLOForm) (problem, field string) {
	if f.Service == "" && f.Model == "" {
		return "", ""
	}
	services, err := s.deps.Queries.Services(c.Request().Context(), projectOf(c), time.Now().UTC().Add(-sloScopeLookback))
	if err != nil {
		s.deps.Log.Error("slos: list services", "err", err)
		return "", "" // the store is busy: take the SLO rather than refuse a valid one
	}
	var models []string
	knownService := false
	for _, svc := range services {
		if f.Service == "" || svc.Service == f.Service {
			knownService = knownService || svc.Service == f.Service
			models = append(models, svc.Models...)
		}
	}
	if f.Service != "" && !knownService {
		return fmt.Sprintf("No service named %q has sent LLM requests in the last 7 days; pick one from the list.", f.Service), "service"
	}
	if f.Model != "" && !slices.Contains(models, f.Model) {
		where := "any service"
		if f.Service != "" {
			where = f.Service
		}
		return fmt.Sprintf("%s has sent no requests for a model named %q in the last 7 days; pick one from the list.", where, f.Model), "model"
	}
	return "", ""
}

// sloScopeLookback is how far back a service or model must have been seen
// for an SLO to name it (the form's suggestions cover the same week).
const sloScopeLookback = 7 * 24 * time.Hour

func (s *Server) deleteSLO(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such SLO")
	}
	if s.deps.PG == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "SLOs need PostgreSQL, which is not configured")
	}
	if err := s.deps.PG.DeleteSLO(c.Request().Context(), int64(projectOf(c)), id); err != nil {
		if errors.Is(err, postgres.ErrNoSLO) {
			return echo.NewHTTPError(http.StatusNotFound, "There is no such SLO in this project.")
		}
		return s.storeError(err)
	}
	return c.Redirect(http.StatusSeeOther, "/slos?done=slo-deleted")
}

// saveAlertRule saves the webhook (action=save) or posts a test message
// to the URL in the form (action=test) without saving it.
func (s *Server) saveAlertRule(c echo.Context) error {
	rules, ok := s.deps.Settings.(alertRules)
	if !ok {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "alerts are not available in this build")
	}
	rule := analysis.AlertRule{WebhookURL: strings.TrimSpace(c.FormValue("webhook_url")), Enabled: c.FormValue("enabled") == "true",
		Episodes: c.FormValue("episodes") == "true"}
	problem, flash := "", ""
	switch {
	case rule.WebhookURL == "" && (rule.Enabled || c.FormValue("action") == "test"):
		problem = "Enter the webhook URL to post alerts to."
	case rule.WebhookURL != "":
		if err := analysis.ValidateWebhookURL(rule.WebhookURL); err != nil {
			problem = capitalize(err.Error()) + "."
		} else if err := s.deps.Outbound.CheckURL(c.Request().Context(), rule.WebhookURL); err != nil {
			problem = "Alerts cannot be posted there: the " + err.Error() + "."
		}
	}
	if problem == "" && c.FormValue("action") == "test" {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 10*time.Second)
		defer cancel()
		if err := alerts.PostWebhook(ctx, s.deps.Outbound.Client(0), rule.WebhookURL, alerts.TestMessage(s.deps.PublicURL)); err != nil {
			problem = "The test message did not go through: " + err.Error() + "."
		} else {
			flash = "Test message posted. Save the rule to keep it."
		}
	}
	if problem == "" && flash == "" {
		if err := rules.SaveAlertRule(c.Request().Context(), projectOf(c), rule); err != nil {
			return s.storeError(err)
		}
		return c.Redirect(http.StatusSeeOther, "/slos?done=alerts-saved#alerts")
	}
	v, err := s.slosView(c, views.SLOForm{Metric: postgres.SLOMetricTTFT, Percentile: "95", Window: "28d"})
	if err != nil {
		return err
	}
	v.Alert = views.AlertForm{WebhookURL: rule.WebhookURL, Enabled: rule.Enabled, Episodes: rule.Episodes, Error: problem}
	v.Flash = flash
	code := http.StatusOK
	if problem != "" {
		code = http.StatusUnprocessableEntity
	}
	return render(c, code, views.SLOs(v))
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// AlertShareFunc gives the SLO alert evaluator (alerts.AlertEvaluator)
// the share links of the web layer: it freezes a diagnosis path as a
// share of the project and returns the link.
func AlertShareFunc(d Deps) alerts.ShareFunc {
	s := &Server{deps: d}
	return s.createShare
}
