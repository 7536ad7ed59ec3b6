package analysis_test

import (
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/store/postgres"
)

func TestParseSLOWindow(t *testing.T) {
	for in, want := range map[string]time.Duration{"1h": time.Hour, "28d": 28 * 24 * time.Hour, "90m": 90 * time.Minute, " 7d ": 7 * 24 * time.Hour} {
		if got, err := analysis.ParseSLOWindow(in); err != nil || got != want {
			t.Errorf("ParseSLOWindow(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "-1h", "30s", "week", "d"} {
		if _, err := analysis.ParseSLOWindow(bad); err == nil {
			t.Errorf("ParseSLOWindow(%q) accepted", bad)
		}
	}
}

func TestDescribeSLO(t *testing.T) {
	for _, tc := range []struct {
		slo         postgres.SLO
		text, scope string
	}{
		{postgres.SLO{Service: "chat", Metric: "ttft", Percentile: 95, ThresholdMs: 800}, "TTFT p95 < 800 ms", "chat"},
		{postgres.SLO{Model: "llama", Metric: "tpot", Percentile: 99.9, ThresholdMs: 1000.0 / 30}, "TPOT p99.9 ≥ 30 tok/s", "every service · llama"},
		{postgres.SLO{Service: "a", Model: "m", Metric: "e2e", Percentile: 90, ThresholdMs: 12500}, "E2E p90 < 12.5 s", "a · m"},
	} {
		if got := analysis.DescribeSLO(tc.slo); got != tc.text {
			t.Errorf("DescribeSLO = %q, want %q", got, tc.text)
		}
		if got := analysis.SLOScope(tc.slo); got != tc.scope {
			t.Errorf("SLOScope = %q, want %q", got, tc.scope)
		}
	}
}
