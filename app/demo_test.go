package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/demo"
	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

// demoApps are the demo's calling apps: their pod names come from the
// run's seed, so each run of the demo sends under pod names of its own.
var demoApps = []string{"rag-chat", "support-agent"}

// demoSpans reads, per pod of the demo's apps, the oldest span start and
// the newest span end the server stored.
func demoSpans(t *testing.T, srv *apptest.Server) map[string][2]time.Time {
	t.Helper()
	r, err := srv.CH.Query(context.Background(), `SELECT instance, min(start) AS oldest, max(end_time) AS newest
		FROM spans WHERE project_id = 1 AND service IN ? GROUP BY instance`, demoApps)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]time.Time{}
	for i := range r.Len() {
		w := r.Row(i)
		out[w.String("instance")] = [2]time.Time{w.Time("oldest"), w.Time("newest")}
	}
	return out
}

// waitLive waits until the store holds spans of n pods of the demo's
// apps, one of which started at or after since (live traffic), and returns
// what it holds then.
func waitLive(t *testing.T, srv *apptest.Server, since time.Time, n int) map[string][2]time.Time {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		pods := demoSpans(t, srv)
		for _, p := range pods {
			if !p[1].Before(since) && len(pods) >= n {
				return pods
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no live demo spans since %v: %v", since, pods)
		}
	}
}

// A restarted demo continues from the newest demo traffic the store holds:
// it backfills the gap since then and no span of the second run is older
// than the first run's newest, so no stretch of history is sent twice.
func TestDemoContinuesWhereItStopped(t *testing.T) {
	opt := apptest.Options{DataDir: t.TempDir(), DatabaseURL: pgtest.URL(t), Configure: func(c *config.Config) {
		c.Demo, c.DemoBackfill = true, 20*time.Minute
	}}
	ctx := context.Background()

	first := apptest.Start(t, opt)
	started := time.Now()
	if _, err := first.StartDemo(ctx); err != nil {
		t.Fatal(err)
	}
	waitLive(t, first, started, 3)
	first.Stop(ctx)
	// The second run starts after a pause, so there is a gap to fill.
	time.Sleep(3 * time.Second)

	second := apptest.Start(t, opt)
	restarted := time.Now()
	firstPods := demoSpans(t, second)
	if len(firstPods) != 3 {
		t.Fatalf("first run stored pods %v, want 2 rag-chat pods and a support-agent pod", firstPods)
	}
	var oldest, newest time.Time
	for _, p := range firstPods {
		if oldest.IsZero() || p[0].Before(oldest) {
			oldest = p[0]
		}
		newest = later(newest, p[1])
	}
	if oldest.After(started.Add(-19*time.Minute)) || oldest.Before(started.Add(-21*time.Minute)) {
		t.Errorf("first run's history starts at %v, want the 20 min backfill before %v", oldest, started)
	}
	if _, err := second.StartDemo(ctx); err != nil {
		t.Fatal(err)
	}
	all := waitLive(t, second, restarted, 6)
	var secondOldest time.Time
	for pod, p := range all {
		if _, ok := firstPods[pod]; ok {
			if !p[1].Equal(firstPods[pod][1]) {
				t.Errorf("pod %s of the first run got spans after the restart (newest %v, was %v)", pod, p[1], firstPods[pod][1])
			}
			continue
		}
		if secondOldest.IsZero() || p[0].Before(secondOldest) {
			secondOldest = p[0]
		}
	}
	if len(all) != 6 {
		t.Fatalf("pods after the restart %v, want the first run's three and three of the second run", all)
	}
	if !secondOldest.After(newest) {
		t.Errorf("the second run sent spans from %v, before the first run's newest %v: history sent twice", secondOldest, newest)
	}
	if !secondOldest.Before(restarted) {
		t.Errorf("the second run starts at %v, after its restart %v: the gap since %v was not backfilled", secondOldest, restarted, newest)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// The demo's metrics-only service: doc-summarizer calls a vLLM with
// tracing off whose /metrics the built-in scraper reads (its history
// replayed through the same scrapes). The demo registers the target
// itself, and the diagnosis of doc-summarizer over the planted batch surge
// is queueing, read from that server's histograms and gauges, the calls
// tied to it by server.address:server.port.
func TestDemoMetricsOnlyServiceQueueing(t *testing.T) {
	const backfill = 40 * time.Minute
	srv := apptest.Start(t, apptest.Options{Configure: func(c *config.Config) { c.Demo, c.DemoBackfill = true, backfill }})
	ctx := context.Background()
	now := time.Now()
	if _, err := srv.StartDemo(ctx); err != nil {
		t.Fatal(err)
	}
	var surge demo.Phase
	for _, p := range demo.PlannedBackfill(now.Add(-backfill), now) {
		if p.Incident == demo.BatchSurge {
			surge = p
		}
	}
	if surge.From.IsZero() {
		t.Fatalf("a %v backfill plants no batch surge", backfill)
	}
	// Run picks its own now a moment later: the window starts inside the
	// surge. vLLM records a request's queue time when it finishes, so the
	// window runs a minute past the surge for the requests it held last.
	window := diagnose.Range{From: surge.From.Add(15 * time.Second), To: surge.To.Add(time.Minute)}
	// The demo moves its target to the live interval once the scraper has
	// read the whole history.
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(time.Second) {
		targets, err := srv.PG.ListTargets(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(targets) == 1 && targets[0].Service == "vllm-qwen" && targets[0].Interval == 10*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scrape targets %+v; want the demo's vllm-qwen at its live 10 s interval after the replay", targets)
		}
	}
	var d diagnose.Diagnosis
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		var err error
		if d, err = srv.Queries.Diagnose(ctx, analysis.DiagnoseRequest{Project: 1, Service: "doc-summarizer", Window: window}); err != nil {
			t.Fatal(err)
		}
		if d.Verdict == "queueing" || time.Now().After(deadline) {
			break
		}
	}
	if d.Verdict != "queueing" || d.ServerMetrics == nil || len(d.ServerMetrics.Servers) != 1 || d.ServerMetrics.Servers[0] != "vllm-qwen" {
		t.Fatalf("doc-summarizer over the batch surge: %q (%s), server metrics %+v; want queueing read from vllm-qwen", d.Verdict, d.Summary, d.ServerMetrics)
	}
	figs := map[string]float64{}
	for _, e := range d.Evidence {
		for k, v := range e.Figures {
			figs[k] = v
		}
	}
	t.Logf("%s; evidence figures %v", d.Summary, figs)
	if figs["requests_waiting_peak"] < 3 || figs["kv_cache_peak"] < 0.9 || figs["p95"] < 2000 {
		t.Errorf("evidence figures %v; want requests waiting, a full KV cache and a queue p95 of seconds", figs)
	}
	var scraped bool
	for _, st := range srv.Scraper.Status() {
		if st.Service == "vllm-qwen" && st.Up && len(d.ServerMetrics.Endpoints) == 1 && st.URL == "http://"+d.ServerMetrics.Endpoints[0]+"/metrics" {
			scraped = true
		}
	}
	if !scraped {
		t.Errorf("scrape targets %+v; want the demo's vllm-qwen at the endpoint the calls name (%v), up", srv.Scraper.Status(), d.ServerMetrics.Endpoints)
	}
}
