package analysis_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/demo"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Services of the demo world.
const (
	ragChat      = "rag-chat"      // calls vLLM
	vllmLlama    = "vllm-llama"    // the inference server
	supportAgent = "support-agent" // calls a managed API
)

// Layout of every scenario: a healthy history long enough for the default
// baseline (3× the window) plus a minute of warm-up, then the incident
// window, as long as an incident of the demo's 1 h backfill. Each scenario
// gets its own slot in the past so they can share one server without one's
// baseline, events or instances reaching into another's (a slot also
// leaves room for a saturated queue to drain after the window).
const (
	scenarioIncident = 2 * time.Minute
	scenarioHistory  = 3*scenarioIncident + time.Minute
	scenarioSlot     = 20 * time.Minute
	scenarioRate     = 2.0 // rag-chat requests per second
)

// scenarioCase is one planted story and what the diagnosis must say.
type scenarioCase struct {
	name      string
	incidents []demo.Incident // planted together over the window; none = healthy
	seed      int64
	service   string // the service diagnosed
	verdict   diagnose.Verdict
	minConf   float64
	// sameOnServer: diagnosing the inference service must agree.
	sameOnServer bool
	// bystander is a service the incident does not touch: it must read
	// healthy over the same window.
	bystander string
	mentions  []string // evidence substrings
	summary   []string // summary substrings
	// check asserts figures against the scenario's ground truth.
	check func(t *testing.T, run *scenarioRun, d diagnose.Diagnosis)
}

// scenarioRun is a case after simulation: its window and ground truth.
type scenarioRun struct {
	scenarioCase
	sc     *demo.Scenario
	window diagnose.Range
}

// TestPlantedIncidentsEndToEnd: every incident the
// demo can plant, simulated as history, sent through the real OTLP/HTTP
// receiver and events API, assembled by the server's own assembler, and
// diagnosed from the stored rows, gets the right verdict with evidence that
// quotes the right figures; every assembled row matches the model's ground
// truth to the millisecond. A mixed incident and healthy noise ride along
// in their own slots of the same server.
func TestPlantedIncidentsEndToEnd(t *testing.T) {
	cases := []scenarioCase{
		{
			name: "kv_saturation", incidents: []demo.Incident{demo.KVSaturation}, seed: 501,
			service: ragChat, verdict: diagnose.VerdictQueueing, minConf: 0.8, sameOnServer: true, bystander: supportAgent,
			mentions: []string{"queue p95", "KV cache", "requests waiting at peak"},
			summary:  []string{"TTFT p95 rose", "queued on vllm-llama while the KV cache was full"},
			check:    checkQueueing,
		},
		{
			name: "cold_start", incidents: []demo.Incident{demo.ColdStart}, seed: 502,
			service: ragChat, verdict: diagnose.VerdictColdStart, minConf: 0.8, sameOnServer: true, bystander: supportAgent,
			mentions: []string{"cold-start wait p95", "requests were held", "were cold starts"},
			summary:  []string{"held while a new instance started (scale 0 → 1 at"},
			check:    checkColdStart,
		},
		{
			name: "long_prompt", incidents: []demo.Incident{demo.LongPrompt}, seed: 503,
			service: ragChat, verdict: diagnose.VerdictPrefill, minConf: 0.6, sameOnServer: true, bystander: supportAgent,
			mentions: []string{"prefill p95", "input tokens p50", "TTFT follows prompt length"},
			summary:  []string{"prompts got longer"},
			check:    checkPrefill,
		},
		{
			name: "slow_retrieval", incidents: []demo.Incident{demo.SlowRetrieval}, seed: 504,
			service: ragChat, verdict: diagnose.VerdictPreInference, minConf: 0.7, sameOnServer: true, bystander: supportAgent,
			mentions: []string{"pre-inference p95", "The model call is unchanged"},
			summary:  []string{"retrieval, tools"},
			check:    checkComponentGrew(diagnose.ComponentPreInference, 1000),
		},
		{
			name: "network_delay", incidents: []demo.Incident{demo.NetworkDelay}, seed: 505,
			service: ragChat, verdict: diagnose.VerdictNetwork, minConf: 0.7, sameOnServer: true, bystander: supportAgent,
			mentions: []string{"network p95", "The server is not slower"},
			summary:  []string{"network or gateway"},
			check:    checkComponentGrew(diagnose.ComponentNetwork, 750),
		},
		{
			name: "memory_bound_decode", incidents: []demo.Incident{demo.MemoryBoundDecode}, seed: 506,
			service: ragChat, verdict: diagnose.VerdictDecode, minConf: 0.8, sameOnServer: true, bystander: supportAgent,
			mentions: []string{"ITL p95", "tok/s", "requests running", "ITL p95 rose and fell with the batch size"},
			summary:  []string{"E2E p95 rose", "memory-bound"},
			check:    checkDecode,
		},
		{
			name: "provider_slowness", incidents: []demo.Incident{demo.ProviderSlowness}, seed: 507,
			service: supportAgent, verdict: diagnose.VerdictProvider, minConf: 0.7, bystander: ragChat,
			mentions: []string{"provider TTFT p95", "bundled", "Prompts did not get longer", "does not follow prompt length"},
			summary:  []string{"openai gpt-4o-mini"},
			check:    checkComponentGrew(diagnose.ComponentTTFT, 1000),
		},
		{
			name: "rate_limits", incidents: []demo.Incident{demo.RateLimits}, seed: 510,
			service: supportAgent, verdict: diagnose.VerdictErrors, minConf: 0.7, bystander: ragChat,
			mentions: []string{"Error rate", "rate limits (429)", "server errors (5xx)", "Retries within a task", "per failed task"},
			summary:  []string{"Errors & rate limits:", "of them rate limits (429)"},
			check:    checkErrorRate,
		},
		{
			name: "healthy", seed: 508,
			service: ragChat, verdict: diagnose.VerdictHealthy, minConf: 0.5, sameOnServer: true, bystander: supportAgent,
			summary: []string{"Healthy"},
		},
		// Two causes at once: retrieval (+1–2 s before the call) outweighs
		// the gateway (+0.8 s inside TTFT); the smaller one is still named.
		{
			name: "mixed slow_retrieval+network_delay", incidents: []demo.Incident{demo.SlowRetrieval, demo.NetworkDelay}, seed: 509,
			service: ragChat, verdict: diagnose.VerdictPreInference, minConf: 0.4, sameOnServer: true, bystander: supportAgent,
			mentions: []string{"pre-inference p95", "Also: network p95"},
			check:    checkComponentGrew(diagnose.ComponentNetwork, 750),
		},
	}
	// Healthy traffic with its ordinary jitter, other seeds: nothing to
	// report on either service.
	for _, seed := range []int64{601, 602, 603} {
		cases = append(cases, scenarioCase{
			name: fmt.Sprintf("noise seed %d", seed), seed: seed,
			service: ragChat, verdict: diagnose.VerdictHealthy, minConf: 0.5, sameOnServer: true, bystander: supportAgent,
			summary: []string{"Healthy"},
		})
	}

	srv := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	project, err := srv.Keys.ProjectForKey(ctx, apptest.Key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demo.Config{
		OTLPEndpoint: "http://" + srv.OTLPHTTPAddr, APIBase: "http://" + srv.HTTPAddr, APIKey: apptest.Key,
		Rate: scenarioRate,
	}

	// The newest slot ends a few minutes before now; the others go back in
	// time from there. A demo simulation does not depend on the clock, only
	// on its seed and its phases relative to its start, so every run of
	// this test plants the same traffic.
	end := time.Now().Add(-5 * time.Minute).Truncate(time.Minute)
	runs := make([]*scenarioRun, len(cases))
	t0 := time.Now()
	total := 0
	for i, c := range cases {
		to := end.Add(-time.Duration(i) * scenarioSlot)
		window := diagnose.Range{From: to.Add(-scenarioIncident), To: to}
		var phases []demo.Phase
		for _, k := range c.incidents {
			phases = append(phases, demo.Phase{Incident: k, From: window.From, To: window.To})
		}
		cfg.Seed = c.seed // distinct seeds: trace ids must not collide
		sc := demo.Simulate(cfg, window.From.Add(-scenarioHistory), window.To, phases)
		if err := sc.Send(ctx, cfg); err != nil {
			t.Fatalf("%s: send: %v", c.name, err)
		}
		runs[i] = &scenarioRun{scenarioCase: c, sc: sc, window: window}
		total += len(sc.Spans)
	}
	t.Logf("simulated and sent %d scenarios (%d spans) in %v", len(runs), total, time.Since(t0).Round(time.Millisecond))

	t1 := time.Now()
	rows := make([]map[string]telemetry.LLMRequest, len(runs))
	for i, run := range runs {
		rows[i] = waitAssembled(t, srv, uint32(project), run.sc)
	}
	t.Logf("assembled in %v more", time.Since(t1).Round(time.Millisecond))

	for i, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			checkDecomposition(t, run.sc, rows[i])

			d := diagnoseService(t, srv, uint32(project), run.window, run.service)
			t.Logf("%s", explain(d))
			if d.Verdict != run.verdict {
				t.Fatalf("verdict %s, want %s\n%s", d.Verdict, run.verdict, explain(d))
			}
			if d.Confidence < run.minConf {
				t.Errorf("confidence %.2f < %.2f\n%s", d.Confidence, run.minConf, explain(d))
			}
			text := evidenceText(d)
			for _, m := range run.mentions {
				if !strings.Contains(text, m) {
					t.Errorf("evidence lacks %q\n%s", m, explain(d))
				}
			}
			for _, m := range run.summary {
				if !strings.Contains(d.Summary, m) {
					t.Errorf("summary lacks %q\n%s", m, explain(d))
				}
			}
			checkHeadline(t, run, d)
			if run.check != nil {
				run.check(t, run, d)
			}
			if run.sameOnServer {
				ds := diagnoseService(t, srv, uint32(project), run.window, vllmLlama)
				if ds.Verdict != d.Verdict {
					t.Errorf("diagnosing %s says %s, %s says %s\n%s", vllmLlama, ds.Verdict, run.service, d.Verdict, explain(ds))
				}
			}
			if run.bystander != "" {
				db := diagnoseService(t, srv, uint32(project), run.window, run.bystander)
				if db.Verdict != diagnose.VerdictHealthy {
					t.Errorf("bystander %s diagnosed %s, want healthy\n%s", run.bystander, db.Verdict, explain(db))
				}
			}
		})
	}
}

// waitAssembled polls llm_requests until every call of the scenario has
// its row, with the client and server halves joined, and returns the rows
// by trace and span id. A row count alone is not enough: a trace whose
// halves landed in two export batches has a server-only row until the
// client half is assembled.
func waitAssembled(t *testing.T, srv *apptest.Server, project uint32, sc *demo.Scenario) map[string]telemetry.LLMRequest {
	t.Helper()
	var want, wantPaired int
	from, to := sc.Requests[0].Start, sc.Requests[0].Start
	for _, r := range sc.Requests {
		want++
		if !r.Managed {
			wantPaired++
		}
		from, to = telemetry.MinTime(from, r.Start), telemetry.MaxTime(to, r.Start)
	}
	ctx := context.Background()
	var n, paired int64
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		res, err := srv.CH.Query(ctx, `SELECT count() AS n, countIf(service = ? AND server_service = ?) AS paired
			FROM llm_requests FINAL WHERE project_id = ? AND start >= ? AND start <= ?`, ragChat, vllmLlama, project, from, to)
		if err != nil {
			t.Fatal(err)
		}
		n, paired = res.Row(0).Int("n"), res.Row(0).Int("paired")
		if n == int64(want) && paired == int64(wantPaired) {
			res, err := srv.CH.Query(ctx, "SELECT "+clickhouse.RequestColumns+", "+clickhouse.DetailColumns+" FROM llm_requests FINAL WHERE project_id = ? AND start >= ? AND start <= ?",
				project, from, to)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]telemetry.LLMRequest{}
			rows := clickhouse.ScanRequests(res)
			clickhouse.ScanDetails(res, rows)
			for _, r := range rows {
				out[r.TraceID+"/"+r.SpanID] = r
			}
			return out
		}
	}
	t.Fatalf("assembly incomplete after 2 min: %d rows (%d joined), want %d (%d joined)", n, paired, want, wantPaired)
	return nil
}

func diagnoseService(t *testing.T, srv *apptest.Server, project uint32, window diagnose.Range, service string) diagnose.Diagnosis {
	t.Helper()
	d, err := srv.Queries.Diagnose(context.Background(), analysis.DiagnoseRequest{Project: project, Window: window, Service: service})
	if err != nil {
		t.Fatalf("diagnose %s: %v", service, err)
	}
	return d
}

// expected is the row the decomposition must produce for a call: the
// model's ground truth, except that a hold shorter than the assembler's
// MinHold cannot be told from network time across two clocks, so it is
// expected as network.
func expected(r demo.Request) telemetry.LLMRequest {
	w := r.Want()
	if w.ColdStart && *w.ColdStartWait < ms(assemble.DefaultMinHold) {
		n := *w.Network + *w.ColdStartWait
		w.Network, w.ColdStartWait, w.ColdStart = &n, nil, false
	}
	return w
}

// checkDecomposition compares every assembled row with the ground truth,
// to the millisecond (the model rounds to the microsecond, so a correct
// decomposition is exact up to float noise).
func checkDecomposition(t *testing.T, sc *demo.Scenario, rows map[string]telemetry.LLMRequest) {
	t.Helper()
	const tol = 0.001 // ms
	bad, cold := 0, 0
	for _, r := range sc.Requests {
		w := expected(r)
		got, ok := rows[w.TraceID+"/"+w.SpanID]
		if !ok {
			t.Fatalf("no row for call %s/%s", w.TraceID, w.SpanID)
		}
		if w.ColdStart {
			cold++
		}
		var diffs []string
		for _, f := range []struct {
			name      string
			got, want *float64
		}{
			{"pre_inference", got.PreInference, w.PreInference}, {"queue", got.Queue, w.Queue},
			{"prefill", got.Prefill, w.Prefill}, {"network", got.Network, w.Network},
			{"cold_start_wait", got.ColdStartWait, w.ColdStartWait}, {"decode", got.Decode, w.Decode},
			{"ttft", got.TTFT, w.TTFT}, {"e2e", got.E2E, w.E2E}, {"itl", got.ITL, w.ITL},
		} {
			switch {
			case (f.got == nil) != (f.want == nil):
				diffs = append(diffs, fmt.Sprintf("%s %s, want %s", f.name, fmtPtr(f.got), fmtPtr(f.want)))
			case f.got != nil && math.Abs(*f.got-*f.want) > tol:
				diffs = append(diffs, fmt.Sprintf("%s %.3f, want %.3f", f.name, *f.got, *f.want))
			}
		}
		if got.ColdStart != w.ColdStart {
			diffs = append(diffs, fmt.Sprintf("cold_start %v, want %v", got.ColdStart, w.ColdStart))
		}
		if got.ErrorType != w.ErrorType {
			diffs = append(diffs, fmt.Sprintf("error_type %q, want %q", got.ErrorType, w.ErrorType))
		}
		if got.Service != w.Service || got.ServerService != w.ServerService || got.Instance != w.Instance ||
			got.Model != w.Model || got.Provider != w.Provider || !got.Start.Equal(w.Start) || got.Error != w.Error {
			diffs = append(diffs, fmt.Sprintf("identity %s/%s/%s/%s/%s/%v/%v, want %s/%s/%s/%s/%s/%v/%v",
				got.Service, got.ServerService, got.Instance, got.Model, got.Provider, got.Start, got.Error,
				w.Service, w.ServerService, w.Instance, w.Model, w.Provider, w.Start, w.Error))
		}
		if !slices.Equal(intOf(got.InputTokens, got.OutputTokens), intOf(w.InputTokens, w.OutputTokens)) {
			diffs = append(diffs, "tokens")
		}
		if len(diffs) > 0 {
			bad++
			if bad <= 5 {
				t.Errorf("call %s (%s, incident %s): %s", w.TraceID, w.Service, r.Incident, strings.Join(diffs, "; "))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d rows differ from the ground truth", bad, len(sc.Requests))
	}
	t.Logf("%d rows match the ground truth (%d cold starts)", len(sc.Requests), cold)
}

// checkHeadline: the diagnosis read exactly the requests the model made in
// the window, so its TTFT percentiles are the ground truth's.
func checkHeadline(t *testing.T, run *scenarioRun, d diagnose.Diagnosis) {
	t.Helper()
	truth := windowValues(run, diagnose.ComponentTTFT)
	if d.Requests != len(truth.all) {
		t.Errorf("diagnosis read %d requests, the model made %d in the window", d.Requests, len(truth.all))
	}
	if want := stats.Quantile(truth.values, 0.95); !near(d.TTFT.P95, want) {
		t.Errorf("TTFT p95 %s, ground truth %.3f", fmtPtr(d.TTFT.P95), want)
	}
}

type windowTruth struct {
	all    []telemetry.LLMRequest // the service's calls in the window
	values []float64              // one component of them, NaN when unstated
}

// windowValues is the ground truth of a component over the diagnosed
// service's calls in the window.
func windowValues(run *scenarioRun, comp string) windowTruth {
	var out windowTruth
	for _, r := range run.sc.Requests {
		w := expected(r)
		if !run.window.Contains(w.Start) || (w.Service != run.service && w.ServerService != run.service) {
			continue
		}
		out.all = append(out.all, w)
		v, ok := diagnose.ComponentValue(&w, comp)
		if !ok {
			v = math.NaN()
		}
		out.values = append(out.values, v)
	}
	return out
}

// gaugeMax is the largest sample of a demo metric in the window.
func gaugeMax(run *scenarioRun, name string) float64 {
	m := math.NaN()
	for _, p := range run.sc.Metrics {
		if p.Name == name && run.window.Contains(p.Time) && !(p.Value <= m) {
			m = p.Value
		}
	}
	return m
}

// checkQueueing: the KV cache and waiting figures are the scraped maxima,
// and they show a full cache and a real queue.
func checkQueueing(t *testing.T, run *scenarioRun, d diagnose.Diagnosis) {
	kv, waiting := gaugeMax(run, demo.MetricKVCacheUsage), gaugeMax(run, demo.MetricRequestsWaiting)
	if kv < 0.95 || waiting < 5 {
		t.Errorf("the model's KV max %.3f, waiting max %.0f: the incident did not saturate", kv, waiting)
	}
	// The evidence quotes the KV range of the buckets the slow requests ran
	// in: full, and never above what was scraped.
	if got, ok := figure(d, "kv_max"); !ok || got < 0.95 || got > kv {
		t.Errorf("evidence kv_max %v (found %v), scraped max %v\n%s", got, ok, kv, explain(d))
	}
	if got, ok := figure(d, "waiting_max"); !ok || got != waiting {
		t.Errorf("evidence waiting_max %v (found %v), scraped max %v\n%s", got, ok, waiting, explain(d))
	}
	if q := d.Components[diagnose.ComponentQueue]; q.P95 == nil || *q.P95 < 2000 {
		t.Errorf("queue p95 %s ms: want seconds", fmtPtr(q.P95))
	}
	// TTFT grew through the queue; decode grew too (longer answers, a
	// fuller batch) and is named, not chosen.
	if !strings.Contains(evidenceText(d), "Also: decode p95") {
		t.Errorf("decode growth not in evidence\n%s", explain(d))
	}
}

// checkColdStart: the 0 → 1 scale event is quoted at its time, the held
// requests are counted and waited the pod start time.
func checkColdStart(t *testing.T, run *scenarioRun, d diagnose.Diagnosis) {
	var activated time.Time
	for _, e := range run.sc.Events {
		if run.window.Contains(e.Time) && *e.FromReplicas == 0 && *e.ToReplicas == 1 {
			activated = e.Time
		}
	}
	if activated.IsZero() {
		t.Fatalf("no 0 → 1 scale event in the window: %+v", run.sc.Events)
	}
	if at := "0 → 1 replicas at " + activated.UTC().Format("15:04:05"); !strings.Contains(evidenceText(d), at) {
		t.Errorf("evidence lacks %q\n%s", at, explain(d))
	}
	held := 0
	for _, w := range windowValues(run, diagnose.ComponentTTFT).all {
		if w.ColdStart {
			held++
		}
	}
	if held < 5 {
		t.Errorf("only %d held requests in the window", held)
	}
	if got, ok := figure(d, "held_requests"); !ok || int(got) != held {
		t.Errorf("evidence held_requests %v (found %v), ground truth %d\n%s", got, ok, held, explain(d))
	}
	if p95, ok := figure(d, "cold_start_wait_p95_ms"); !ok || p95 < 15_000 || p95 > 50_000 {
		t.Errorf("cold-start wait p95 %v ms: want the pod start time (20–45 s)", p95)
	}
	// The hold is cold-start wait, not network.
	if n := d.Components[diagnose.ComponentNetwork]; n.P95 == nil || *n.P95 > 100 {
		t.Errorf("network p95 %s ms during a cold start: the hold leaked into network", fmtPtr(n.P95))
	}
}

// checkPrefill: the slow requests' prompts are several times longer, as the
// model made them.
func checkPrefill(t *testing.T, run *scenarioRun, d diagnose.Diagnosis) {
	if r, ok := figure(d, "ratio"); !ok || r < 3 {
		t.Errorf("input-token ratio %v (found %v), want ≥ 3\n%s", r, ok, explain(d))
	}
	if kv := gaugeMax(run, demo.MetricKVCacheUsage); kv >= 0.9 {
		t.Errorf("KV max %.2f: long prompts alone should not fill the cache", kv)
	}
}

// checkDecode: ITL grew with the batch.
func checkDecode(t *testing.T, run *scenarioRun, d diagnose.Diagnosis) {
	itl := d.Components[diagnose.ComponentITL]
	if itl.P95 == nil || itl.BaselineP95 == nil || *itl.P95 < 1.3**itl.BaselineP95 {
		t.Errorf("ITL p95 %s → %s: want ≥ 1.3×", fmtPtr(itl.BaselineP95), fmtPtr(itl.P95))
	}
	if r, ok := figure(d, "r_running_itl_p95"); !ok || r < 0.5 {
		t.Errorf("running ↔ ITL r = %v (found %v)", r, ok)
	}
	if got, ok := figure(d, "running_max"); !ok || got != gaugeMax(run, demo.MetricRequestsRunning) {
		t.Errorf("evidence running_max %v, scraped max %v", got, gaugeMax(run, demo.MetricRequestsRunning))
	}
}

// checkErrorRate: the evidence counts the window's failures and their
// classes as the ground truth has them, and each failed task retried.
func checkErrorRate(t *testing.T, run *scenarioRun, d diagnose.Diagnosis) {
	truth := windowValues(run, diagnose.ComponentE2E).all
	byClass := map[string]float64{}
	failed := 0.0
	for _, w := range truth {
		if w.Error {
			failed++
			byClass[diagnose.ErrorClass(w.ErrorType)]++
		}
	}
	if got, ok := figure(d, "errors"); !ok || got != failed {
		t.Errorf("evidence errors %v, ground truth %v of %d requests", got, failed, len(truth))
	}
	if got, _ := figure(d, "error_rate"); math.Abs(got-failed/float64(len(truth))) > 1e-9 {
		t.Errorf("error rate %v, ground truth %v", got, failed/float64(len(truth)))
	}
	for class, n := range byClass {
		if got, _ := figure(d, class); got != n {
			t.Errorf("%s failures %v, ground truth %v", class, got, n)
		}
	}
	// The agent retries every failure at once: as many retries as failures.
	if got, _ := figure(d, "retries"); got != failed {
		t.Errorf("%v retries, want %v (the agent retries each failure once)", got, failed)
	}
}

// checkComponentGrew: the component's p95 in the window is the ground
// truth's and grew by at least minGrowth ms over its baseline.
func checkComponentGrew(comp string, minGrowth float64) func(*testing.T, *scenarioRun, diagnose.Diagnosis) {
	return func(t *testing.T, run *scenarioRun, d diagnose.Diagnosis) {
		st := d.Components[comp]
		want := stats.Quantile(windowValues(run, comp).values, 0.95)
		if !near(st.P95, want) {
			t.Errorf("%s p95 %s, ground truth %.3f", comp, fmtPtr(st.P95), want)
		}
		if st.P95 == nil || st.BaselineP95 == nil || *st.P95-*st.BaselineP95 < minGrowth {
			t.Errorf("%s p95 %s → %s: want +%.0f ms", comp, fmtPtr(st.BaselineP95), fmtPtr(st.P95), minGrowth)
		}
	}
}

// explain renders a diagnosis for failure messages.
func explain(d diagnose.Diagnosis) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%.2f): %s\n", d.Verdict, d.Confidence, d.Summary)
	for _, e := range d.Evidence {
		fmt.Fprintf(&b, "  %d. %s\n", e.N, e.Text)
	}
	return b.String()
}

func evidenceText(d diagnose.Diagnosis) string {
	texts := make([]string, len(d.Evidence))
	for i, e := range d.Evidence {
		texts[i] = e.Text
	}
	return strings.Join(texts, "\n")
}

// figure returns the first evidence figure with that name.
func figure(d diagnose.Diagnosis, name string) (float64, bool) {
	for _, e := range d.Evidence {
		if v, ok := e.Figures[name]; ok {
			return v, true
		}
	}
	return 0, false
}

func near(got *float64, want float64) bool {
	return got != nil && math.Abs(*got-want) <= 1e-6*math.Max(1, math.Abs(want))
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%.3f", *p)
}

func intOf(ps ...*int64) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = -1
		if p != nil {
			out[i] = *p
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
