package analysis

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/store/storetest"
)

func TestBurnRuleThreshold(t *testing.T) {
	r := BurnRule{Long: time.Hour, Short: 5 * time.Minute, Burn: 14.4}
	for _, c := range []struct{ budget, want float64 }{{0.001, 14.4}, {0.01, 14.4}, {0.05, 10}, {0.1, 5}} {
		if got := r.Threshold(c.budget); got != c.want {
			t.Errorf("threshold at budget %v = %v, want %v", c.budget, got, c.want)
		}
	}
	if d := r.Describe(0.05); !strings.Contains(d, "at least 50 % of requests miss it (burn 10×, capped from 14×)") {
		t.Errorf("Describe = %q", d)
	}
	rules, err := ParseBurnRules("1h/5m:14.4, 6h/30m:6")
	if err != nil || FormatBurnRules(rules) != "1h/5m:14.4, 6h/30m:6" {
		t.Errorf("round trip: %v %v", rules, err)
	}
	for _, bad := range []string{"1h:14", "5m/1h:2", "1h/5m:0", "1h/5m:x", "30d/1h:1"} {
		if _, err := ParseBurnRules(bad); err == nil {
			t.Errorf("ParseBurnRules(%q) accepted", bad)
		}
	}
}

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
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(chatRequests(5, start, 300, queueIncident{265, 400}), nil, 1)); err != nil {
		t.Fatal(err)
	}
	now := start.Add(300 * time.Minute)
	slo, err := a.PG.CreateSLO(ctx, postgres.SLO{ProjectID: project, Service: "chat", Metric: postgres.SLOMetricTTFT, Percentile: 95, ThresholdMs: 1000, Window: "1d"})
	if err != nil {
		t.Fatal(err)
	}
	q := &Queries{CH: a.CH}
	uncapped, err := q.SLOStatusWith(ctx, 1, slo, now, []BurnRule{{Long: time.Hour, Short: 5 * time.Minute, Burn: 14.4}})
	if err != nil {
		t.Fatal(err)
	}
	if b := *uncapped.Rules[0].BurnLong; b < 11 || b > 12.5 || uncapped.Rules[0].Threshold != 10 {
		t.Fatalf("hour burn %v, threshold %v: want ~11.7 (35 of 60 minutes bad over a 5 %% budget) and the cap at 10", b, uncapped.Rules[0].Threshold)
	}
	if !uncapped.FastBurn {
		t.Errorf("the capped rule does not fire: %+v", uncapped.Rules[0])
	}

	var mu sync.Mutex
	var posts []WebhookMessage
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m WebhookMessage
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		posts = append(posts, m)
		mu.Unlock()
	}))
	defer hook.Close()
	settings := &StoredSettings{PG: a.PG}
	if err := settings.SaveAlertRule(ctx, 1, AlertRule{WebhookURL: hook.URL, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	e := &AlertEvaluator{Queries: q, PG: a.PG, Settings: settings, PublicURL: "http://tokenpath.test", Now: func() time.Time { return now }}
	n, err := e.Evaluate(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Evaluate posted %d (%v), want 1", n, err)
	}
	mu.Lock()
	text := posts[0].Text
	mu.Unlock()
	for _, want := range []string{"SLO burning fast: chat — TTFT p95 < 1.0 s", "the rule fires at 10×", "Queueing", "http://tokenpath.test/diagnose?"} {
		if !strings.Contains(text, want) {
			t.Errorf("alert lacks %q:\n%s", want, text)
		}
	}

	// The SLO's own rules: the workbook's uncapped hour needs 72 %, the
	// 6-hour rule 30 % of six hours: neither is met, nothing is posted.
	if err := settings.SaveBurnRules(ctx, 1, slo.ID, []BurnRule{{Long: 6 * time.Hour, Short: 30 * time.Minute, Burn: 6}}); err != nil {
		t.Fatal(err)
	}
	e.Dedupe = time.Nanosecond
	now = now.Add(time.Minute)
	if n, err := e.Evaluate(ctx); err != nil || n != 0 {
		t.Errorf("with a 6h/30m:6 rule Evaluate posted %d (%v), want 0", n, err)
	}
}
