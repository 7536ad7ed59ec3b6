package diagnose

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

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
