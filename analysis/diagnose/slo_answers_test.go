package diagnose

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

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
