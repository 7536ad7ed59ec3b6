package analysis

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// Keys of the per-project documents in the settings table.
const (
	SettingPrices = "prices" // map model → diagnose.Price
	SettingAlerts = "alerts" // AlertRule
)

// AlertRule is where a project's SLO alerts go: a Slack-compatible
// incoming webhook. Episodes also posts when an episode of a service
// starts, with its frozen diagnosis.
type AlertRule struct {
	WebhookURL string `json:"webhook_url"`
	Enabled    bool   `json:"enabled"`
	Episodes   bool   `json:"episodes"`
}

// ValidateWebhookURL accepts absolute http(s) URLs only.
func ValidateWebhookURL(raw string) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("the webhook URL must be an absolute http:// or https:// URL (e.g. https://hooks.slack.com/services/…)")
	}
	return nil
}

// StoredSettings reads and writes the SLOs, prices and alert rule saved in
// PostgreSQL. It implements the web layer's Settings.
type StoredSettings struct {
	PG  *postgres.Store
	Log *slog.Logger
	// Pairs, when set, says which inference servers served exactly one
	// app's requests (Queries.PairedApps): GuardDiagnosis diagnoses such a
	// server's window as that app, once, with the app's SLO.
	Pairs *Queries
}

// Prices returns the project's price table (model → $ per 1M tokens).
func (s *StoredSettings) Prices(ctx context.Context, project uint32) (map[string]diagnose.Price, error) {
	prices := map[string]diagnose.Price{}
	if _, err := s.PG.Setting(ctx, int64(project), SettingPrices, &prices); err != nil {
		return nil, err
	}
	return prices, nil
}

// SavePrices replaces the project's price table.
func (s *StoredSettings) SavePrices(ctx context.Context, project uint32, prices map[string]diagnose.Price) error {
	return s.PG.PutSetting(ctx, int64(project), SettingPrices, prices)
}

// AlertRule returns the project's alert rule (zero when never saved).
func (s *StoredSettings) AlertRule(ctx context.Context, project uint32) (AlertRule, error) {
	var r AlertRule
	_, err := s.PG.Setting(ctx, int64(project), SettingAlerts, &r)
	return r, err
}

// SaveAlertRule replaces the project's alert rule.
func (s *StoredSettings) SaveAlertRule(ctx context.Context, project uint32, r AlertRule) error {
	return s.PG.PutSetting(ctx, int64(project), SettingAlerts, r)
}

// SLOAndPrices returns the SLO a diagnosis of service and model is judged
// against, and the price table. Stored errors are logged, not returned: a
// diagnosis without SLO or prices still answers the main question.
func (s *StoredSettings) SLOAndPrices(ctx context.Context, project uint32, service, model string) (*diagnose.SLO, map[string]diagnose.Price) {
	prices, err := s.Prices(ctx, project)
	if err != nil {
		s.logError("read prices", err)
	}
	slos, err := s.PG.ListSLOs(ctx, int64(project))
	if err != nil {
		s.logError("read SLOs", err)
		return nil, prices
	}
	return DiagnosisSLO(slos, service, model), prices
}

func (s *StoredSettings) logError(msg string, err error) {
	if s.Log != nil {
		s.Log.Error(msg, "err", err)
	}
}

// DiagnosisSLO folds stored SLOs into the one objective a diagnosis of
// service and model reads: the most specific TTFT and TPOT objectives
// (exact service over "every service", exact model over "every model").
// A diagnosis reads both at one percentile, the TTFT objective's when
// there is one. E2E objectives have no place in it. Nil when none apply.
func DiagnosisSLO(slos []postgres.SLO, service, model string) *diagnose.SLO {
	best := map[string]*postgres.SLO{}
	rank := map[string]int{}
	for i := range slos {
		s := &slos[i]
		r, ok := sloMatch(s, service, model)
		if !ok || s.Metric == postgres.SLOMetricE2E {
			continue
		}
		if cur, seen := rank[s.Metric]; !seen || r > cur {
			best[s.Metric], rank[s.Metric] = s, r
		}
	}
	ttft, tpot := best[postgres.SLOMetricTTFT], best[postgres.SLOMetricTPOT]
	if ttft == nil && tpot == nil {
		return nil
	}
	out := &diagnose.SLO{}
	if tpot != nil {
		out.Percentile = tpot.Percentile
		out.TPOT = 1000 / tpot.ThresholdMs
	}
	if ttft != nil {
		out.Percentile = ttft.Percentile
		out.TTFTMs = ttft.ThresholdMs
	}
	return out
}

// sloMatch says whether an SLO covers service and model, and how
// specifically (higher is more specific).
func sloMatch(s *postgres.SLO, service, model string) (int, bool) {
	r := 0
	switch s.Service {
	case "":
	case service:
		r += 2
	default:
		return 0, false
	}
	switch s.Model {
	case "":
	case model:
		r++
	default:
		return 0, false
	}
	return r, true
}
