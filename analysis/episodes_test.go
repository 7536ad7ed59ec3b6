package analysis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/analysistest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// The detector reads the per-minute rollup, stores both episodes of a
// repeated queueing incident for the app and its inference server (the
// second ongoing), diagnoses each against the clean stretch before it, and
// rewrites them as late data arrives.
func TestEpisodeDetectorStoresAndUpdatesEpisodes(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	// 4 h healthy, a 12-minute incident, 30 minutes healthy, then an
	// incident under way when the first pass runs.
	a, ctx := detectorStores(t, analysistest.ChatRequests(1, start, 300, analysistest.QueueIncident{From: 240, To: 252},
		analysistest.QueueIncident{From: 282, To: 400}))
	now := start.Add(300 * time.Minute)
	d := &EpisodeDetector{Queries: &Queries{CH: a.CH}, PG: a.PG, Now: func() time.Time { return now }}
	if err := d.Detect(ctx); err != nil {
		t.Fatal(err)
	}
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	for _, service := range []string{"chat", "vllm"} {
		eps, err := a.PG.Episodes(ctx, 1, service, start, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != 2 {
			t.Fatalf("%s: %d episodes stored, want 2: %+v", service, len(eps), eps)
		}
		first, second := eps[0], eps[1]
		if !first.Start.Equal(at(240)) || first.End == nil || !first.End.Equal(at(252)) {
			t.Errorf("%s: first episode %v–%v, want %v–%v", service, first.Start, first.End, at(240), at(252))
		}
		if !second.Start.Equal(at(282)) || second.End != nil {
			t.Errorf("%s: second episode %v–%v, want ongoing since %v", service, second.Start, second.End, at(282))
		}
		if second.BaselineFrom == nil || second.BaselineFrom.Before(*first.End) {
			t.Errorf("%s: second episode's baseline starts %v, inside the first episode", service, second.BaselineFrom)
		}
		for _, e := range eps {
			if e.Verdict != "queueing" || e.DiagnosedAt == nil {
				t.Errorf("%s: episode at %v diagnosed %q (%s), want queueing", service, e.Start.Format("15:04"), e.Verdict, e.Summary)
			}
		}
	}

	// Late data: the second incident ends at 310 and 20 healthy minutes
	// follow; the next pass closes it and diagnoses it again.
	late := analysistest.ChatRequests(2, at(300), 30, analysistest.QueueIncident{From: 0, To: 10})
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(late, nil, 1)); err != nil {
		t.Fatal(err)
	}
	now = at(330)
	if err := d.Detect(ctx); err != nil {
		t.Fatal(err)
	}
	eps, err := a.PG.Episodes(ctx, 1, "vllm", start, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || eps[1].End == nil || !eps[1].End.Equal(at(310)) {
		t.Fatalf("after late data: %+v, want the second episode ended at %v", eps, at(310))
	}
	if eps[1].DiagnosedEnd == nil || !eps[1].DiagnosedEnd.Equal(at(310)) {
		t.Errorf("the resolved episode's diagnosis saw end %v, want %v", eps[1].DiagnosedEnd, at(310))
	}
}

// An episode that later data dissolves (the slow minutes were a partial
// read) is deleted from the store.
func TestReplaceEpisodesDeletesDissolved(t *testing.T) {
	a := storetest.Open(t)
	ctx := context.Background()
	if _, err := a.PG.EnsureProject(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	ep := func(service string, m int) postgres.Episode {
		return postgres.Episode{ProjectID: 1, Service: service, Start: t0.Add(time.Duration(m) * time.Minute), Signals: "ttft", Peak: t0, PeakTTFTMs: 900}
	}
	if err := a.PG.ReplaceEpisodes(ctx, 1, t0, []postgres.Episode{ep("chat", 0), ep("chat", 30), ep("vllm", 30)}); err != nil {
		t.Fatal(err)
	}
	if err := a.PG.RecordEpisodeDiagnosis(ctx, 1, postgres.EpisodeDiagnosis{Verdict: "queueing", Confidence: 0.9, Summary: "queue", At: t0}); err != nil {
		t.Fatal(err)
	}
	if err := a.PG.ReplaceEpisodes(ctx, 1, t0.Add(10*time.Minute), []postgres.Episode{ep("vllm", 30)}); err != nil {
		t.Fatal(err)
	}
	eps, err := a.PG.Episodes(ctx, 1, "", t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || eps[0].Service != "chat" || !eps[0].Start.Equal(t0) || eps[1].Service != "vllm" {
		t.Fatalf("stored %+v, want chat's episode before the pass's horizon and vllm's", eps)
	}
	if eps[0].Verdict != "queueing" {
		t.Errorf("the untouched episode lost its diagnosis: %+v", eps[0])
	}
}

// A full outage: the app's requests stop in an ongoing incident. The app's
// episode stays ongoing with no traffic since its last request, then ends
// 5 minutes into the silence; the inference server's stays open while its
// waiting gauge says requests are still queued, however few finish.
func TestEpisodeDetectorOutageAndWaiting(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Minute).Add(-6 * time.Hour)
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	a, ctx := detectorStores(t, analysistest.ChatRequests(3, start, 290, analysistest.QueueIncident{From: 270, To: 400}))
	var gauge []telemetry.MetricPoint
	for s := 280 * 60; s < 294*60; s += 15 {
		gauge = append(gauge, telemetry.MetricPoint{ProjectID: 1, Time: start.Add(time.Duration(s) * time.Second), Service: "vllm", Instance: "vllm-0",
			Name: "requests_waiting", Value: 30})
	}
	if err := a.CH.Insert(ctx, clickhouse.MetricsBatch(gauge)); err != nil {
		t.Fatal(err)
	}
	now := at(293)
	d := &EpisodeDetector{Queries: &Queries{CH: a.CH}, PG: a.PG, Now: func() time.Time { return now }}
	latest := func(service string) postgres.Episode {
		t.Helper()
		if err := d.Detect(ctx); err != nil {
			t.Fatal(err)
		}
		eps, err := a.PG.Episodes(ctx, 1, service, start, now)
		if err != nil || len(eps) != 1 {
			t.Fatalf("%s: %+v (%v), want one episode", service, eps, err)
		}
		return eps[0]
	}
	if e := latest("chat"); e.End != nil || e.SilentSince == nil || !e.SilentSince.Equal(at(290)) {
		t.Errorf("chat 3 minutes into the outage: end %v, silent since %v; want ongoing, silent since %v", e.End, e.SilentSince, at(290))
	}
	if e := latest("vllm"); e.End != nil || e.SilentSince != nil {
		t.Errorf("vllm with 30 requests waiting: end %v, silent since %v; want ongoing, not silent", e.End, e.SilentSince)
	}
	now = at(320)
	if e := latest("chat"); e.End == nil || !e.End.Equal(at(295)) || e.SilentSince == nil {
		t.Errorf("chat 30 minutes into the outage: end %v, silent since %v; want ended %v, silent", e.End, e.SilentSince, at(295))
	}
	if e := latest("vllm"); e.End == nil || !e.End.Equal(at(299)) || e.SilentSince == nil || !e.SilentSince.Equal(at(294)) {
		t.Errorf("vllm after its queue went silent: end %v, silent since %v; want ended %v, silent since %v", e.End, e.SilentSince, at(299), at(294))
	}
}

// An inference server that served exactly one app's requests carries the
// diagnosis of the app's overlapping episode (judged by the app's SLO),
// stored, linked to the app's diagnosis; a server shared by two apps keeps
// a diagnosis of its own.
func TestEpisodeDetectorPairedServerCarriesAppDiagnosis(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	a, ctx := pairedAndSharedStores(t,
		analysistest.ChatRequests(1, start, 300, analysistest.QueueIncident{From: 240, To: 252}, analysistest.QueueIncident{From: 282, To: 400}),
		analysistest.ChatRequests(2, start, 300, analysistest.QueueIncident{From: 270, To: 285}))
	now := start.Add(300 * time.Minute)
	d := &EpisodeDetector{Queries: &Queries{CH: a.CH}, PG: a.PG, Now: func() time.Time { return now }, DiagnosesPerPass: 20}
	if err := d.Detect(ctx); err != nil {
		t.Fatal(err)
	}
	eps, err := a.PG.Episodes(ctx, 1, "", start, now)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string][]postgres.Episode{}
	for _, e := range eps {
		by[e.Service] = append(by[e.Service], e)
	}
	if len(by["chat"]) != 2 || len(by["vllm"]) != 2 || len(by["vllm-shared"]) != 1 {
		t.Fatalf("episodes: chat %d, vllm %d, vllm-shared %d; want 2, 2, 1: %+v", len(by["chat"]), len(by["vllm"]), len(by["vllm-shared"]), eps)
	}
	for i, s := range by["vllm"] {
		app := by["chat"][i]
		if s.DiagnosedAs != "chat" || s.Verdict != app.Verdict || s.Confidence != app.Confidence || s.Summary != app.Summary {
			t.Errorf("vllm's episode at %s carries %q %q (%.3f, %q); want chat's %q (%.3f, %q)", s.Start.Format("15:04"),
				s.DiagnosedAs, s.Verdict, s.Confidence, s.Summary, app.Verdict, app.Confidence, app.Summary)
		}
		if p := EpisodePath(s, now); !strings.Contains(p, "service=chat&") {
			t.Errorf("vllm's episode links %s, want chat's diagnosis", p)
		}
	}
	if s := by["vllm-shared"][0]; s.DiagnosedAs != "" || s.DiagnosedAt == nil || !strings.Contains(EpisodePath(s, now), "service=vllm-shared&") {
		t.Errorf("the shared server's episode: diagnosed as %q at %v, path %s; want its own diagnosis", s.DiagnosedAs, s.DiagnosedAt, EpisodePath(s, now))
	}
}

// When the app's diagnosis changes (a later pass read more of its
// requests), the next pass carries the new one to the server's episode.
func TestEpisodeDetectorPairedServerFollowsAppDiagnosis(t *testing.T) {
	start := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Hour)
	a, ctx := detectorStores(t, analysistest.ChatRequests(1, start, 300, analysistest.QueueIncident{From: 240, To: 252}))
	now := start.Add(300 * time.Minute)
	d := &EpisodeDetector{Queries: &Queries{CH: a.CH}, PG: a.PG, Now: func() time.Time { return now }}
	if err := d.Detect(ctx); err != nil {
		t.Fatal(err)
	}
	chat, err := a.PG.Episodes(ctx, 1, "chat", start, now)
	if err != nil || len(chat) != 1 {
		t.Fatalf("chat: %+v (%v), want one episode", chat, err)
	}
	rec := postgres.EpisodeDiagnosis{Verdict: "prefill", Confidence: 0.8, Summary: "long prompts", At: now, SawEnd: chat[0].End}
	if err := a.PG.RecordEpisodeDiagnosis(ctx, chat[0].ID, rec); err != nil {
		t.Fatal(err)
	}
	if err := d.Detect(ctx); err != nil {
		t.Fatal(err)
	}
	vllm, err := a.PG.Episodes(ctx, 1, "vllm", start, now)
	if err != nil || len(vllm) != 1 {
		t.Fatalf("vllm: %+v (%v), want one episode", vllm, err)
	}
	if v := vllm[0]; v.Verdict != rec.Verdict || v.Summary != rec.Summary || v.Confidence != rec.Confidence {
		t.Errorf("vllm's episode says %s (%.2f, %q) while chat's says %s (%.2f, %q)", v.Verdict, v.Confidence, v.Summary, rec.Verdict, rec.Confidence, rec.Summary)
	}
}

// detectorStores opens the stores with the default project (id 1) and reqs
// stored.
func detectorStores(t *testing.T, reqs []telemetry.LLMRequest) (storetest.Stores, context.Context) {
	t.Helper()
	a := storetest.Open(t)
	ctx := context.Background()
	if _, err := a.PG.EnsureProject(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(reqs, nil, 1)); err != nil {
		t.Fatal(err)
	}
	return a, ctx
}

// pairedAndSharedStores stores chat's requests to vllm (a pair: chat has a
// 1 s TTFT SLO) and shared's, spread over rag and batch calling
// vllm-shared (a server two apps share).
func pairedAndSharedStores(t *testing.T, chat, shared []telemetry.LLMRequest) (storetest.Stores, context.Context) {
	t.Helper()
	reqs := append([]telemetry.LLMRequest(nil), chat...)
	for i, r := range shared {
		r.Service, r.ServerService = []string{"rag", "batch"}[i%2], "vllm-shared"
		reqs = append(reqs, r)
	}
	a, ctx := detectorStores(t, reqs)
	if _, err := a.PG.CreateSLO(ctx, postgres.SLO{ProjectID: 1, Service: "chat", Metric: postgres.SLOMetricTTFT, Percentile: 95, ThresholdMs: 1000,
		Window: "1h"}); err != nil {
		t.Fatal(err)
	}
	return a, ctx
}
