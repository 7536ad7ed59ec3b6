package views

// Humane number and time formatting for the diagnosis, compare and share
// pages: latency in ms under a second and in seconds with one or two
// decimals above, shares as "87 %", token counts as "7.2k".

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// NoValue stands in for an unknown figure.
const NoValue = "—"

// HumanMs formats milliseconds: "3.4 ms", "850 ms", "1.25 s", "12.5 s" (the
// diagnosis's own wording), NoValue when not a number.
func HumanMs(ms float64) string {
	if math.IsNaN(ms) || math.IsInf(ms, 0) {
		return NoValue
	}
	return diagnose.FormatMs(ms)
}

// HumanMsPtr formats a nullable latency.
func HumanMsPtr(p *float64) string {
	if p == nil {
		return NoValue
	}
	return HumanMs(*p)
}

// HumanDeltaMs formats a signed change: "+1.9 s", "−40 ms", "±0 ms".
func HumanDeltaMs(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return NoValue
	case ms > 0:
		return "+" + HumanMs(ms)
	case ms < 0:
		return "−" + HumanMs(-ms)
	}
	return "±0 ms"
}

// HumanPct formats a 0..1 share: "87 %", "0.4 %", "<0.1 %".
func HumanPct(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return NoValue
	case x == 0:
		return "0 %"
	case math.Abs(x) < 0.001:
		return "<0.1 %"
	case math.Abs(x) < 0.1:
		return strings.TrimSuffix(strconv.FormatFloat(x*100, 'f', 1, 64), ".0") + " %"
	}
	return strconv.FormatFloat(x*100, 'f', 0, 64) + " %"
}

// HumanTokens formats a token count: "900", "7.2k", "16k", "1.2M".
func HumanTokens(x float64) string {
	switch a := math.Abs(x); {
	case math.IsNaN(x):
		return NoValue
	case a < 1000:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a < 9950:
		return strings.TrimSuffix(strconv.FormatFloat(x/1000, 'f', 1, 64), ".0") + "k"
	case a < 999_500:
		return strconv.FormatFloat(x/1000, 'f', 0, 64) + "k"
	}
	return strings.TrimSuffix(strconv.FormatFloat(x/1e6, 'f', 1, 64), ".0") + "M"
}

// HumanCount formats a count that may be fractional: "32", "2.5".
func HumanCount(x float64) string {
	if math.IsNaN(x) {
		return NoValue
	}
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return humanInt(int64(x))
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

// humanInt groups thousands with a thin space: "12 345".
func humanInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	if neg {
		return "−" + b.String()
	}
	return b.String()
}

// HumanInt formats a whole count: "12 345".
func HumanInt(n int) string { return humanInt(int64(n)) }

// HumanUSD formats dollars with enough digits to tell small costs apart:
// "$0.0042", "$0.31", "$12.40".
func HumanUSD(x float64) string {
	switch a := math.Abs(x); {
	case math.IsNaN(x):
		return NoValue
	case a == 0:
		return "$0"
	case a < 0.01:
		return "$" + strconv.FormatFloat(x, 'f', 4, 64)
	case a < 1:
		return "$" + strconv.FormatFloat(x, 'f', 3, 64)
	}
	return "$" + strconv.FormatFloat(x, 'f', 2, 64)
}

// HumanRatio formats a growth factor: "×1.4", "×12".
func HumanRatio(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return NoValue
	case x < 10:
		return "×" + strings.TrimSuffix(strconv.FormatFloat(x, 'f', 1, 64), ".0")
	}
	return "×" + strconv.FormatFloat(x, 'f', 0, 64)
}

// HumanTime formats an instant for a reader: "14:05 UTC, 2 Dec 2026".
func HumanTime(t time.Time) string {
	t = t.UTC()
	layout := "15:04 UTC, 2 Jan 2006"
	if t.Second() != 0 {
		layout = "15:04:05 UTC, 2 Jan 2006"
	}
	return t.Format(layout)
}

// HumanClock formats a time of day: "14:05" or "14:05:30".
func HumanClock(t time.Time) string {
	t = t.UTC()
	if t.Second() != 0 {
		return t.Format("15:04:05")
	}
	return t.Format("15:04")
}

// HumanClockSeconds formats a time of day to the second, "14:05:00"
// included, for lists whose lines must line up.
func HumanClockSeconds(t time.Time) string { return t.UTC().Format("15:04:05") }

// HumanRange formats a window: "13:05–14:05 UTC, 2 Dec 2026", with both
// dates when it spans days.
func HumanRange(from, to time.Time) string {
	from, to = from.UTC(), to.UTC()
	if from.Format("2006-01-02") == to.Format("2006-01-02") {
		return HumanClock(from) + "–" + HumanClock(to) + " UTC, " + to.Format("2 Jan 2006")
	}
	return HumanClock(from) + " " + from.Format("2 Jan") + " – " + HumanClock(to) + " " + to.Format("2 Jan 2006") + " UTC"
}

// HumanDuration names a window length: "15 min", "1 h", "1 h 30 min",
// "7 days".
func HumanDuration(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d >= time.Hour:
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %d min", h, m)
	case d >= time.Minute:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return fmt.Sprintf("%d s", d/time.Second)
}

// intText writes an int for an attribute or a cell.
func intText(n int) string { return strconv.Itoa(n) }

// floatText writes a float for an attribute (a meter's value).
func floatText(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
