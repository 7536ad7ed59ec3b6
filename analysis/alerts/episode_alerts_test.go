package alerts

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/analysistest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
)

// With episode alerts on, an ongoing episode posts once its diagnosis is
// stored: the service, since when, the verdict and the link to the
// episode's own diagnosis; the next pass posts nothing more for it.
func TestEpisodeAlertPostsTheEpisodeDiagnosis(t *testing.T) {
	a := storetest.Open(t)
	ctx := context.Background()
	if _, err := a.PG.EnsureProject(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	reqs := analysistest.ChatRequests(6, start, 300, analysistest.QueueIncident{From: 285, To: 400})
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(reqs, nil, 1)); err != nil {
		t.Fatal(err)
	}
	now := start.Add(300 * time.Minute)
	hook := recordWebhook(t)
	settings := &analysis.StoredSettings{PG: a.PG}
	q := &analysis.Queries{CH: a.CH}
	e := &AlertEvaluator{Queries: q, PG: a.PG, Settings: settings, PublicURL: "http://tokenpath.test", Now: func() time.Time { return now }}
	if err := settings.SaveAlertRule(ctx, 1, analysis.AlertRule{WebhookURL: hook.URL, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	d := &analysis.EpisodeDetector{Queries: q, PG: a.PG, Settings: settings, Now: func() time.Time { return now }}
	if err := d.Detect(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := e.Evaluate(ctx); err != nil || n != 0 {
		t.Fatalf("episode alerts off: Evaluate posted %d (%v), want 0", n, err)
	}
	if err := settings.SaveAlertRule(ctx, 1, analysis.AlertRule{WebhookURL: hook.URL, Enabled: true, Episodes: true}); err != nil {
		t.Fatal(err)
	}
	n, err := e.Evaluate(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Evaluate posted %d (%v), want 2 (chat and vllm)", n, err)
	}
	text := strings.Join(hook.texts(), "\n")
	since := start.Add(285 * time.Minute).Format("15:04")
	for _, want := range []string{"Episode under way: chat — Queueing since " + since + " UTC", "Episode under way: vllm — Queueing since " + since,
		"http://tokenpath.test/diagnose?baseline_from="} {
		if !strings.Contains(text, want) {
			t.Errorf("alerts lack %q:\n%s", want, text)
		}
	}
	now = now.Add(time.Minute)
	if n, err := e.Evaluate(ctx); err != nil || n != 0 {
		t.Errorf("the next pass posted %d (%v), want 0", n, err)
	}
	stored, err := a.PG.ListEpisodeAlerts(ctx, 1, 10)
	if err != nil || len(stored) != 2 || !stored[0].Delivered {
		t.Errorf("stored alerts %+v (%v), want 2 delivered", stored, err)
	}
}

// webhookRecorder is a webhook on 127.0.0.1 that keeps the messages
// posted to it.
type webhookRecorder struct {
	*httptest.Server
	mu    sync.Mutex
	posts []WebhookMessage
}

func recordWebhook(t *testing.T) *webhookRecorder {
	w := &webhookRecorder{}
	w.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var m WebhookMessage
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.mu.Lock()
		w.posts = append(w.posts, m)
		w.mu.Unlock()
	}))
	t.Cleanup(w.Close)
	return w
}

// texts are the posted messages' text, in order.
func (w *webhookRecorder) texts() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, len(w.posts))
	for i, m := range w.posts {
		out[i] = m.Text
	}
	return out
}
