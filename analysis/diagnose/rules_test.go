package diagnose

import (
	"strings"
	"testing"
	"time"
)

// Long prompts stall the engine while they are prefilled, so requests that
// arrive meanwhile queue without any KV pressure: the queue grows about as
// much as prefill. The cause is the prompts (fix: shorter prompts, chunked
// prefill), not capacity, so the verdict is prefill with the queue named
// as its consequence. With a full KV cache the same queue is queueing.
func TestQueueBehindLongPrefills(t *testing.T) {
	plant := func(w *world) {
		w.tweak = func(w *world, s *sample) {
			if !s.inWindow {
				return
			}
			if w.rng.Float64() < 0.4 {
				s.in *= 6
			}
			if w.rng.Float64() < 0.5 {
				s.queue = w.lognormal(650, 0.3) // behind others' long prefills
			}
		}
	}
	for _, seed := range []int64{1, 2, 3} {
		w := newWorld(seed)
		plant(w)
		d := Diagnose(w.input())
		if d.Verdict != VerdictPrefill {
			t.Fatalf("seed %d: verdict %s, want prefill\n%s", seed, d.Verdict, explain(d))
		}
		text := evidenceText(d)
		for _, m := range []string{"head-of-line blocking", "without KV pressure", "input tokens p50"} {
			if !strings.Contains(text, m) {
				t.Errorf("seed %d: evidence lacks %q\n%s", seed, m, explain(d))
			}
		}
		if strings.Contains(text, "Also: queue p95") {
			t.Errorf("seed %d: the queue is named twice\n%s", seed, explain(d))
		}
		if _, ok := figure(d, "queue_growth_ms"); !ok {
			t.Errorf("seed %d: no queue_growth_ms figure\n%s", seed, explain(d))
		}

		// The same requests on a server whose KV cache is full: real
		// queueing, prompts or not.
		w = newWorld(seed)
		plant(w)
		w.gauges = func(w *world, _ time.Time, _ string) (float64, float64, float64) {
			return 0.93 + 0.06*w.rng.Float64(), 12, 40
		}
		if d := Diagnose(w.input()); d.Verdict != VerdictQueueing {
			t.Errorf("seed %d, KV full: verdict %s, want queueing\n%s", seed, d.Verdict, explain(d))
		}
	}
}

// Decode time is ITL × output tokens. When neither moved beyond noise, a
// window whose E2E p95 rose on a few longer answers is healthy; when the
// answers are clearly longer, it is decode.
func TestDecodeGrowthWithinNoiseIsHealthy(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		w := newWorld(seed)
		w.tweak = func(w *world, s *sample) {
			if s.inWindow {
				s.out = s.out * 13 / 10 // answers 30 % longer: within noise
				s.itl *= 1.1
			}
		}
		d := Diagnose(w.input())
		if d.Verdict != VerdictHealthy {
			t.Fatalf("seed %d: verdict %s, want healthy\n%s", seed, d.Verdict, explain(d))
		}
		if !strings.Contains(evidenceText(d), "neither decoding speed") {
			t.Errorf("seed %d: evidence does not say why the E2E growth is noise\n%s", seed, explain(d))
		}

		w = newWorld(seed)
		w.tweak = func(w *world, s *sample) {
			if s.inWindow {
				s.out *= 2
			}
		}
		d = Diagnose(w.input())
		if d.Verdict != VerdictDecode || !strings.Contains(d.Summary, "answers got longer") {
			t.Errorf("seed %d: verdict %s, want decode because answers got longer\n%s", seed, d.Verdict, explain(d))
		}
	}
}
