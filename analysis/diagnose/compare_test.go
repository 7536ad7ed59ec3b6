package diagnose

import (
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/telemetry"
)

func TestCompareWhatGotWorseElsewhere(t *testing.T) {
	// After: prompts were trimmed (prefill better) but the batch was raised,
	// so requests queue (worse elsewhere).
	w := newWorld(61)
	w.tweak = func(w *world, s *sample) {
		if s.inWindow {
			s.in /= 3
			s.queue = w.lognormal(400, 0.4)
		}
	}
	in := w.input()
	c := Compare(in.BaselineRequests, in.Requests, CompareOptions{})
	if !contains(c.Better, ComponentPrefill) || contains(c.Better, "input_tokens") {
		t.Errorf("better = %v, want prefill and not the input tokens", c.Better)
	}
	// Shorter prompts are a change of workload, neither better nor worse.
	if !contains(c.Changed, "input_tokens") || contains(c.Worse, "input_tokens") {
		t.Errorf("changed = %v, worse = %v; want input_tokens changed", c.Changed, c.Worse)
	}
	if !strings.Contains(c.Summary, "The workload changed: input tokens p95") || strings.Contains(c.Summary, "input_tokens") {
		t.Errorf("summary %q does not name the workload change in words", c.Summary)
	}
	if !contains(c.Worse, ComponentQueue) || !contains(c.Worse, ComponentTTFT) {
		t.Errorf("worse = %v", c.Worse)
	}
	if contains(c.Worse, ComponentDecode) || contains(c.Better, ComponentDecode) {
		t.Errorf("decode did not change: better %v worse %v", c.Better, c.Worse)
	}
	if !strings.Contains(c.Summary, "worse elsewhere: queue p95") {
		t.Errorf("summary %q", c.Summary)
	}
	for _, ch := range c.Changes {
		if ch.Name != ComponentQueue {
			continue
		}
		if ch.Delta.P95 == nil || ch.Ratio.P95 == nil || *ch.Ratio.P95 < 10 {
			t.Errorf("queue change %+v", ch)
		}
		if got := *ch.After.P95 - *ch.Before.P95; got != *ch.Delta.P95 {
			t.Errorf("delta %v != after − before %v", *ch.Delta.P95, got)
		}
	}
}

func TestCompareSameWindows(t *testing.T) {
	for seed := int64(70); seed < 75; seed++ {
		w := newWorld(seed)
		in := w.input()
		c := Compare(in.BaselineRequests, in.Requests, CompareOptions{})
		if len(c.Worse) != 0 || len(c.Better) != 0 {
			t.Errorf("seed %d: jitter reported as change: better %v worse %v", seed, c.Better, c.Worse)
		}
		if c.Summary != "Nothing changed beyond noise." {
			t.Errorf("summary %q", c.Summary)
		}
	}
}

func TestDirection(t *testing.T) {
	tests := []struct {
		before, after, minAbs float64
		higher                bool
		want                  string
	}{
		{100, 200, 50, false, "worse"},
		{100, 140, 50, false, "same"},   // 40 ms: below the absolute floor
		{1000, 1100, 50, false, "same"}, // 10 %: below the relative floor
		{200, 100, 50, false, "better"},
		{50, 20, 2, true, "worse"}, // tok/s fell
		{0, 100, 50, false, "worse"},
		{nan, 100, 50, false, "unknown"},
	}
	for _, tc := range tests {
		if got := direction(tc.before, tc.after, tc.minAbs, tc.higher); got != tc.want {
			t.Errorf("direction(%v → %v) = %s, want %s", tc.before, tc.after, got, tc.want)
		}
	}
}

// A side whose requests start well inside its window says where; a full
// side and a comparison without windows say nothing.
func TestCompareSaysWhereDataStarts(t *testing.T) {
	w := newWorld(62)
	in := w.input()
	late, first := startingAt(in.BaselineRequests, in.Baseline.From.Add(in.Baseline.Duration()/2))
	c := Compare(late, in.Requests, CompareOptions{Before: in.Baseline, After: in.Window})
	if c.BeforeDataFrom == nil || !c.BeforeDataFrom.Equal(first) || c.AfterDataFrom != nil {
		t.Errorf("before_data_from %v (want %v), after_data_from %v (want none)", c.BeforeDataFrom, first, c.AfterDataFrom)
	}
	if c := Compare(late, in.Requests, CompareOptions{}); c.BeforeDataFrom != nil {
		t.Errorf("without windows: before_data_from %v", c.BeforeDataFrom)
	}
}

// A few cold starts leave the cold-start wait's p95 over every request at
// 0, but the cold starts row says how many were held.
func TestCompareColdStarts(t *testing.T) {
	w := newWorld(63)
	in := w.input()
	for i := range in.Requests {
		if i%33 == 0 { // 3 %
			in.Requests[i].ColdStart, in.Requests[i].ColdStartWait = true, telemetry.Ptr(20_000.0)
		}
	}
	c := Compare(in.BaselineRequests, in.Requests, CompareOptions{})
	var held, wait *Change
	for i := range c.Changes {
		switch c.Changes[i].Name {
		case MetricColdStarts:
			held = &c.Changes[i]
		case ComponentColdStartWait:
			wait = &c.Changes[i]
		}
	}
	if held == nil || wait == nil {
		t.Fatalf("changes %v lack the cold starts or the cold-start wait", c.Changes)
	}
	if wait.Direction != "same" {
		t.Errorf("cold-start wait over every request: %s, want same (p95 0 → 0)", wait.Direction)
	}
	if held.Direction != "worse" || *held.Before.P95 != 0 || *held.After.P95 < 0.029 || *held.After.P95 > 0.032 || held.Unit != "ratio" {
		t.Errorf("cold starts %+v: want 0 → ~3 %%, worse", held)
	}
	if !contains(c.Worse, MetricColdStarts) || !strings.Contains(c.Summary, "cold starts p95 0 % → 3 %") {
		t.Errorf("worse %v, summary %q", c.Worse, c.Summary)
	}
}
