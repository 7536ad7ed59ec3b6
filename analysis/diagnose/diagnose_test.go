package diagnose

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// explain renders a diagnosis for failure messages.
func explain(d Diagnosis) string {
	var b strings.Builder
	b.WriteString(string(d.Verdict) + " (" + strings.TrimSpace(fmtR(d.Confidence)) + "): " + d.Summary + "\n")
	for _, e := range d.Evidence {
		b.WriteString("  " + e.Text + "\n")
	}
	return b.String()
}

// evidenceText joins every evidence sentence.
func evidenceText(d Diagnosis) string {
	var texts []string
	for _, e := range d.Evidence {
		texts = append(texts, e.Text)
	}
	return strings.Join(texts, "\n")
}

// figure returns the first evidence figure with that name.
func figure(d Diagnosis, name string) (float64, bool) {
	for _, e := range d.Evidence {
		if v, ok := e.Figures[name]; ok {
			return v, true
		}
	}
	return 0, false
}

func TestPlantedIncidents(t *testing.T) {
	tests := []struct {
		name     string
		plant    func(*world)
		verdict  Verdict
		minConf  float64
		maxConf  float64
		mentions []string // substrings the evidence must contain
		summary  []string // substrings the summary must contain
	}{
		{
			name:     "queue saturation",
			plant:    func(w *world) { queueSaturation(w) },
			verdict:  VerdictQueueing,
			minConf:  0.8,
			maxConf:  0.97,
			mentions: []string{"queue p95", "KV cache 9", "r = 0.", "requests waiting at peak", "TTFT p95"},
			summary:  []string{"TTFT p95 rose from", "queued on vllm while the KV cache was full"},
		},
		{
			name:     "cold start after scale from zero",
			plant:    coldStartFromZero,
			verdict:  VerdictColdStart,
			minConf:  0.75,
			maxConf:  0.97,
			mentions: []string{"cold-start wait p95", "0 → 1 replicas at 14:02:00", "vllm-b", "were cold starts"},
			summary:  []string{"held while a new instance started (scale 0 → 1 at 14:02:00)"},
		},
		{
			name:     "long-prompt prefill surge",
			plant:    prefillSurge,
			verdict:  VerdictPrefill,
			minConf:  0.75,
			maxConf:  0.97,
			mentions: []string{"prefill p95", "input tokens p50", "TTFT follows prompt length"},
			summary:  []string{"prompts got longer"},
		},
		{
			name:     "network or gateway delay",
			plant:    gatewayDelay,
			verdict:  VerdictNetwork,
			minConf:  0.75,
			maxConf:  0.97,
			mentions: []string{"network p95", "The server is not slower"},
			summary:  []string{"network or gateway"},
		},
		{
			name:     "slow retrieval",
			plant:    slowRetrieval,
			verdict:  VerdictPreInference,
			minConf:  0.75,
			maxConf:  0.97,
			mentions: []string{"pre-inference p95", "The model call is unchanged", "route /search"},
			summary:  []string{"retrieval, tools"},
		},
		{
			name:     "memory-bound decode",
			plant:    memoryBoundDecode,
			verdict:  VerdictDecode,
			minConf:  0.75,
			maxConf:  0.97,
			mentions: []string{"ITL p95", "tok/s", "ITL p95 rose and fell with the batch size", "requests running"},
			summary:  []string{"E2E p95 rose", "memory-bound"},
		},
		{
			name:     "managed API rate limits",
			plant:    rateLimited,
			verdict:  VerdictErrors,
			minConf:  0.75,
			maxConf:  0.97,
			mentions: []string{"Error rate 0 % →", "rate limits (429) 8", "server errors (5xx)", "Retries within a task", "1 retry per failed task"},
			summary:  []string{"Errors & rate limits:", "of requests failed (baseline 0 %), 8", "of them rate limits (429)"},
		},
		{
			name:     "managed API provider slowdown",
			plant:    providerSlowdown,
			verdict:  VerdictProvider,
			minConf:  0.75,
			maxConf:  0.97,
			mentions: []string{"provider TTFT p95", "bundled", "Prompts did not get longer", "does not follow prompt length"},
			summary:  []string{"openai gpt-4o"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, seed := range []int64{1, 2, 3} {
				w := newWorld(seed)
				tc.plant(w)
				d := Diagnose(w.input())
				if d.Verdict != tc.verdict {
					t.Fatalf("seed %d: verdict %s, want %s\n%s", seed, d.Verdict, tc.verdict, explain(d))
				}
				if d.Confidence < tc.minConf || d.Confidence > tc.maxConf {
					t.Errorf("seed %d: confidence %.2f outside [%.2f, %.2f]\n%s", seed, d.Confidence, tc.minConf, tc.maxConf, explain(d))
				}
				text := evidenceText(d)
				for _, m := range tc.mentions {
					if !strings.Contains(text, m) {
						t.Errorf("seed %d: evidence lacks %q\n%s", seed, m, explain(d))
					}
				}
				for _, m := range tc.summary {
					if !strings.Contains(d.Summary, m) {
						t.Errorf("seed %d: summary lacks %q: %s", seed, m, d.Summary)
					}
				}
				if strings.Count(d.Summary, ". ") > 0 || !strings.HasSuffix(d.Summary, ".") {
					t.Errorf("seed %d: summary is not one sentence: %q", seed, d.Summary)
				}
				for i, e := range d.Evidence {
					if e.N != i+1 {
						t.Errorf("evidence %d numbered %d", i+1, e.N)
					}
				}
				if d.Answers.Cause != d.Verdict {
					t.Errorf("answers.cause %s != verdict %s", d.Answers.Cause, d.Verdict)
				}
			}
		})
	}
}

func TestQueueingEvidenceFigures(t *testing.T) {
	w := newWorld(11)
	queueSaturation(w)
	d := Diagnose(w.input())
	if d.Verdict != VerdictQueueing {
		t.Fatalf("verdict %s\n%s", d.Verdict, explain(d))
	}
	if kv, ok := figure(d, "kv_max"); !ok || kv < 0.95 {
		t.Errorf("kv_max = %v (%v), want ≥ 0.95", kv, ok)
	}
	if r, ok := figure(d, "r_kv_ttft_p99"); !ok || r < 0.5 {
		t.Errorf("r(kv, TTFT p99) = %v (%v), want ≥ 0.5", r, ok)
	}
	if waiting, ok := figure(d, "waiting_max"); !ok || waiting < 10 {
		t.Errorf("waiting_max = %v, want ≥ 10", waiting)
	}
	q := d.Components[ComponentQueue]
	if q.P95 == nil || q.BaselineP95 == nil || *q.P95 < 1000 || *q.BaselineP95 > 50 {
		t.Errorf("queue p95 %v baseline %v", val(q.P95), val(q.BaselineP95))
	}
	if exp, _ := figure(d, "explained"); exp < 0.8 {
		t.Errorf("queue explains %.2f of the TTFT growth, want ≥ 0.8", exp)
	}
	if d.Answers.Bound == nil || d.Answers.Bound.Kind != "queue" {
		t.Errorf("bound = %+v, want queue", d.Answers.Bound)
	}
}

func TestBubbleUpFindsBadInstance(t *testing.T) {
	w := newWorld(5)
	queueSaturation(w, "vllm-7f9c-2")
	d := Diagnose(w.input())
	if d.Verdict != VerdictQueueing {
		t.Fatalf("verdict %s\n%s", d.Verdict, explain(d))
	}
	if len(d.BubbleUp) == 0 {
		t.Fatal("no bubble-up")
	}
	top := d.BubbleUp[0]
	if top.Key != KeyInstance || top.Value != "vllm-7f9c-2" {
		t.Fatalf("top attribution %s=%s, want instance=vllm-7f9c-2: %+v", top.Key, top.Value, d.BubbleUp)
	}
	if top.SlowShare < 0.8 || top.FastShare > 0.35 {
		t.Errorf("shares slow %.2f fast %.2f", top.SlowShare, top.FastShare)
	}
	if top.BaselineShare == nil || *top.BaselineShare < 0.25 || *top.BaselineShare > 0.42 {
		t.Errorf("baseline share %v, want about a third", top.BaselineShare)
	}
	if !strings.Contains(evidenceText(d), "of slow requests hit instance vllm-7f9c-2, ") {
		t.Errorf("evidence lacks the bubble-up sentence\n%s", explain(d))
	}
	for i := 1; i < len(d.BubbleUp); i++ {
		if d.BubbleUp[i].Difference > d.BubbleUp[i-1].Difference {
			t.Fatalf("bubble-up not sorted by difference: %+v", d.BubbleUp)
		}
	}
	if len(d.BubbleUp) > maxAttributions {
		t.Errorf("%d attributions, want ≤ %d", len(d.BubbleUp), maxAttributions)
	}
}

func TestBubbleUpUsesExtraAttributes(t *testing.T) {
	w := newWorld(6)
	gatewayDelay(w)
	in := w.input()
	// Tag a region; the slowest requests are all in eu-west.
	in.Attributes = map[string]map[string]string{}
	slowest := map[string]bool{}
	ttft := values(in.Requests, ComponentTTFT)
	slow, _ := splitSlow(ttft, stats.Quantile(ttft, 0.9))
	for _, i := range slow {
		slowest[in.Requests[i].SpanID] = true
	}
	for i, r := range in.Requests {
		region := "us-east"
		if slowest[r.SpanID] || i%10 == 0 {
			region = "eu-west"
		}
		in.Attributes[r.SpanID] = map[string]string{"region": region}
	}
	d := Diagnose(in)
	found := false
	for _, a := range d.BubbleUp {
		if a.Key == "region" && a.Value == "eu-west" {
			found = true
			if a.SlowShare != 1 {
				t.Errorf("eu-west slow share %.2f, want 1", a.SlowShare)
			}
		}
	}
	if !found {
		t.Errorf("region=eu-west not in bubble-up: %+v", d.BubbleUp)
	}
}

func TestMixedQueueingWinsPrefillInEvidence(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		w := newWorld(seed)
		queueSaturation(w)
		queue := w.tweak
		w.tweak = func(w *world, s *sample) {
			queue(w, s)
			if s.inWindow && w.rng.Float64() < 0.25 {
				s.in *= 3 // a smaller prefill regression alongside
			}
		}
		d := Diagnose(w.input())
		if d.Verdict != VerdictQueueing {
			t.Fatalf("seed %d: verdict %s, want queueing\n%s", seed, d.Verdict, explain(d))
		}
		text := evidenceText(d)
		if !strings.Contains(text, "Also: prefill p95") {
			t.Errorf("seed %d: prefill not in evidence\n%s", seed, explain(d))
		}
	}
}

func TestHealthyJitterIsHealthy(t *testing.T) {
	for seed := int64(100); seed < 120; seed++ {
		w := newWorld(seed)
		d := Diagnose(w.input())
		if d.Verdict != VerdictHealthy {
			t.Errorf("seed %d: verdict %s, want healthy\n%s", seed, d.Verdict, explain(d))
			continue
		}
		if d.Confidence < 0.5 {
			t.Errorf("seed %d: healthy confidence %.2f < 0.5", seed, d.Confidence)
		}
		if !strings.HasPrefix(d.Summary, "Healthy") {
			t.Errorf("seed %d: summary %q", seed, d.Summary)
		}
	}
}

func TestHealthyJitterManagedAPI(t *testing.T) {
	for seed := int64(200); seed < 210; seed++ {
		w := newWorld(seed)
		w.managed, w.gauges, w.instances = true, nil, []string{""}
		if d := Diagnose(w.input()); d.Verdict != VerdictHealthy {
			t.Errorf("seed %d: verdict %s, want healthy\n%s", seed, d.Verdict, explain(d))
		}
	}
}

func TestNoBaseline(t *testing.T) {
	t.Run("healthy is judged against the window's p50", func(t *testing.T) {
		for seed := int64(300); seed < 305; seed++ {
			w := newWorld(seed)
			w.noBase = true
			d := Diagnose(w.input())
			if d.Verdict != VerdictHealthy {
				t.Fatalf("seed %d: verdict %s\n%s", seed, d.Verdict, explain(d))
			}
			if !strings.Contains(d.Summary, "No baseline requests") || !strings.Contains(d.Summary, "p50") {
				t.Errorf("summary must say how it was judged: %q", d.Summary)
			}
			if d.Answers.Compare != nil {
				t.Error("compare without a baseline")
			}
		}
	})
	t.Run("a queue spike stands out against the window itself", func(t *testing.T) {
		w := newWorld(7)
		w.noBase = true
		queueSaturation(w)
		// A two-minute spike: without a baseline, an incident that fills
		// half the window moves the p50 it is judged against.
		queue := w.tweak
		w.tweak = func(w *world, s *sample) {
			if s.t.Before(w.window.From.Add(5 * time.Minute)) {
				queue(w, s)
			}
		}
		d := Diagnose(w.input())
		if d.Verdict != VerdictQueueing {
			t.Fatalf("verdict %s\n%s", d.Verdict, explain(d))
		}
		if !strings.Contains(d.Summary, "no baseline") {
			t.Errorf("summary %q", d.Summary)
		}
	})
	t.Run("with an SLO it is judged against the SLO", func(t *testing.T) {
		w := newWorld(8)
		w.noBase = true
		in := w.input()
		in.SLO = &SLO{Percentile: 95, TTFTMs: 500, TPOT: 30}
		d := Diagnose(in)
		if d.Verdict != VerdictHealthy || !strings.Contains(d.Summary, "SLO") {
			t.Fatalf("verdict %s: %s", d.Verdict, d.Summary)
		}
		if d.Answers.SLO == nil || !d.Answers.SLO.Met {
			t.Errorf("SLO answer %+v", d.Answers.SLO)
		}
	})
}

func TestSLO(t *testing.T) {
	t.Run("met", func(t *testing.T) {
		w := newWorld(21)
		in := w.input()
		in.SLO = &SLO{Percentile: 0.95, TTFTMs: 500, TPOT: 30}
		d := Diagnose(in)
		s := d.Answers.SLO
		if s == nil || !s.Met || !s.TTFT.Met || !s.TPOT.Met {
			t.Fatalf("SLO %+v", s)
		}
		// ITL ~20 ms ⇒ ~50 tok/s at p50, p95 somewhat below.
		if *s.TPOT.Actual < 30 || *s.TPOT.Actual > 55 || *s.TTFT.Actual > 500 {
			t.Errorf("TPOT %.1f tok/s, TTFT %.0f ms", *s.TPOT.Actual, *s.TTFT.Actual)
		}
		if d.Verdict != VerdictHealthy || !strings.Contains(d.Summary, "SLO holds") {
			t.Errorf("verdict %s: %s", d.Verdict, d.Summary)
		}
		if !strings.Contains(s.Text, "TTFT p95") || !strings.Contains(s.Text, "met") {
			t.Errorf("SLO text %q", s.Text)
		}
	})
	t.Run("missed without a regression: what dominates", func(t *testing.T) {
		w := newWorld(22)
		w.prefillPerToken = 0.6 // chronically long prefill, baseline alike
		in := w.input()
		in.SLO = &SLO{Percentile: 95, TTFTMs: 500}
		d := Diagnose(in)
		if d.Answers.SLO == nil || d.Answers.SLO.Met {
			t.Fatalf("SLO should be missed: %+v", d.Answers.SLO)
		}
		if d.Verdict != VerdictPrefill {
			t.Fatalf("verdict %s, want prefill\n%s", d.Verdict, explain(d))
		}
		if !strings.Contains(d.Summary, "misses the SLO") {
			t.Errorf("summary %q", d.Summary)
		}
	})
	t.Run("TPOT missed", func(t *testing.T) {
		w := newWorld(23)
		in := w.input()
		in.SLO = &SLO{Percentile: 99, TPOT: 80}
		d := Diagnose(in)
		if d.Answers.SLO.Met || d.Answers.SLO.TPOT.Met || d.Verdict != VerdictDecode {
			t.Fatalf("verdict %s SLO %+v\n%s", d.Verdict, d.Answers.SLO, explain(d))
		}
	})
}

func TestAnswers(t *testing.T) {
	w := newWorld(31)
	memoryBoundDecode(w)
	d := Diagnose(w.input())
	a := d.Answers
	if a.Workload == nil || a.Workload.Kind != "decode-heavy" {
		t.Errorf("workload %+v, want decode-heavy", a.Workload)
	} else if s := *a.Workload.InputTokenShare; s < 0.7 || s > 0.9 {
		t.Errorf("input token share %.2f, want ~0.8 (800 in, 200 out)", s)
	}
	// The label and its sentence agree: decode's share, and a word on why
	// the input tokens' larger share does not make it prefill-heavy.
	if w := a.Workload; w != nil && (w.Basis != "time" || !strings.HasPrefix(w.Text, "Decode-heavy by time: ") ||
		!strings.Contains(w.Text, "of model time is writing the answer, although input tokens are 8")) {
		t.Errorf("workload text %q (basis %q) does not match its label", w.Text, w.Basis)
	}
	if a.Decode == nil || a.Decode.Kind != "memory-bound" || a.Decode.RunningR == nil || *a.Decode.RunningR < 0.8 {
		t.Errorf("decode %+v", a.Decode)
	}
	if a.Compare == nil {
		t.Fatal("no compare")
	}
	if !contains(a.Compare.Worse, ComponentITL) || !contains(a.Compare.Worse, "tpot") {
		t.Errorf("compare worse = %v, want itl and tpot", a.Compare.Worse)
	}
	if a.Bound == nil || a.Bound.Kind != "prefill" {
		t.Errorf("bound %+v: a healthy TTFT is prefill-bound", a.Bound)
	}
	if a.Cost != nil {
		t.Error("cost without prices must be nil")
	}

	w = newWorld(32)
	w.tweak = func(w *world, s *sample) { s.in, s.out = s.in*20, 10 } // RAG-style: long context, short answer
	d = Diagnose(w.input())
	if d.Answers.Workload.Kind != "prefill-heavy" {
		t.Errorf("workload %+v, want prefill-heavy", d.Answers.Workload)
	}

	w = newWorld(33)
	gatewayDelay(w)
	d = Diagnose(w.input())
	if d.Answers.Decode == nil || d.Answers.Decode.Kind != "compute-bound" {
		t.Errorf("ITL independent of the batch: decode %+v", d.Answers.Decode)
	}
}

func TestEmptyInput(t *testing.T) {
	d := Diagnose(Input{Window: Range{From: t0, To: t0.Add(time.Hour)}})
	if d.Verdict != VerdictHealthy || d.Confidence != 0 || !strings.Contains(d.Summary, "No LLM requests") {
		t.Fatalf("%+v", d)
	}
	if d.Baseline.From != t0.Add(-3*time.Hour) || d.Baseline.To != t0 {
		t.Errorf("default baseline %v", d.Baseline)
	}
	if _, err := json.Marshal(d); err != nil {
		t.Fatal(err)
	}
}

func TestJSONContract(t *testing.T) {
	w := newWorld(41)
	queueSaturation(w)
	in := w.input()
	in.Prices = map[string]Price{"llama-3.1-8b": {InputPerMTok: 0.1, OutputPerMTok: 0.2}}
	in.SLO = &SLO{Percentile: 95, TTFTMs: 500}
	raw, err := json.Marshal(Diagnose(in))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"verdict", "confidence", "summary", "evidence", "ttft", "components", "series", "correlations", "bubble_up", "answers", "requests", "baseline_requests"} {
		if _, ok := got[k]; !ok {
			t.Errorf("missing %q", k)
		}
	}
	if got["verdict"] != "queueing" {
		t.Errorf("verdict %v", got["verdict"])
	}
	ttft := got["ttft"].(map[string]any)
	for _, k := range []string{"p50", "p95", "p99"} {
		if _, ok := ttft[k].(float64); !ok {
			t.Errorf("ttft.%s = %v", k, ttft[k])
		}
	}
	comps := got["components"].(map[string]any)
	for _, c := range Components {
		cs, ok := comps[c].(map[string]any)
		if !ok {
			t.Errorf("components.%s missing", c)
			continue
		}
		for _, k := range []string{"p50", "p95", "p99", "baseline_p95"} {
			if _, ok := cs[k]; !ok {
				t.Errorf("components.%s.%s missing", c, k)
			}
		}
	}
	ev := got["evidence"].([]any)[0].(map[string]any)
	if ev["n"].(float64) != 1 || ev["text"].(string) == "" {
		t.Errorf("evidence[0] = %v", ev)
	}
	answers := got["answers"].(map[string]any)
	for _, k := range []string{"cause", "workload", "bound", "slo", "decode", "compare", "cost"} {
		if answers[k] == nil {
			t.Errorf("answers.%s is null", k)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestColdStartHeldInQueue(t *testing.T) {
	// A decomposition that cannot see the hold files it under queue: the
	// ColdStart flags must still turn the verdict into cold_start.
	w := newWorld(81)
	coldStartFromZero(w)
	hold := w.tweak
	w.tweak = func(w *world, s *sample) {
		hold(w, s)
		s.queue += s.coldWait
		s.coldWait = 0
	}
	d := Diagnose(w.input())
	if d.Verdict != VerdictColdStart {
		t.Fatalf("verdict %s\n%s", d.Verdict, explain(d))
	}
	if !strings.Contains(evidenceText(d), "The hold surfaced as queue time") {
		t.Errorf("evidence\n%s", explain(d))
	}
}

func TestBaselineDefaultsToPrecedingThreeWindows(t *testing.T) {
	w := newWorld(91)
	queueSaturation(w)
	in := w.input()
	in.Baseline = Range{}
	d := Diagnose(in)
	if !d.Baseline.From.Equal(t0.Add(-30*time.Minute)) || !d.Baseline.To.Equal(t0) {
		t.Errorf("baseline %v", d.Baseline)
	}
	if d.Verdict != VerdictQueueing {
		t.Errorf("verdict %s", d.Verdict)
	}
}

func TestSingleSlowRequestWindow(t *testing.T) {
	w := newWorld(95)
	in := w.input()
	// One request in the window, held 5 s in the queue.
	r := in.Requests[0]
	r.Queue = telemetry.Ptr(5000.0)
	r.TTFT = telemetry.Ptr(5000 + *r.Prefill + *r.Network)
	r.E2E = telemetry.Ptr(*r.TTFT + *r.Decode)
	in.Requests = []telemetry.LLMRequest{r}
	d := Diagnose(in)
	if d.Verdict != VerdictQueueing {
		t.Fatalf("verdict %s\n%s", d.Verdict, explain(d))
	}
	if d.Confidence > 0.8 {
		t.Errorf("confidence %.2f from a single request with calm metrics", d.Confidence)
	}
}

func TestTooFewBaselineRequests(t *testing.T) {
	w := newWorld(97)
	in := w.input()
	in.BaselineRequests = in.BaselineRequests[:4]
	d := Diagnose(in)
	if d.Verdict != VerdictHealthy || !strings.Contains(d.Summary, "Only 4 baseline requests") {
		t.Errorf("verdict %s: %q", d.Verdict, d.Summary)
	}
	if d.BaselineRequests != 4 || d.Answers.Compare != nil {
		t.Errorf("baseline requests %d, compare %v", d.BaselineRequests, d.Answers.Compare)
	}
}

// The diagnosis says where a baseline's requests start when data begins
// well inside it, and nothing when the baseline is full.
func TestBaselineDataFrom(t *testing.T) {
	w := newWorld(21)
	in := w.input()
	if d := Diagnose(in); d.BaselineDataFrom != nil {
		t.Errorf("a full baseline gave baseline_data_from %v", d.BaselineDataFrom)
	}
	// Keep the baseline's last fifth only.
	late, first := startingAt(in.BaselineRequests, in.Baseline.To.Add(-in.Baseline.Duration()/5))
	in.BaselineRequests = late
	d := Diagnose(in)
	if d.BaselineDataFrom == nil || !d.BaselineDataFrom.Equal(first) {
		t.Errorf("baseline_data_from %v, want %v", d.BaselineDataFrom, first)
	}
}

// startingAt keeps the requests that start at cut or later, and the
// earliest start among them.
func startingAt(reqs []telemetry.LLMRequest, cut time.Time) (kept []telemetry.LLMRequest, first time.Time) {
	for _, r := range reqs {
		if r.Start.Before(cut) {
			continue
		}
		kept = append(kept, r)
		if first.IsZero() || r.Start.Before(first) {
			first = r.Start
		}
	}
	return kept, first
}

// The SLO answer says met or missed once, then the figures against the
// objective in words.
func TestSLOResultWords(t *testing.T) {
	reqs := make([]telemetry.LLMRequest, 20)
	for i := range reqs {
		reqs[i].TTFT = telemetry.Ptr(2000.0)
		reqs[i].ITL = telemetry.Ptr(25.0)
	}
	res := sloResult(&SLO{TTFTMs: 800, TPOT: 30, Percentile: 95}, reqs)
	want := "SLO missed: TTFT p95 is 2.0 s, over the 800 ms objective; TPOT p95 is 40 tok/s (ITL 25 ms), at or above the 30 tok/s objective."
	if res == nil || res.Text != want {
		t.Errorf("SLO text %q, want %q", res.Text, want)
	}
}

// Requests still waiting at the window's end are evidence of the queue
// the newest buckets under-report: the queue forms in the last minute, so
// the window's finished requests still look healthy.
func TestWaitingAtWindowEnd(t *testing.T) {
	w := newWorld(12)
	w.gauges = func(w *world, ts time.Time, inst string) (float64, float64, float64) {
		if !ts.Before(w.window.To.Add(-time.Minute)) {
			return 0.97, 20, 48
		}
		return healthyGauges(w, ts, inst)
	}
	d := Diagnose(w.input())
	got, ok := figure(d, "waiting_at_end")
	if !ok || got < 60 {
		t.Fatalf("waiting_at_end = %v (%v), want 60 (20 on each of 3 instances)\n%s", got, ok, explain(d))
	}
	if !strings.Contains(explain(d), "60 requests still waiting on the servers at "+w.window.To.Format("15:04")) {
		t.Errorf("no evidence line on the waiting requests:\n%s", explain(d))
	}
	calm := newWorld(12)
	if _, ok := figure(Diagnose(calm.input()), "waiting_at_end"); ok {
		t.Error("a calm window's end reads as a queue")
	}
}
