package web

import (
	"testing"
	"unicode/utf8"
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
