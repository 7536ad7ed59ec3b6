package analysis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/analysistest"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// backToBack is a day and more of 10-minute episodes, each a minute after
// the last, ending at end.
func backToBack(end time.Time) []postgres.Episode {
	var eps []postgres.Episode
	for i := int64(1); i <= 24*6+2; i++ {
		s, e := end.Add(-time.Duration(i)*10*time.Minute+time.Minute), end.Add(-time.Duration(i-1)*10*time.Minute)
		eps = append(eps, postgres.Episode{ID: i, Start: s, End: &e})
	}
	return eps
}

func TestCleanBaseline(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	ep := func(id int64, from, to int) postgres.Episode {
		e := postgres.Episode{ID: id, Start: at(from)}
		if to != 0 {
			end := at(to)
			e.End = &end
		}
		return e
	}
	window := diagnose.Range{From: at(0), To: at(15)}
	cases := []struct {
		name     string
		eps      []postgres.Episode
		want     diagnose.Range
		within   int64
		excluded int
		ok       bool
	}{
		{"no episodes: the default baseline", nil, diagnose.Range{From: at(-45), To: at(0)}, 0, 0, true},
		{"an earlier episode is left out", []postgres.Episode{ep(1, -40, -25)}, diagnose.Range{From: at(-25), To: at(0)}, 0, 1, true},
		{"the window opens in an episode: the stretch before it", []postgres.Episode{ep(1, -70, -58), ep(2, -20, 0)},
			diagnose.Range{From: at(-58), To: at(-20)}, 2, 0, true},
		{"an episode under way", []postgres.Episode{ep(2, -20, 0)}, diagnose.Range{From: at(-65), To: at(-20)}, 2, 0, true},
		{"episode after episode: the clean stretch before both", []postgres.Episode{ep(1, -50, -28), ep(2, -20, 0)},
			diagnose.Range{From: at(-95), To: at(-50)}, 2, 1, true},
		{"a repeat soon after the last episode: the stretch before that one", []postgres.Episode{ep(1, -120, -110), ep(2, -7, -1)},
			diagnose.Range{From: at(-52), To: at(-7)}, 0, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, within, excluded, ok := CleanBaseline(window, 45*time.Minute, c.eps)
			if !r.From.Equal(c.want.From) || !r.To.Equal(c.want.To) || ok != c.ok {
				t.Errorf("baseline %s–%s ok=%v, want %s–%s ok=%v", r.From.Format("15:04"), r.To.Format("15:04"), ok,
					c.want.From.Format("15:04"), c.want.To.Format("15:04"), c.ok)
			}
			if (within == nil) != (c.within == 0) || (within != nil && within.ID != c.within) {
				t.Errorf("within = %+v, want episode %d", within, c.within)
			}
			if len(excluded) != c.excluded {
				t.Errorf("excluded %d episodes, want %d", len(excluded), c.excluded)
			}
		})
	}
	if r, _, _, ok := CleanBaseline(window, 45*time.Minute, backToBack(at(-1))); ok {
		t.Errorf("a day of episodes a minute apart gave the baseline %s–%s", r.From, r.To)
	}
}

// During the second of two queueing incidents, the default 15-minute
// diagnosis's 45-minute baseline holds the first: guarded, it compares
// with the clean stretch between them, names queueing, and says which
// episodes it left out.
func TestGuardedDiagnosisDuringRepeatedIncident(t *testing.T) {
	a := storetest.Open(t)
	ctx := context.Background()
	if _, err := a.PG.EnsureProject(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	reqs := analysistest.ChatRequests(1, start, 300, analysistest.QueueIncident{From: 250, To: 262}, analysistest.QueueIncident{From: 282, To: 400})
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(reqs, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &Queries{CH: a.CH}
	settings := &StoredSettings{PG: a.PG}
	d := &EpisodeDetector{Queries: q, PG: a.PG, Settings: settings, Now: func() time.Time { return at(300) }}
	if err := d.Detect(ctx); err != nil {
		t.Fatal(err)
	}
	window := diagnose.Range{From: at(285), To: at(300)}
	plain, err := q.Diagnose(ctx, DiagnoseRequest{Project: 1, Window: window, Service: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Verdict != diagnose.VerdictHealthy {
		t.Fatalf("unguarded verdict %s: the case no longer shows the baseline holding the first incident", plain.Verdict)
	}
	for _, service := range []string{"chat", "vllm"} {
		req := DiagnoseRequest{Project: 1, Window: window, Service: service}
		g := settings.GuardDiagnosis(ctx, &req)
		if !g.Moved || g.NoClean || !req.Baseline.From.Equal(at(262)) || !req.Baseline.To.Equal(at(282)) {
			t.Fatalf("%s: guard %+v moved the baseline to %v–%v, want %v–%v", service, g, req.Baseline.From, req.Baseline.To, at(262), at(282))
		}
		dg, err := q.Diagnose(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		g.Explain(&dg)
		if dg.Verdict != diagnose.VerdictQueueing {
			t.Errorf("%s: verdict %s (%s), want queueing", service, dg.Verdict, dg.Summary)
		}
		if !strings.Contains(dg.Evidence[0].Text, "leaving out the episode under way since "+at(282).Format("15:04")+" and the episode "+
			at(250).Format("15:04")+"–"+at(262).Format("15:04")) {
			t.Errorf("%s: first evidence %q does not say which episodes the baseline leaves out", service, dg.Evidence[0].Text)
		}
	}
}

// A service slow all along (TTFT p95 ~27 s, no SLO) is never healthy: the
// default objective judges it, and the diagnosis says it was slow before.
func TestObjectiveFloorOnASlowService(t *testing.T) {
	a := storetest.Open(t)
	ctx := context.Background()
	if _, err := a.PG.EnsureProject(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	reqs := analysistest.ChatRequests(3, start, 120)
	for i := range reqs {
		q := 27_000.0
		reqs[i].Queue, reqs[i].TTFT = &q, telemetry.Ptr(q+*reqs[i].Prefill+20)
	}
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(reqs, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &Queries{CH: a.CH}
	window := diagnose.Range{From: start.Add(100 * time.Minute), To: start.Add(115 * time.Minute)}
	plain, err := q.Diagnose(ctx, DiagnoseRequest{Project: 1, Window: window, Service: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Verdict != diagnose.VerdictHealthy {
		t.Fatalf("unguarded verdict %s: the case no longer shows the problem the objective solves", plain.Verdict)
	}
	req := DiagnoseRequest{Project: 1, Window: window, Service: "vllm"}
	g := (&StoredSettings{PG: a.PG}).GuardDiagnosis(ctx, &req)
	dg, err := q.Diagnose(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	g.Explain(&dg)
	if dg.Verdict == diagnose.VerdictHealthy || g.ObjectiveMs != DefaultTTFTObjectiveMs {
		t.Fatalf("guarded verdict %s with objective %v ms: %s", dg.Verdict, g.ObjectiveMs, dg.Summary)
	}
	all := ""
	for _, e := range dg.Evidence {
		all += e.Text + "\n"
	}
	for _, want := range []string{"default objective of 10.0 s", "in the baseline, so this is not new"} {
		if !strings.Contains(all, want) {
			t.Errorf("evidence lacks %q:\n%s", want, all)
		}
	}
}

// An episode that ended inside the window is named by its span, not as
// one still under way.
func TestExplainNamesAResolvedEpisodeBySpan(t *testing.T) {
	start := time.Date(2026, 12, 6, 8, 32, 0, 0, time.UTC)
	end := start.Add(6 * time.Minute)
	g := BaselineGuard{Moved: true, Within: &postgres.Episode{Start: start, End: &end},
		Baseline: diagnose.Range{From: start.Add(-45 * time.Minute), To: start}}
	var d diagnose.Diagnosis
	g.Explain(&d)
	if len(d.Evidence) == 0 || !strings.Contains(d.Evidence[0].Text, "leaving out the episode 08:32–08:38 that runs into the window") {
		t.Fatalf("first evidence %+v does not name the resolved episode by its span", d.Evidence)
	}
}

// An inference server that served exactly one app's requests in the window
// is diagnosed as the app, with the app's SLO, and says so: its diagnosis
// and the app's are one. A server shared by two apps keeps its own.
func TestGuardDiagnosesPairedServerAsItsApp(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	a, ctx := pairedAndSharedStores(t, analysistest.ChatRequests(1, start, 300, analysistest.QueueIncident{From: 282, To: 400}),
		analysistest.ChatRequests(2, start, 300))
	q := &Queries{CH: a.CH}
	settings := &StoredSettings{PG: a.PG, Pairs: q}
	window := diagnose.Range{From: start.Add(285 * time.Minute), To: start.Add(300 * time.Minute)}
	diagnosis := func(service string) (DiagnoseRequest, BaselineGuard, diagnose.Diagnosis) {
		t.Helper()
		req := DiagnoseRequest{Project: 1, Window: window, Service: service}
		req.SLO, req.Prices = settings.SLOAndPrices(ctx, 1, service, "")
		g := settings.GuardDiagnosis(ctx, &req)
		dg, err := q.Diagnose(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		g.Explain(&dg)
		return req, g, dg
	}
	_, _, app := diagnosis("chat")
	req, g, server := diagnosis("vllm")
	if req.Service != "chat" || req.SLO == nil || req.SLO.TTFTMs != 1000 || g.PairedServer != "vllm" || g.ObjectiveMs != 0 {
		t.Errorf("vllm's diagnosis read %q with SLO %+v (paired server %q, objective %v); want chat's, with its 1 s SLO", req.Service, req.SLO,
			g.PairedServer, g.ObjectiveMs)
	}
	if server.Verdict != app.Verdict || server.Summary != app.Summary || !strings.Contains(server.Evidence[0].Text, "Same requests as chat: vllm served exactly") {
		t.Errorf("vllm: %s %q (first evidence %q); chat: %s %q", server.Verdict, server.Summary, server.Evidence[0].Text, app.Verdict, app.Summary)
	}
	if req, g, _ := diagnosis("vllm-shared"); req.Service != "vllm-shared" || g.PairedServer != "" {
		t.Errorf("the shared server was diagnosed as %q (paired %q), want itself", req.Service, g.PairedServer)
	}
}
