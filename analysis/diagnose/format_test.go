package diagnose

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	tests := []struct{ got, want string }{
		{fmtMs(0.42), "0.4 ms"},
		{fmtMs(4), "4 ms"},
		{fmtMs(12.4), "12 ms"},
		{fmtMs(180), "180 ms"},
		{fmtMs(999.4), "999 ms"},
		{fmtMs(999.7), "1.0 s"},
		{fmtMs(1900), "1.9 s"},
		{fmtMs(2000), "2.0 s"},
		{fmtMs(2149), "2.15 s"},
		{fmtMs(12_345), "12.3 s"},
		{fmtDelta(-40), "−40 ms"},
		{fmtDelta(1900), "+1.9 s"},
		{fmtPct(0.874), "87 %"},
		{fmtPctRange(0.97, 0.99), "97–99 %"},
		{fmtPctRange(0.991, 0.993), "99 %"},
		{fmtTokens(900), "900"},
		{fmtTokens(7200), "7.2k"},
		{fmtTokens(16_000), "16k"},
		{fmtRatio(1.43), "1.4×"},
		{fmtRatio(12.2), "12×"},
		{fmtClock(time.Date(2026, 3, 14, 14, 2, 10, 0, time.UTC)), "14:02:10"},
		{fmtWidth(30 * time.Second), "30 s"},
		{fmtWidth(5 * time.Minute), "5 min"},
		{fmtWidth(time.Hour), "1 h"},
		{pctName(0.95), "95"},
		{pctName(0.999), "99.9"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// Counts in evidence and snapshot texts take the noun's right number.
func TestCountNouns(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Plural(1, "request"), "1 request"},
		{Plural(0, "span"), "0 spans"},
		{Plural(24, "request"), "24 requests"},
		{gaugeNoun(1, "request"), "1 request"},
		{gaugeNoun(39, "request"), "39 requests"},
		{gaugeNoun(2.5, "request"), "2.5 requests"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// A correlation reads as words first, the coefficient after, and a shift
// between the series as a time.
func TestMovedWithReadsPlainly(t *testing.T) {
	a := &analysis{width: 30 * time.Second}
	r := func(x float64) *float64 { return &x }
	for _, tc := range []struct {
		c    Correlation
		want string
	}{
		{Correlation{Pearson: r(0.79), Per: "30 s bucket"}, "TTFT p99 rose and fell with it (r = 0.79 per 30 s bucket)"},
		{Correlation{Pearson: r(0.35), Per: "30 s bucket", Lag: 2}, "TTFT p99 tended to rise with it (r = 0.35 per 30 s bucket, 1 min behind it)"},
		{Correlation{Pearson: r(0.1), Per: "30 s bucket", Lag: -1}, "TTFT p99 barely moved with it (r = 0.10 per 30 s bucket, 30 s ahead of it)"},
		{Correlation{Pearson: r(-0.6), Per: "request"}, "TTFT p99 moved against it (r = -0.60 per request)"},
	} {
		if got := a.movedWith(tc.c, "TTFT p99", "it"); got != tc.want {
			t.Errorf("movedWith(%+v) = %q, want %q", tc.c, got, tc.want)
		}
	}
}
