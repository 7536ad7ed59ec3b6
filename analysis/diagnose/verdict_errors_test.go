package diagnose

import (
	"strings"
	"testing"
)

func TestErrorClass(t *testing.T) {
	for in, want := range map[string]string{
		"429": errorRateLimit, "RateLimitError": errorRateLimit, "rate_limit_exceeded": errorRateLimit, "RESOURCE_EXHAUSTED": errorRateLimit,
		"500": errorServer, "503": errorServer, "InternalServerError": errorServer, "overloaded_error": errorServer,
		"504": errorTimeout, "408": errorTimeout, "APITimeoutError": errorTimeout, "timeout": errorTimeout, "DEADLINE_EXCEEDED": errorTimeout,
		"400": errorOther, "AuthenticationError": errorOther, "": errorUnnamed, "  ": errorUnnamed,
	} {
		if got := ErrorClass(in); got != want {
			t.Errorf("ErrorClass(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestErrorClassWords(t *testing.T) {
	for in, want := range map[string]string{"429": "rate limit", "APITimeoutError": "timeout", "502": "server error", "401": "other error", "": ""} {
		if got := ErrorClassWords(in); got != want {
			t.Errorf("ErrorClassWords(%q) = %q, want %q", in, got, want)
		}
	}
}

// failEvery marks every n-th request of reqs failed with errType, from the
// k-th on.
func failEvery(in *Input, window bool, n, k int, errType string) {
	reqs := in.BaselineRequests
	if window {
		reqs = in.Requests
	}
	for i := k; i < len(reqs); i += n {
		reqs[i].Error, reqs[i].ErrorType, reqs[i].TTFT = true, errType, nil
	}
}

// TestErrorsVerdict: the errors verdict takes a window whose error rate
// rose beyond noise; errors that stay as frequent as in the baseline, or
// that ride along a latency regression, are a line of evidence beside the
// verdict the window reaches, and a healthy window with them says so.
func TestErrorsVerdict(t *testing.T) {
	t.Run("steady errors keep a healthy verdict, with a line and less confidence", func(t *testing.T) {
		w := newWorld(11)
		providerSlowdown(w)
		w.tweak = nil // a managed API at its usual speed
		in := w.input()
		clean := Diagnose(in)
		failEvery(&in, false, 22, 0, "429") // ~4.5 % both sides
		failEvery(&in, true, 22, 3, "429")
		d := Diagnose(in)
		if d.Verdict != VerdictHealthy || clean.Verdict != VerdictHealthy {
			t.Fatalf("verdict %s (without errors %s), want healthy\n%s", d.Verdict, clean.Verdict, explain(d))
		}
		if !strings.Contains(evidenceText(d), "Error rate 4.") || !strings.Contains(evidenceText(d), "rate limits (429) 100 %") {
			t.Errorf("no line on the errors\n%s", explain(d))
		}
		if !strings.Contains(d.Summary, "; but 4.") || !strings.Contains(d.Summary, "of requests fail, 100 % of them rate limits (429)") {
			t.Errorf("summary %q does not mention the errors", d.Summary)
		}
		if d.Confidence >= clean.Confidence {
			t.Errorf("confidence %.2f with 4.5 %% errors, %.2f without: want lower", d.Confidence, clean.Confidence)
		}
	})
	t.Run("a few more errors than the baseline stay within noise", func(t *testing.T) {
		w := newWorld(12)
		in := w.input()
		failEvery(&in, false, 50, 0, "503") // 2 % → 2.5 %
		failEvery(&in, true, 40, 1, "503")
		if d := Diagnose(in); d.Verdict != VerdictHealthy {
			t.Errorf("verdict %s, want healthy\n%s", d.Verdict, explain(d))
		}
	})
	t.Run("a latency regression keeps its verdict under moderate errors", func(t *testing.T) {
		w := newWorld(13)
		queueSaturation(w)
		in := w.input()
		failEvery(&in, true, 17, 2, "APITimeoutError") // ~6 %, none before
		d := Diagnose(in)
		if d.Verdict != VerdictQueueing {
			t.Fatalf("verdict %s, want queueing\n%s", d.Verdict, explain(d))
		}
		if !strings.Contains(evidenceText(d), "Error rate 0 % → 5.") || !strings.Contains(evidenceText(d), "timeouts 100 %") {
			t.Errorf("no line on the errors\n%s", explain(d))
		}
	})
	t.Run("the store's counts of a sampled window break the errors down", func(t *testing.T) {
		w := newWorld(14)
		in := w.input()
		failEvery(&in, true, 4, 0, "") // the loaded rows name no error type
		in.ErrorTypes = &ErrorTypeCounts{Window: map[string]int{"429": 300, "500": 100}, Baseline: map[string]int{"429": 10}}
		in.WindowTotal, in.BaselineTotal = 1600, 4800
		d := Diagnose(in)
		if d.Verdict != VerdictErrors {
			t.Fatalf("verdict %s, want errors\n%s", d.Verdict, explain(d))
		}
		if v, _ := figure(d, "error_rate"); v != 0.25 {
			t.Errorf("error_rate %v, want 400 / 1600\n%s", v, explain(d))
		}
		if !strings.Contains(evidenceText(d), "rate limits (429) 75 % (300), server errors (5xx) 25 % (100)") {
			t.Errorf("breakdown not from the counts\n%s", explain(d))
		}
		if !strings.Contains(d.Summary, "25 % of requests failed (baseline 0.2 %), 75 % of them rate limits (429)") {
			t.Errorf("summary %q", d.Summary)
		}
	})
	t.Run("without a baseline only a high rate is a verdict", func(t *testing.T) {
		for _, c := range []struct {
			every int
			want  Verdict
		}{{20, VerdictHealthy}, {5, VerdictErrors}} {
			w := newWorld(15)
			w.noBase = true
			in := w.input()
			failEvery(&in, true, c.every, 0, "429")
			if d := Diagnose(in); d.Verdict != c.want {
				t.Errorf("1 in %d failed: verdict %s, want %s\n%s", c.every, d.Verdict, c.want, explain(d))
			}
		}
	})
}
