package diagnose

import (
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/analysis/stats"
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
