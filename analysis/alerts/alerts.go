// Package alerts evaluates the SLOs of projects with an alert rule and
// posts a Slack-compatible webhook, with the diagnosis, when one burns its
// error budget fast. The SLO reads and burn rules are analysis's.
package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/outbound"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// ShareFunc freezes the page at path (e.g. a diagnosis URL) as a share
// link of the project and returns its absolute URL.
type ShareFunc func(ctx context.Context, project uint32, path string) (string, error)

// AlertEvaluator checks every SLO of the projects with an alert rule once
// per Interval and posts a Slack-compatible webhook when one burns its
// error budget fast (multiwindow: BurnLongWindow and BurnShortWindow both
// at ≥ FastBurn), with the diagnosis verdict and a link to the frozen
// diagnosis. An SLO is posted at most once per Dedupe.
type AlertEvaluator struct {
	Queries  *analysis.Queries
	PG       *postgres.Store
	Settings *analysis.StoredSettings
	// Share freezes the diagnosis; nil (or a failure) links the live
	// diagnosis page under PublicURL instead.
	Share     ShareFunc
	PublicURL string
	Client    *http.Client
	Log       *slog.Logger
	Interval  time.Duration // default 1 min
	Dedupe    time.Duration // default 30 min
	Now       func() time.Time

	// once fills the defaults a single time: Run's loop and a direct
	// Evaluate (tests, an operator's trigger) may start together.
	once sync.Once
}

func (e *AlertEvaluator) defaults() { e.once.Do(e.fillDefaults) }

func (e *AlertEvaluator) fillDefaults() {
	if e.Interval <= 0 {
		e.Interval = time.Minute
	}
	if e.Dedupe <= 0 {
		e.Dedupe = 30 * time.Minute
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.Client == nil {
		e.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
	if e.Settings == nil {
		e.Settings = &analysis.StoredSettings{PG: e.PG, Log: e.Log}
	}
}

// Run evaluates until ctx is done; one node of a cluster at a time.
func (e *AlertEvaluator) Run(ctx context.Context) {
	e.defaults()
	e.PG.RunLocked(ctx, postgres.LockAlerts, e.Interval, e.Log, "evaluating SLO alerts",
		func(ctx context.Context) (bool, error) {
			_, err := e.Evaluate(ctx)
			return false, err
		})
}

// Evaluate runs one pass over every project with an enabled alert rule and
// returns how many alerts reached their webhook. A failing project or
// webhook does not stop the others; the first error is returned.
func (e *AlertEvaluator) Evaluate(ctx context.Context) (int, error) {
	e.defaults()
	projects, err := e.PG.ProjectsWithSetting(ctx, analysis.SettingAlerts)
	if err != nil {
		return 0, err
	}
	posted := 0
	var first error
	for _, p := range projects {
		n, err := e.evaluateProject(ctx, uint32(p))
		posted += n
		if err != nil {
			e.Log.Error("SLO alerts", "project", p, "err", err)
			if first == nil {
				first = err
			}
		}
	}
	return posted, first
}

func (e *AlertEvaluator) evaluateProject(ctx context.Context, project uint32) (int, error) {
	rule, err := e.Settings.AlertRule(ctx, project)
	if err != nil || !rule.Enabled || rule.WebhookURL == "" {
		return 0, err
	}
	slos, err := e.PG.ListSLOs(ctx, int64(project))
	if err != nil {
		return 0, err
	}
	rules, err := e.Settings.BurnRules(ctx, project)
	if err != nil {
		return 0, err
	}
	now := e.Now()
	posted := 0
	if rule.Episodes {
		n, err := e.evaluateEpisodes(ctx, project, rule, now)
		posted += n
		if err != nil {
			e.Log.Error("episode alerts", "project", project, "err", err)
		}
	}
	for _, s := range slos {
		st, err := e.Queries.SLOStatusWith(ctx, project, s, now, rules.For(s.ID))
		if err != nil {
			return posted, err
		}
		if !st.FastBurn {
			continue
		}
		last, ok, err := e.PG.LastSLOAlert(ctx, s.ID)
		if err != nil {
			return posted, err
		}
		var delivered bool
		switch {
		case ok && now.Sub(last.FiredAt) < e.Dedupe && last.Delivered:
			continue // posted recently
		case ok && now.Sub(last.FiredAt) < e.Dedupe:
			// The post failed: try again with the same frozen diagnosis.
			delivered, err = e.retry(ctx, rule, st, last)
		default:
			delivered, err = e.fire(ctx, project, rule, st, now)
		}
		if delivered {
			posted++
		}
		if err != nil {
			return posted, err
		}
	}
	return posted, nil
}

// fire diagnoses the burning SLO's last hour, freezes the diagnosis, posts
// the message and records the attempt.
func (e *AlertEvaluator) fire(ctx context.Context, project uint32, rule analysis.AlertRule, st analysis.SLOStatus, now time.Time) (bool, error) {
	s := st.SLO
	window := diagnose.Range{From: now.Add(-analysis.BurnLongWindow), To: now}
	slo, prices := e.Settings.SLOAndPrices(ctx, project, s.Service, s.Model)
	req := analysis.DiagnoseRequest{Project: project, Window: window, Service: s.Service, Model: s.Model, SLO: slo, Prices: prices}
	guard := e.Settings.GuardDiagnosis(ctx, &req)
	d, err := e.Queries.Diagnose(ctx, req)
	if err != nil {
		return false, fmt.Errorf("diagnose burning SLO %d: %w", s.ID, err)
	}
	guard.Explain(&d)
	link := e.link(ctx, project, DiagnosisPath(s.Service, s.Model, window))
	a := postgres.SLOAlert{ProjectID: int64(project), SLOID: s.ID, FiredAt: now, BurnLong: val(st.BurnLong), BurnShort: val(st.BurnShort),
		Verdict: string(d.Verdict), Confidence: d.Confidence, Summary: d.Summary, ShareURL: link}
	a.Delivered, a.Error = e.post(ctx, rule, AlertMessage(st, a))
	if _, err := e.PG.RecordSLOAlert(ctx, a); err != nil {
		return a.Delivered, err
	}
	return e.outcome(a)
}

// retry posts an alert whose delivery failed again.
func (e *AlertEvaluator) retry(ctx context.Context, rule analysis.AlertRule, st analysis.SLOStatus, a postgres.SLOAlert) (bool, error) {
	a.BurnLong, a.BurnShort = val(st.BurnLong), val(st.BurnShort)
	a.Delivered, a.Error = e.post(ctx, rule, AlertMessage(st, a))
	if err := e.PG.UpdateSLOAlertDelivery(ctx, a); err != nil {
		return a.Delivered, err
	}
	return e.outcome(a)
}

func (e *AlertEvaluator) post(ctx context.Context, rule analysis.AlertRule, msg WebhookMessage) (bool, string) {
	if err := PostWebhook(ctx, e.Client, rule.WebhookURL, msg); err != nil {
		return false, err.Error()
	}
	return true, ""
}

func (e *AlertEvaluator) outcome(a postgres.SLOAlert) (bool, error) {
	if !a.Delivered {
		return false, fmt.Errorf("SLO %d alert: %s", a.SLOID, a.Error)
	}
	e.Log.Info("SLO alert posted", "slo", a.SLOID, "burn_long", a.BurnLong, "verdict", a.Verdict)
	return true, nil
}

func val(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// DiagnosisPath is the diagnosis page of service and model over window,
// with absolute times so the link means the same thing tomorrow.
func DiagnosisPath(service, model string, window diagnose.Range) string {
	v := url.Values{}
	if service != "" {
		v.Set("service", service)
	}
	if model != "" {
		v.Set("model", model)
	}
	v.Set("from", window.From.UTC().Format(time.RFC3339))
	v.Set("to", window.To.UTC().Format(time.RFC3339))
	return "/diagnose?" + v.Encode()
}

// WebhookMessage is a Slack incoming-webhook body; "text" alone is what
// Mattermost, Discord's /slack endpoint and most chat tools read.
type WebhookMessage struct {
	Text   string           `json:"text"`
	Blocks []map[string]any `json:"blocks,omitempty"`
}

// AlertMessage writes the fast-burn message: which SLO, how fast, the
// verdict sentence of the alert's diagnosis, and the link to it.
func AlertMessage(st analysis.SLOStatus, a postgres.SLOAlert) WebhookMessage {
	link := a.ShareURL
	s := st.SLO
	headline := fmt.Sprintf("SLO burning fast: %s — %s", analysis.SLOScope(s), analysis.DescribeSLO(s))
	burn := fmt.Sprintf("Error budget burning %s faster than allowed over the last hour (%s over the last 5 minutes).",
		diagnose.FormatRatio(val(st.BurnLong)), diagnose.FormatRatio(val(st.BurnShort)))
	for _, r := range st.Rules {
		if r.Firing {
			burn = fmt.Sprintf("Error budget burning %s faster than allowed over the last %s (%s over the last %s; the rule fires at %s).",
				diagnose.FormatRatio(val(r.BurnLong)), windowWords(r.Rule.Long), diagnose.FormatRatio(val(r.BurnShort)), windowWords(r.Rule.Short),
				diagnose.FormatRatio(r.Threshold))
			break
		}
	}
	if st.Current != nil {
		burn += fmt.Sprintf(" Current %s over %s: %s.", metricLabel(s), s.Window, analysis.FormatSLOValue(s, *st.Current))
	}
	verdict := fmt.Sprintf("%s (confidence %s): %s", verdictLabel(diagnose.Verdict(a.Verdict)), diagnose.FormatPct(a.Confidence), a.Summary)
	text := headline + "\n" + burn + "\n" + verdict + "\nDiagnosis: " + link
	return WebhookMessage{
		Text: text,
		Blocks: []map[string]any{
			{"type": "header", "text": map[string]any{"type": "plain_text", "text": truncate(headline, 150)}},
			{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": slackEscape(burn)}},
			{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "*" + slackEscape(verdictLabel(diagnose.Verdict(a.Verdict))) + "* — " + slackEscape(a.Summary)}},
			{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "<" + link + "|Open the frozen diagnosis>"}},
		},
	}
}

// TestMessage is what "send a test message" posts.
func TestMessage(publicURL string) WebhookMessage {
	text := "Tokenpath test message: SLO alerts of this project will be posted here. " + strings.TrimRight(publicURL, "/") + "/slos"
	return WebhookMessage{Text: text, Blocks: []map[string]any{
		{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": slackEscape(text)}},
	}}
}

// PostWebhook posts msg as JSON; any non-2xx answer is an error naming the
// status class only. The error is stored and shown, so it echoes neither
// the reply nor the network error (which names hosts and ports): a
// webhook URL must not be a way to read or map internal services.
func PostWebhook(ctx context.Context, client *http.Client, webhookURL string, msg WebhookMessage) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode webhook message: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tokenpath-alerts")
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return errors.New("the webhook did not answer in time")
		}
		if errors.Is(err, outbound.ErrNotAllowed) {
			return errors.New("the webhook's host is not on the outbound allow-list (TOKENPATH_OUTBOUND_ALLOW)")
		}
		return errors.New("cannot reach the webhook")
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("webhook answered HTTP %dxx", resp.StatusCode/100)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

func metricLabel(s postgres.SLO) string {
	p := "p" + fmt.Sprint(s.Percentile)
	switch s.Metric {
	case postgres.SLOMetricTPOT:
		return "TPOT " + p
	case postgres.SLOMetricE2E:
		return "E2E " + p
	}
	return "TTFT " + p
}

// verdictLabel names a verdict in words, as the pages do.
func verdictLabel(v diagnose.Verdict) string {
	if l := v.Label(); l != "" {
		return l
	}
	return "No verdict"
}

// slackEscape escapes the three characters Slack's mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// windowWords names a window in a sentence: "hour", "6 hours", "5 minutes".
func windowWords(d time.Duration) string {
	switch {
	case d == time.Hour:
		return "hour"
	case d == 24*time.Hour:
		return "day"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d hours", d/time.Hour)
	}
	return fmt.Sprintf("%d minutes", d/time.Minute)
}
