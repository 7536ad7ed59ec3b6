package web

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// A requests row stays one line: models lose their organisation, long
// instance names their middle, and what tells pods apart (the head and
// the last part) stays; short names and any text stay valid UTF-8.
func TestRequestRowNames(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct"},
		{"gpt-4o-mini", "gpt-4o-mini"},
		{"org/", "org/"},
	} {
		if got := shortModel(c.in); got != c.want {
			t.Errorf("shortModel(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"vllm-llama-rnsx4p229s-qf7wj", 18, "vllm-llama…qf7wj"},
		{"vllm-0", 18, "vllm-0"},
		{"exactly-eighteen-c", 18, "exactly-eighteen-c"},
		{"ip-10-0-12-34.eu-west-1.compute.internal", 18, "ip-10-0…internal"},
		{"αβγδεζηθικλμνξοπρστυφχψω", 10, "αβγδ…υφχψω"},
		{"a-very-long-name-with-its-last-part-longer-than-eight", 12, "a-very…eight"},
	} {
		got := clipMiddle(c.in, c.n)
		if got != c.want {
			t.Errorf("clipMiddle(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) > c.n {
			t.Errorf("clipMiddle(%q, %d) = %q: invalid or longer than %d", c.in, c.n, got, c.n)
		}
	}
}

// Instants read as the diagnosis writes dates, day before month: the time
// alone today, the day this year, the year before that.
func TestHumanTimeWritesDayBeforeMonth(t *testing.T) {
	now := time.Date(2026, 12, 5, 15, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Date(2026, 12, 5, 11, 24, 12, 0, time.UTC), "11:24:12"},
		{time.Date(2026, 12, 2, 9, 5, 30, 0, time.UTC), "2 Dec 09:05"},
		{time.Date(2025, 3, 14, 9, 5, 0, 0, time.UTC), "14 Mar 2025 09:05"},
		{time.Time{}, noValue},
	} {
		if got := humanTime(c.at, now); got != c.want {
			t.Errorf("humanTime(%s) = %q, want %q", c.at, got, c.want)
		}
	}
	r := pageRange{Custom: true, Range: diagnose.Range{From: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)}}
	if got, want := r.label(), "2 Dec 13:00 – 14:00 UTC"; got != want {
		t.Errorf("custom range label %q, want %q", got, want)
	}
}
