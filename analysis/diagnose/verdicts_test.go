package diagnose

import (
	"fmt"
	"strings"
	"testing"
)

// Every part the attribution can rank must lead to a verdict, and every
// verdict must read in words on the page.
func TestVerdictTableCoversEveryPart(t *testing.T) {
	parts := []string{ComponentQueue, ComponentPrefill, ComponentNetwork, ComponentColdStartWait,
		componentBundled, ComponentDecode, ComponentPreInference}
	for _, c := range parts {
		if verdicts.byComponent[c] == nil {
			t.Errorf("no verdict is won by the part %q", c)
		}
	}
	want := []Verdict{VerdictColdStart, VerdictDecode, VerdictErrors, VerdictHealthy, VerdictNetwork,
		VerdictPreInference, VerdictPrefill, VerdictProvider, VerdictQueueing}
	var got []Verdict
	for _, r := range verdicts.rules {
		got = append(got, r.Verdict)
		if r.Verdict != VerdictHealthy && r.CauseWords == "" {
			t.Errorf("%s has no cause words", r.Verdict)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("verdicts %v, want %v (sorted by name)", got, want)
	}
	if l := VerdictColdStart.Label(); l != "Cold start" {
		t.Errorf("cold_start label %q", l)
	}
	if l := Verdict("nonsense").Label(); l != "" {
		t.Errorf("unknown verdict has label %q", l)
	}
	if w := VerdictHealthy.CauseWords(); w != "" {
		t.Errorf("healthy names a cause: %q", w)
	}
}

func TestVerdictTableRefusesDuplicates(t *testing.T) {
	for _, r := range []verdictRule{
		{Verdict: VerdictQueueing, Label: "Again"},
		{Verdict: "queue_again", Label: "Queue again", Component: ComponentQueue},
		{Verdict: "nameless"},
	} {
		if _, err := verdicts.with(r); err == nil {
			t.Errorf("rule %q accepted", r.Verdict)
		}
	}
}

// A verdict that is not a part of the latency takes the window through
// Claim, healthy latency or not; without its signal the window keeps the
// verdict it had. The rule here stands in for the errors verdict, in a
// table without the real one.
func TestClaimTakesTheWindow(t *testing.T) {
	errorsRule := verdictRule{
		Verdict:    "failing",
		Label:      "Failing",
		CauseWords: "Requests fail",
		Claim: func(a *analysis) bool {
			failed := 0
			for i := range a.in.Requests {
				if a.in.Requests[i].Error {
					failed++
				}
			}
			share := float64(failed) / float64(len(a.in.Requests))
			if share < 0.2 {
				return false
			}
			a.add(fmt.Sprintf("%s of requests failed.", fmtPct(share)), figures("error_share", share))
			a.cause = "requests failed"
			a.bonus += 0.3
			return true
		},
		Summary: func(a *analysis) string { return "Requests fail: " + a.cause + "." },
	}
	without := &verdictTable{}
	for _, r := range verdicts.rules {
		if r.Verdict != VerdictErrors {
			if err := without.add(*r); err != nil {
				t.Fatal(err)
			}
		}
	}
	rules, err := without.with(errorsRule)
	if err != nil {
		t.Fatal(err)
	}

	w := newWorld(1)
	in := w.input()
	if d := diagnoseWith(in, rules); d.Verdict != VerdictHealthy {
		t.Fatalf("without failures: verdict %s, want healthy\n%s", d.Verdict, explain(d))
	}
	for i := range in.Requests {
		in.Requests[i].Error = i%3 == 0
	}
	d := diagnoseWith(in, rules)
	if d.Verdict != "failing" || d.Answers.Cause != "failing" {
		t.Fatalf("verdict %s, want failing\n%s", d.Verdict, explain(d))
	}
	if d.Summary != "Requests fail: requests failed." {
		t.Errorf("summary %q", d.Summary)
	}
	if v, ok := figure(d, "error_share"); !ok || v < 0.3 || v > 0.4 {
		t.Errorf("error_share %v (%v)\n%s", v, ok, explain(d))
	}
	if d.Confidence != round2(confBase+0.3) {
		t.Errorf("confidence %.2f, want %.2f", d.Confidence, confBase+0.3)
	}
	if !strings.HasPrefix(d.Evidence[0].Text, "33 %") || d.Evidence[0].N != 1 {
		t.Errorf("evidence %+v", d.Evidence)
	}
	// The registered table's errors rule reads the same failures.
	if d := Diagnose(in); d.Verdict != VerdictErrors {
		t.Errorf("registered rules: verdict %s, want errors", d.Verdict)
	}
}
