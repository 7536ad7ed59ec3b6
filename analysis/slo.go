package analysis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Burn-rate windows of the multiwindow alert (Google SRE workbook, "alert
// on burn rate"): page when both the long and the short window burn the
// error budget at least FastBurn times faster than allowed. 14.4 spends 2 %
// of a 30-day budget in one hour; the short window makes the alert stop
// soon after the burn does.
const (
	BurnLongWindow  = time.Hour
	BurnShortWindow = 5 * time.Minute
	FastBurn        = 14.4
)

// sloColumn is the llm_requests column each SLO metric reads; every one is
// "lower is better" (a TPOT objective is stored as time per token).
var sloColumn = map[string]string{
	postgres.SLOMetricTTFT: "ttft_ms",
	postgres.SLOMetricTPOT: "itl_ms",
	postgres.SLOMetricE2E:  "e2e_ms",
}

// SLOStatus is an SLO read against its window and the burn-rate windows.
type SLOStatus struct {
	SLO    postgres.SLO
	Window diagnose.Range
	// Requests with a value of the metric in the window, and how many of
	// them missed the threshold.
	Requests int
	Bad      int
	// Current is the metric at the SLO percentile over the window (ms);
	// nil without data.
	Current *float64
	Met     bool
	// Budget is the share of requests allowed to miss (1 − percentile).
	Budget float64
	// BudgetLeft is 1 − (bad share / budget): 1 untouched, ≤ 0 spent.
	BudgetLeft *float64
	// BurnLong and BurnShort are the bad share over the budget in the last
	// BurnLongWindow and BurnShortWindow; nil when no request fell there.
	BurnLong, BurnShort *float64
	// Rules are the SLO's burn-rate rules read at now; FastBurn: one of
	// them fires.
	Rules    []BurnStatus
	FastBurn bool
}

// ParseSLOWindow reads an SLO window such as "1h", "7d" or "28d".
func ParseSLOWindow(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 {
			return 0, fmt.Errorf("SLO window %q: want a number of days like 28d", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute {
		return 0, fmt.Errorf("SLO window %q: want a duration like 1h or 28d", s)
	}
	return d, nil
}

// SLOBudget is the share of requests an SLO lets miss: 5 % for p95.
func SLOBudget(percentile float64) float64 { return 1 - percentile/100 }

// SLOStatuses reads every SLO at now: one aggregate query each.
func (q *Queries) SLOStatuses(ctx context.Context, project uint32, slos []postgres.SLO, now time.Time) ([]SLOStatus, error) {
	out := make([]SLOStatus, 0, len(slos))
	for _, s := range slos {
		st, err := q.SLOStatus(ctx, project, s, now)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// SLOStatus reads one SLO at now against DefaultBurnRules.
func (q *Queries) SLOStatus(ctx context.Context, project uint32, s postgres.SLO, now time.Time) (SLOStatus, error) {
	return q.SLOStatusWith(ctx, project, s, now, DefaultBurnRules)
}

// SLOStatusWith reads one SLO at now against rules (one aggregate over the
// longest of its windows).
func (q *Queries) SLOStatusWith(ctx context.Context, project uint32, s postgres.SLO, now time.Time, rules []BurnRule) (SLOStatus, error) {
	col, ok := sloColumn[s.Metric]
	if !ok {
		return SLOStatus{}, fmt.Errorf("SLO %d: unknown metric %q", s.ID, s.Metric)
	}
	win, err := ParseSLOWindow(s.Window)
	if err != nil {
		return SLOStatus{}, err
	}
	win = min(win, MaxWindow)
	st := SLOStatus{SLO: s, Window: diagnose.Range{From: now.Add(-win), To: now}, Budget: SLOBudget(s.Percentile)}
	long, short := now.Add(-BurnLongWindow), now.Add(-BurnShortWindow)
	from := telemetry.MinTime(st.Window.From, long)
	for _, r := range rules {
		from = telemetry.MinTime(from, now.Add(-r.Long))
	}
	f := RequestFilter{Project: project, From: from, To: now, Service: s.Service, Model: s.Model}
	where, args := f.where()
	// The percentile level must be a literal; it is a float64 the store
	// validated, bound like any other argument.
	// Latency objectives read "p95 < 800 ms" (a request at the threshold
	// misses), a speed objective "≥ 30 tok/s" (one at the threshold meets
	// it), as the diagnosis judges them.
	bad := col + " >= ?"
	if s.Metric == postgres.SLOMetricTPOT {
		bad = col + " > ?"
	}
	sql := "SELECT countIf(start >= ?) AS n, countIf(start >= ? AND " + bad + ") AS bad, " +
		"quantileIf(?)(" + col + ", start >= ?) AS current, " +
		"countIf(start >= ?) AS n_long, countIf(start >= ? AND " + bad + ") AS bad_long, " +
		"countIf(start >= ?) AS n_short, countIf(start >= ? AND " + bad + ") AS bad_short"
	q0 := s.Percentile / 100
	params := []any{st.Window.From, st.Window.From, s.ThresholdMs, q0, st.Window.From,
		long, long, s.ThresholdMs, short, short, s.ThresholdMs}
	for i, r := range rules {
		for j, w := range []time.Duration{r.Long, r.Short} {
			sql += fmt.Sprintf(", countIf(start >= ?) AS n_rule%[1]d_%[2]d, countIf(start >= ? AND %[3]s) AS bad_rule%[1]d_%[2]d", i, j, bad)
			params = append(params, now.Add(-w), now.Add(-w), s.ThresholdMs)
		}
	}
	sql += " FROM llm_requests FINAL WHERE " + where + " AND " + col + " IS NOT NULL" + FinalSettings
	params = append(params, args...)
	res, err := q.CH.Query(ctx, sql, params...)
	if err != nil {
		return st, fmt.Errorf("SLO %d status: %w", s.ID, err)
	}
	if res.Len() == 0 {
		return st, nil
	}
	row := res.Row(0)
	st.Requests, st.Bad = int(row.Int("n")), int(row.Int("bad"))
	if st.Requests > 0 {
		st.Current = row.FloatPtr("current")
		left := 1 - (float64(st.Bad)/float64(st.Requests))/st.Budget
		st.BudgetLeft = &left
	}
	switch {
	case st.Current == nil:
		st.Met = true // no data is no violation; the page says "no data"
	case s.Metric == postgres.SLOMetricTPOT:
		st.Met = *st.Current <= s.ThresholdMs
	default:
		st.Met = *st.Current < s.ThresholdMs
	}
	st.BurnLong = burn(row, "n_long", "bad_long", st.Budget)
	st.BurnShort = burn(row, "n_short", "bad_short", st.Budget)
	for i, r := range rules {
		b := BurnStatus{Rule: r, Threshold: r.Threshold(st.Budget),
			BurnLong:  burn(row, fmt.Sprintf("n_rule%d_0", i), fmt.Sprintf("bad_rule%d_0", i), st.Budget),
			BurnShort: burn(row, fmt.Sprintf("n_rule%d_1", i), fmt.Sprintf("bad_rule%d_1", i), st.Budget)}
		b.Firing = b.BurnLong != nil && b.BurnShort != nil && *b.BurnLong >= b.Threshold && *b.BurnShort >= b.Threshold
		st.Rules = append(st.Rules, b)
		st.FastBurn = st.FastBurn || b.Firing
	}
	return st, nil
}

func burn(row clickhouse.Row, nCol, badCol string, budget float64) *float64 {
	n := row.Int(nCol)
	if n == 0 || budget <= 0 {
		return nil
	}
	b := float64(row.Int(badCol)) / float64(n) / budget
	return &b
}

// DescribeSLO states an objective as people write it: "TTFT p95 < 800 ms",
// "TPOT p95 ≥ 30 tok/s".
func DescribeSLO(s postgres.SLO) string {
	p := "p" + strconv.FormatFloat(s.Percentile, 'f', -1, 64)
	switch s.Metric {
	case postgres.SLOMetricTPOT:
		return "TPOT " + p + " ≥ " + diagnose.FormatCount(1000/s.ThresholdMs) + " tok/s"
	case postgres.SLOMetricE2E:
		return "E2E " + p + " < " + diagnose.FormatMs(s.ThresholdMs)
	}
	return "TTFT " + p + " < " + diagnose.FormatMs(s.ThresholdMs)
}

// SLOScope names what an SLO covers: "rag-chat · llama", "every service".
func SLOScope(s postgres.SLO) string {
	svc, model := s.Service, s.Model
	if svc == "" {
		svc = "every service"
	}
	if model == "" {
		return svc
	}
	return svc + " · " + model
}

// FormatSLOValue formats a metric value of the SLO's kind: TPOT as tok/s,
// latencies as ms or s.
func FormatSLOValue(s postgres.SLO, ms float64) string {
	if s.Metric == postgres.SLOMetricTPOT {
		if ms <= 0 {
			return "n/a"
		}
		return diagnose.FormatCount(1000/ms) + " tok/s"
	}
	return diagnose.FormatMs(ms)
}
