package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// GET /api/v1/episodes lists the stored episodes of a window: the app's
// and its inference server's ongoing queueing episode, the server's
// carrying the app's diagnosis, each with a diagnosis link the API
// answers (the server's window asked of the server itself is diagnosed as
// the app); a service narrows the list, a window before the incident
// holds none, and a bad window is refused with a sentence.
func TestAPIEpisodes(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	in := plantQueueingIncident(t, srv, defaultProject(t, srv), "rag-chat")
	if err := srv.Episodes.Detect(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := logIn(t, srv, apptest.Key)
	type episode struct {
		Service string     `json:"service"`
		Start   time.Time  `json:"start"`
		End     *time.Time `json:"end"`
		Ongoing bool       `json:"ongoing"`
		Signals []string   `json:"signals"`
		Peak    struct {
			TTFTP95Ms float64 `json:"ttft_p95_ms"`
		} `json:"peak"`
		Baseline *struct {
			TTFTP95Ms float64 `json:"ttft_p95_ms"`
		} `json:"baseline"`
		Verdict     string `json:"verdict"`
		Summary     string `json:"summary"`
		DiagnosedAs string `json:"diagnosed_as"`
		Diagnosis   string `json:"diagnosis"`
		DiagAPI     string `json:"diagnosis_api"`
	}
	var all struct {
		Episodes []episode `json:"episodes"`
	}
	b.getJSON("/api/v1/episodes?last=1h", apptest.Key, &all)
	by := map[string]episode{}
	for _, e := range all.Episodes {
		by[e.Service] = e
	}
	app, server := by["rag-chat"], by["vllm"]
	if len(all.Episodes) != 2 || app.Service == "" || server.Service == "" {
		t.Fatalf("episodes of the last hour: %+v, want one of rag-chat and one of vllm", all.Episodes)
	}
	for _, e := range []episode{app, server} {
		if !e.Ongoing || e.End != nil || e.Start.Before(in.IncidentFrom.Add(-time.Minute)) || e.Start.After(in.IncidentFrom.Add(time.Minute)) {
			t.Errorf("%s: start %v, end %v, ongoing %v; want ongoing since about %v", e.Service, e.Start, e.End, e.Ongoing, in.IncidentFrom)
		}
		if e.Verdict != "queueing" || e.Baseline == nil || e.Peak.TTFTP95Ms <= 3*e.Baseline.TTFTP95Ms || len(e.Signals) == 0 {
			t.Errorf("%s: verdict %q, peak %v, baseline %+v, signals %v; want queueing, peak well above the baseline", e.Service, e.Verdict,
				e.Peak.TTFTP95Ms, e.Baseline, e.Signals)
		}
		if !strings.HasPrefix(e.Diagnosis, "/diagnose?") || e.DiagAPI != "/api/v1"+e.Diagnosis {
			t.Errorf("%s: diagnosis %q, API %q", e.Service, e.Diagnosis, e.DiagAPI)
		}
	}
	if server.DiagnosedAs != "rag-chat" || server.Summary != app.Summary || !strings.Contains(server.Diagnosis, "service=rag-chat&") {
		t.Errorf("vllm's episode: diagnosed as %q, %q, link %s; want rag-chat's diagnosis (%q)", server.DiagnosedAs, server.Summary, server.Diagnosis, app.Summary)
	}
	type diagnosis struct {
		Verdict  string `json:"verdict"`
		Summary  string `json:"summary"`
		Evidence []struct {
			Text string `json:"text"`
		} `json:"evidence"`
	}
	var dg, own diagnosis
	b.getJSON(server.DiagAPI, apptest.Key, &dg)
	if dg.Verdict != "queueing" {
		t.Errorf("vllm's episode's diagnosis from the API: %q, want queueing", dg.Verdict)
	}
	// Asked about vllm itself, the diagnosis is rag-chat's: the same
	// requests, one verdict.
	b.getJSON(strings.Replace(server.DiagAPI, "service=rag-chat", "service=vllm", 1), apptest.Key, &own)
	if own.Verdict != dg.Verdict || own.Summary != dg.Summary || len(own.Evidence) == 0 || !strings.HasPrefix(own.Evidence[0].Text, "Same requests as rag-chat") {
		t.Errorf("vllm's window diagnosed as vllm: %s %q (%+v); as rag-chat: %s %q", own.Verdict, own.Summary, own.Evidence, dg.Verdict, dg.Summary)
	}

	var one struct {
		Episodes []episode `json:"episodes"`
	}
	b.getJSON("/api/v1/episodes?service=vllm&last=1h", apptest.Key, &one)
	if len(one.Episodes) != 1 || one.Episodes[0].Service != "vllm" {
		t.Errorf("service=vllm: %+v, want vllm's episode only", one.Episodes)
	}
	before := in.IncidentFrom.Add(-20 * time.Minute).Format(time.RFC3339)
	b.getJSON("/api/v1/episodes?from="+before+"&to="+in.IncidentFrom.Add(-10*time.Minute).Format(time.RFC3339), apptest.Key, &one)
	if len(one.Episodes) != 0 {
		t.Errorf("a window before the incident: %+v, want none", one.Episodes)
	}
	if code := apiStatus(t, srv, "/api/v1/episodes?last=soon", apptest.Key); code != http.StatusBadRequest {
		t.Errorf("last=soon: %d, want 400", code)
	}
	if code := apiStatus(t, srv, "/api/v1/episodes?last=1h", ""); code != http.StatusUnauthorized {
		t.Errorf("without a key: %d, want 401", code)
	}
}
