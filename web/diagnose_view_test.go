package web

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/share"
)

// A sampled window says so next to its counts; a complete one does not.
func TestDiagnoseViewNamesTheSample(t *testing.T) {
	now := time.Now().UTC()
	w := diagnose.Range{From: now.Add(-time.Hour), To: now}
	data := func(total, analyzed int) *share.DiagnoseData {
		return &share.DiagnoseData{Params: share.DiagnoseParams{Window: w},
			Diagnosis: diagnose.Diagnosis{Window: w, Baseline: diagnose.DefaultBaseline(w), Requests: total, BaselineRequests: 3 * total,
				AnalyzedRequests: analyzed, Verdict: diagnose.VerdictHealthy}}
	}
	sampled := diagnoseView(data(1_234_567, 50_000), true).CountsText
	if !strings.Contains(sampled, "uniform sample of 50\u202f000") {
		t.Errorf("sampled counts text: %q", sampled)
	}
	if full := diagnoseView(data(900, 900), true).CountsText; strings.Contains(full, "sample") {
		t.Errorf("complete window mentions a sample: %q", full)
	}
}

// TestJoinSentences: a trace snapshot's notice has one space between its
// sentences, whichever of them are empty.
func TestJoinSentences(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"Snapshot taken.", "Expires in 1 day.", "", "Requests are behind."}, "Snapshot taken. Expires in 1 day. Requests are behind."},
		{[]string{"Snapshot taken.", "", " ", ""}, "Snapshot taken."},
		{[]string{"", "A. "}, "A."},
	} {
		if got := joinSentences(c.in...); got != c.want {
			t.Errorf("joinSentences(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
