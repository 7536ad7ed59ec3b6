package diagnose

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// FormatMs is the one latency formatter: milliseconds the way people read
// them, "3.4 ms", "12 ms", "1.9 s", "12.5 s"; "n/a" for NaN. Evidence,
// pages (views.HumanMs, which prints unknown as "—"), alerts, share
// snapshots and the CLI all print latency through it.
func FormatMs(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return "n/a"
	case math.Abs(ms) < 10:
		return trimZero(strconv.FormatFloat(ms, 'f', 1, 64)) + " ms"
	case math.Abs(ms) < 999.5:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	case math.Abs(ms) < 9995:
		return keepOneDecimal(strconv.FormatFloat(ms/1000, 'f', 2, 64)) + " s"
	default:
		return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
	}
}

// fmtMs is FormatMs under the short name the evidence sentences use.
var fmtMs = FormatMs

// fmtDelta formats a signed change in milliseconds: "+1.9 s", "−40 ms".
func fmtDelta(ms float64) string {
	if ms < 0 {
		return "−" + fmtMs(-ms)
	}
	return "+" + fmtMs(ms)
}

// trimZero drops a ".0" that says nothing ("4.0" → "4").
func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

// keepOneDecimal trims "1.90" to "1.9" but keeps "2.0": seconds always show
// one or two decimals, so "2 s" is not mistaken for a rounded figure.
func keepOneDecimal(s string) string { return strings.TrimSuffix(s, "0") }

// fmtPct formats a 0..1 share as "87 %".
func fmtPct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strconv.FormatFloat(x*100, 'f', 0, 64) + " %"
}

// fmtPctRange formats "97–99 %", or "99 %" when both ends round alike.
func fmtPctRange(lo, hi float64) string {
	a := strconv.FormatFloat(lo*100, 'f', 0, 64)
	b := strconv.FormatFloat(hi*100, 'f', 0, 64)
	if a == b {
		return b + " %"
	}
	return a + "–" + b + " %"
}

// fmtTokens formats a token count: "900", "7.2k", "16k".
func fmtTokens(x float64) string {
	switch {
	case math.IsNaN(x):
		return "n/a"
	case x < 1000:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x < 9950:
		return trimZero(strconv.FormatFloat(x/1000, 'f', 1, 64)) + "k"
	default:
		return strconv.FormatFloat(x/1000, 'f', 0, 64) + "k"
	}
}

// fmtCount formats a count that may be fractional (a gauge max).
func fmtCount(x float64) string {
	return trimZero(strconv.FormatFloat(x, 'f', 1, 64))
}

// fmtR formats a correlation coefficient: "0.91".
func fmtR(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) }

// fmtRatio formats a growth factor: "1.4×", "12×".
func fmtRatio(x float64) string {
	if x < 10 {
		return trimZero(strconv.FormatFloat(x, 'f', 1, 64)) + "×"
	}
	return strconv.FormatFloat(x, 'f', 0, 64) + "×"
}

// fmtClock formats an event time as UTC wall clock, "14:02:10".
func fmtClock(t time.Time) string { return t.UTC().Format("15:04:05") }

// fmtWidth names a bucket width: "10 s", "1 min", "1 h".
func fmtWidth(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	default:
		return trimZero(strconv.FormatFloat(d.Seconds(), 'f', 1, 64)) + " s"
	}
}
