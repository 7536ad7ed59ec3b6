package analysis_test

import (
	"strings"
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

// The Slack blocks escape mrkdwn, so a summary cannot forge a link; the
// plain text keeps the sentence as it is.
func TestAlertMessage(t *testing.T) {
	burn := 20.0
	st := analysis.SLOStatus{SLO: postgres.SLO{Service: "chat", Metric: "ttft", Percentile: 95, ThresholdMs: 500, Window: "1d"},
		BurnLong: &burn, BurnShort: &burn, Current: &burn}
	a := postgres.SLOAlert{Verdict: "queueing", Confidence: 0.8, Summary: "Queue <grew> & KV full", ShareURL: "https://tp.example/s/abc"}
	m := analysis.AlertMessage(st, a)
	for _, want := range []string{"SLO burning fast: chat — TTFT p95 < 500 ms", "20×", "Queueing (confidence 80 %): Queue <grew> & KV full", "https://tp.example/s/abc"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("text lacks %q:\n%s", want, m.Text)
		}
	}
	verdict := m.Blocks[2]["text"].(map[string]any)["text"].(string)
	if verdict != "*Queueing* — Queue &lt;grew&gt; &amp; KV full" {
		t.Errorf("verdict block %q is not mrkdwn-escaped", verdict)
	}
}
