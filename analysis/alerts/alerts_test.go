package alerts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/analysistest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/store/storetest"
)

// A p95 TTFT SLO (5 % budget) during a queueing incident that has slowed
// 35 of the last 60 minutes: the workbook's 14.4× needs 72 % of the hour
// slow and stays silent; capped at 10× the rule fires and the webhook gets
// the diagnosis.
func TestBurnRuleFiresForP95SLO(t *testing.T) {
	a := storetest.Open(t)
	ctx := context.Background()
	project, err := a.PG.EnsureProject(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(analysistest.ChatRequests(5, start, 300, analysistest.QueueIncident{From: 265, To: 400}), nil, 1)); err != nil {
		t.Fatal(err)
	}
	now := start.Add(300 * time.Minute)
	slo, err := a.PG.CreateSLO(ctx, postgres.SLO{ProjectID: project, Service: "chat", Metric: postgres.SLOMetricTTFT, Percentile: 95, ThresholdMs: 1000, Window: "1d"})
	if err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: a.CH}
	uncapped, err := q.SLOStatusWith(ctx, 1, slo, now, []analysis.BurnRule{{Long: time.Hour, Short: 5 * time.Minute, Burn: 14.4}})
	if err != nil {
		t.Fatal(err)
	}
	if b := *uncapped.Rules[0].BurnLong; b < 11 || b > 12.5 || uncapped.Rules[0].Threshold != 10 {
		t.Fatalf("hour burn %v, threshold %v: want ~11.7 (35 of 60 minutes bad over a 5 %% budget) and the cap at 10", b, uncapped.Rules[0].Threshold)
	}
	if !uncapped.FastBurn {
		t.Errorf("the capped rule does not fire: %+v", uncapped.Rules[0])
	}

	hook := recordWebhook(t)
	settings := &analysis.StoredSettings{PG: a.PG}
	if err := settings.SaveAlertRule(ctx, 1, analysis.AlertRule{WebhookURL: hook.URL, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	e := &AlertEvaluator{Queries: q, PG: a.PG, Settings: settings, PublicURL: "http://tokenpath.test", Now: func() time.Time { return now }}
	n, err := e.Evaluate(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Evaluate posted %d (%v), want 1", n, err)
	}
	text := hook.texts()[0]
	for _, want := range []string{"SLO burning fast: chat — TTFT p95 < 1.0 s", "the rule fires at 10×", "Queueing", "http://tokenpath.test/diagnose?"} {
		if !strings.Contains(text, want) {
			t.Errorf("alert lacks %q:\n%s", want, text)
		}
	}

	// The SLO's own rules: the workbook's uncapped hour needs 72 %, the
	// 6-hour rule 30 % of six hours: neither is met, nothing is posted.
	if err := settings.SaveBurnRules(ctx, 1, slo.ID, []analysis.BurnRule{{Long: 6 * time.Hour, Short: 30 * time.Minute, Burn: 6}}); err != nil {
		t.Fatal(err)
	}
	e.Dedupe = time.Nanosecond
	now = now.Add(time.Minute)
	if n, err := e.Evaluate(ctx); err != nil || n != 0 {
		t.Errorf("with a 6h/30m:6 rule Evaluate posted %d (%v), want 0", n, err)
	}
}

// The Slack blocks escape mrkdwn, so a summary cannot forge a link; the
// plain text keeps the sentence as it is.
func TestAlertMessage(t *testing.T) {
	burn := 20.0
	st := analysis.SLOStatus{SLO: postgres.SLO{Service: "chat", Metric: "ttft", Percentile: 95, ThresholdMs: 500, Window: "1d"},
		BurnLong: &burn, BurnShort: &burn, Current: &burn}
	a := postgres.SLOAlert{Verdict: "queueing", Confidence: 0.8, Summary: "Queue <grew> & KV full", ShareURL: "https://tp.example/s/abc"}
	m := AlertMessage(st, a)
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
