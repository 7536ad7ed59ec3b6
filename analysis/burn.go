package analysis

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// SettingBurnRules is the per-project document of SLO burn rules: SLO id
// → rules as ParseBurnRules reads them; an SLO without an entry uses
// DefaultBurnRules.
const SettingBurnRules = "burn_rules"

// SLOBurnRules are a project's burn rules per SLO id.
type SLOBurnRules map[int64][]BurnRule

// For is the rules of an SLO.
func (r SLOBurnRules) For(slo int64) []BurnRule {
	if rules, ok := r[slo]; ok && len(rules) > 0 {
		return rules
	}
	return DefaultBurnRules
}

// BurnRules reads the project's burn rules per SLO.
func (s *StoredSettings) BurnRules(ctx context.Context, project uint32) (SLOBurnRules, error) {
	saved := map[string]string{}
	if _, err := s.PG.Setting(ctx, int64(project), SettingBurnRules, &saved); err != nil {
		return nil, err
	}
	out := SLOBurnRules{}
	for k, v := range saved {
		id, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			continue
		}
		rules, err := ParseBurnRules(v)
		if err != nil {
			return nil, fmt.Errorf("SLO %d: %w", id, err)
		}
		out[id] = rules
	}
	return out, nil
}

// SaveBurnRules sets one SLO's burn rules (nil: back to the defaults).
func (s *StoredSettings) SaveBurnRules(ctx context.Context, project uint32, slo int64, rules []BurnRule) error {
	saved := map[string]string{}
	if _, err := s.PG.Setting(ctx, int64(project), SettingBurnRules, &saved); err != nil {
		return err
	}
	if len(rules) == 0 {
		delete(saved, strconv.FormatInt(slo, 10))
	} else {
		saved[strconv.FormatInt(slo, 10)] = FormatBurnRules(rules)
	}
	return s.PG.PutSetting(ctx, int64(project), SettingBurnRules, saved)
}

// BurnRule is one multiwindow burn-rate alert (Google SRE workbook,
// "Alerting on SLOs", multiwindow multi-burn-rate): it fires when both the
// long and the short window burn the error budget at least Burn times
// faster than allowed.
type BurnRule struct {
	Long, Short time.Duration
	Burn        float64
}

// DefaultBurnRules are the workbook's fast paging rule: 2 % of a 30-day
// budget spent in an hour. Its slower rules (6h/30m:6, 1d/2h:3) are set
// per SLO (SettingBurnRules).
var DefaultBurnRules = []BurnRule{
	{Long: BurnLongWindow, Short: BurnShortWindow, Burn: FastBurn},
}

// MaxBadShare caps what a rule may ask: a burn threshold never needs more
// than half of a window's requests to miss. The workbook's 14.4× assumes
// a 99.9 % objective; against a p95 latency SLO (5 % budget) it needs 72 %
// of an hour's requests slow, which a queueing incident that slows half the
// traffic never reaches (TestBurnRuleFiresForP95SLO).
const MaxBadShare = 0.5

// Threshold is the burn rate the rule fires at for an SLO with budget
// (the share of requests allowed to miss): Burn, capped so that it needs
// at most MaxBadShare of the window's requests bad.
func (r BurnRule) Threshold(budget float64) float64 {
	if budget <= 0 {
		return r.Burn
	}
	// Rounded: 1 − 0.95 is not exactly 0.05 in floating point.
	return min(r.Burn, math.Round(MaxBadShare/budget*1e6)/1e6)
}

// String writes the rule as the settings page shows it: "1h/5m ≥ 14.4×".
func (r BurnRule) String() string {
	return shortDuration(r.Long) + "/" + shortDuration(r.Short) + " ≥ " + diagnose.FormatRatio(r.Burn)
}

// Describe says when the rule fires for an SLO with budget: "when over
// 1 h and over 5 min at least 50 % of requests miss (burn 10×, capped
// from 14.4×)".
func (r BurnRule) Describe(budget float64) string {
	t := r.Threshold(budget)
	s := fmt.Sprintf("when over %s and over %s at least %s of requests miss it (burn %s",
		humanWindow(r.Long), humanWindow(r.Short), diagnose.FormatPct(t*budget), diagnose.FormatRatio(t))
	if t < r.Burn {
		s += ", capped from " + diagnose.FormatRatio(r.Burn)
	}
	return s + ")"
}

// ParseBurnRules reads rules written as "1h/5m:14.4, 6h/30m:6"; empty
// gives DefaultBurnRules.
func ParseBurnRules(s string) ([]BurnRule, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultBurnRules, nil
	}
	var out []BurnRule
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		windows, burn, ok := strings.Cut(part, ":")
		long, short, ok2 := strings.Cut(windows, "/")
		var r BurnRule
		var err1, err2 error
		// ParseSLOWindow reads days too: FormatBurnRules writes 24h as 1d.
		r.Long, err1 = ParseSLOWindow(long)
		r.Short, err2 = ParseSLOWindow(short)
		_, err3 := fmt.Sscanf(burn, "%g", &r.Burn)
		if !ok || !ok2 || err1 != nil || err2 != nil || err3 != nil || r.Burn <= 0 || r.Short <= 0 || r.Short >= r.Long || r.Long > 7*24*time.Hour {
			return nil, fmt.Errorf("burn rule %q: want long/short:burn like 1h/5m:14.4 (short shorter than long, at most 7 days)", part)
		}
		out = append(out, r)
	}
	return out, nil
}

// FormatBurnRules writes rules as ParseBurnRules reads them.
func FormatBurnRules(rules []BurnRule) string {
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = fmt.Sprintf("%s/%s:%g", shortDuration(r.Long), shortDuration(r.Short), r.Burn)
	}
	return strings.Join(parts, ", ")
}

// BurnStatus is one rule read at a moment.
type BurnStatus struct {
	Rule      BurnRule
	Threshold float64
	// BurnLong and BurnShort are nil when no request fell in the window.
	BurnLong, BurnShort *float64
	Firing              bool
}

func shortDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

func humanWindow(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0 && d >= 48*time.Hour:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return fmt.Sprintf("%d min", d/time.Minute)
}
