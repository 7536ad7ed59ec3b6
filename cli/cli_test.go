package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/cli"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// seedQueueing writes a baseline of fast requests and a window where queue
// time explodes, straight into llm_requests.
func seedQueueing(t *testing.T, srv *apptest.Server, now time.Time) {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	var rows []telemetry.LLMRequest
	add := func(at time.Time, queue float64, i int) {
		prefill, network, decode := 40+rng.Float64()*10, 10+rng.Float64()*5, 800+rng.Float64()*100
		ttft := queue + prefill + network
		rows = append(rows, telemetry.LLMRequest{ProjectID: 1, TraceID: strings.Repeat("a", 24) + time.Duration(i).String()[:1] + at.Format("150405.0")[:7],
			SpanID: at.Format("150405.000000"), Service: "chat", ServerService: "vllm", Model: "llama", Instance: "vllm-0", Start: at,
			TTFT: telemetry.Ptr(ttft), Queue: telemetry.Ptr(queue), Prefill: telemetry.Ptr(prefill), Network: telemetry.Ptr(network),
			Decode: telemetry.Ptr(decode), E2E: telemetry.Ptr(ttft + decode), PreInference: telemetry.Ptr(30.0),
			InputTokens: telemetry.Ptr[int64](500), OutputTokens: telemetry.Ptr[int64](100), ITL: telemetry.Ptr(decode / 99)})
	}
	for i := 0; i < 600; i++ { // baseline: 45 min before the window
		add(now.Add(-60*time.Minute+time.Duration(i)*4500*time.Millisecond), 5+rng.Float64()*10, i)
	}
	for i := 0; i < 200; i++ { // window: last 15 min, queue grows
		add(now.Add(-15*time.Minute+time.Duration(i)*4500*time.Millisecond), 1500+rng.Float64()*800, i)
	}
	if err := srv.CH.Insert(context.Background(), clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, args ...string) (string, string, error) {
	return runEnv(t, map[string]string{}, args...)
}

func runEnv(t *testing.T, vars map[string]string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	env := cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return vars[k] }}
	err := cli.Diagnose(context.Background(), env, args)
	return out.String(), errOut.String(), err
}

func TestDiagnoseCommand(t *testing.T) {
	srv := apptest.Start(t, apptest.Options{})
	now := time.Now().UTC()
	seedQueueing(t, srv, now)
	base := []string{"--server", "http://" + srv.HTTPAddr, "--key", apptest.Key, "--service", "chat", "--last", "15m"}

	out, _, err := run(t, base...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"VERDICT  QUEUEING", "EVIDENCE", "COMPONENT", "queue", "prefill"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, _, err = run(t, append(base, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Verdict  string `json:"verdict"`
		Requests int    `json:"requests"`
	}
	// The window ends "now", a moment after seeding: the oldest row may fall out.
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Verdict != "queueing" || d.Requests < 195 || d.Requests > 200 {
		t.Fatalf("--json: %v %+v", err, d)
	}

	if _, _, err := run(t, "--server", "http://"+srv.HTTPAddr, "--service", "chat"); err == nil || !strings.Contains(err.Error(), "API key") {
		t.Errorf("missing key: %v", err)
	}
	// Without --key, the key `make run` keeps in its data dir is used.
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "demo-key"), []byte(apptest.Key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runEnv(t, map[string]string{"TOKENPATH_DATA_DIR": dataDir}, "--server", "http://"+srv.HTTPAddr, "--service", "chat"); err != nil || !strings.Contains(out, "VERDICT  QUEUEING") {
		t.Errorf("key from the data dir: %v\n%s", err, out)
	}
	if _, _, err := run(t, "--server", "http://"+srv.HTTPAddr, "--key", "wrong-key-000000000000", "--service", "chat"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong key: %v", err)
	}
	if _, _, err := run(t, append(base[:6], "--from", "yesterday")...); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Errorf("bad time: %v", err)
	}
}

// A busy window's counts are estimates and its figures come from a
// sample: the header says both, a complete window neither.
func TestPrintDiagnosisSays(t *testing.T) {
	w := diagnose.Range{From: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)}
	var b strings.Builder
	cli.PrintDiagnosis(&b, diagnose.Diagnosis{Window: w, Requests: 1_234_567, BaselineRequests: 3_700_000, AnalyzedRequests: 20_000,
		RequestsEstimated: true, Verdict: diagnose.VerdictHealthy}, "chat")
	if want := "(about 1234567 requests, baseline about 3700000; figures from a sample of 20000)"; !strings.Contains(b.String(), want) {
		t.Errorf("sampled header lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	cli.PrintDiagnosis(&b, diagnose.Diagnosis{Window: w, Requests: 900, BaselineRequests: 2700, AnalyzedRequests: 900, Verdict: diagnose.VerdictHealthy}, "chat")
	if want := "(900 requests, baseline 2700)"; !strings.Contains(b.String(), want) {
		t.Errorf("complete header lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	late := w.From.Add(-5 * time.Minute)
	cli.PrintDiagnosis(&b, diagnose.Diagnosis{Window: w, Requests: 900, BaselineRequests: 75, AnalyzedRequests: 900, BaselineDataFrom: &late,
		Verdict: diagnose.VerdictHealthy}, "chat")
	if want := "(900 requests, baseline 75; the baseline's requests start at 09:55:00)"; !strings.Contains(b.String(), want) {
		t.Errorf("thin-baseline header lacks %q:\n%s", want, b.String())
	}
}

// The parts table prints latencies as the pages do: "30.3 s", not "30.26 s".
func TestPrintDiagnosisLatencies(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	var b strings.Builder
	cli.PrintDiagnosis(&b, diagnose.Diagnosis{Verdict: diagnose.VerdictQueueing, Requests: 10, Components: map[string]diagnose.ComponentStats{
		"queue": {Count: 10, P50: f(850.4), P95: f(30260), P99: f(1254), BaselineP95: f(4.04)},
	}}, "chat")
	var row string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "queue") {
			row = l
		}
	}
	if got := strings.Fields(row); strings.Join(got, " ") != "queue 850 ms 30.3 s 1.25 s 4 ms" {
		t.Errorf("queue row = %q, want its cells 850 ms, 30.3 s, 1.25 s and 4 ms", row)
	}
}
