package web

// Formatting and time-range helpers shared by the overview, requests,
// settings and SLO pages: every figure a page prints goes through here.

import (
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/web/views"
)

// noValue stands for a figure the data cannot state.
const noValue = "—"

// humanInt groups digits with narrow no-break spaces: 12 345 678 (one
// implementation, shared with the views).
func humanInt(n int64) string { return views.HumanInt(int(n)) }

// humanTokens formats a token count, "—" when unknown.
func humanTokens(n *int64) string {
	if n == nil {
		return noValue
	}
	return humanInt(*n)
}

// humanTokensF formats a fractional token count (a percentile).
func humanTokensF(x *float64) string {
	if x == nil || math.IsNaN(*x) {
		return noValue
	}
	return humanInt(int64(math.Round(*x)))
}

// humanPct formats a 0..1 share: "0 %", "0.4 %", "12 %".
func humanPct(x float64) string {
	switch {
	case math.IsNaN(x):
		return noValue
	case x == 0:
		return "0 %"
	case x > 0 && x < 0.001:
		return "< 0.1 %"
	case x < 0.1:
		return strings.TrimSuffix(strconv.FormatFloat(x*100, 'f', 1, 64), ".0") + " %"
	}
	return strconv.FormatFloat(x*100, 'f', 0, 64) + " %"
}

// humanRate formats requests per second; below one a second it reads per
// minute, which is how people count slow traffic.
func humanRate(perSec float64) string {
	switch {
	case perSec <= 0:
		return "0/s"
	case perSec < 1:
		perMin := perSec * 60
		if perMin < 10 {
			return strings.TrimSuffix(strconv.FormatFloat(perMin, 'f', 1, 64), ".0") + "/min"
		}
		return strconv.FormatFloat(perMin, 'f', 0, 64) + "/min"
	case perSec < 10:
		return strings.TrimSuffix(strconv.FormatFloat(perSec, 'f', 1, 64), ".0") + "/s"
	}
	return humanInt(int64(math.Round(perSec))) + "/s"
}

// dayMinute is how the pages write an instant of this year: day before
// month, 24-hour clock ("2 Dec 14:05"), in UTC.
const dayMinute = "2 Jan 15:04"

// humanTime formats an instant in UTC: time of day for today, the date too
// otherwise, day before month as every page writes dates ("2 Dec 14:05").
func humanTime(t, now time.Time) string {
	if t.IsZero() {
		return noValue
	}
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05")
	}
	if t.Year() == now.Year() {
		return t.Format(dayMinute)
	}
	return t.Format("2 Jan 2006 15:04")
}

// humanAgo formats how long ago t was: "just now", "5 min ago", "3 h ago".
func humanAgo(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " h ago"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " days ago"
}

// humanDuration names a window length: "15 min", "6 h", "7 days".
func humanDuration(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days"
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d >= time.Second && d%time.Second == 0:
		return strconv.Itoa(int(d/time.Second)) + " s"
	}
	return d.String()
}

// rangePresets are the time-range picker's choices.
var rangePresets = []struct{ last, label string }{
	{"15m", "15 min"}, {"1h", "1 h"}, {"6h", "6 h"}, {"24h", "24 h"}, {"7d", "7 days"},
}

// localTimeLayouts are what <input type="datetime-local"> submits; the
// pages read them as UTC, which the footer states.
var localTimeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"}

func parsePageTime(name, v string) (time.Time, error) {
	for _, l := range localTimeLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, badRequest("%s=%q is not a time (e.g. 2026-12-02T14:00 or 2026-12-02T14:00:00Z)", name, v)
}

// pageRange is the window a page shows: from/to (RFC 3339 or the
// browser's datetime-local, read as UTC), else last=<duration>, else def.
type pageRange struct {
	diagnose.Range
	Last   string // the preset in use; "" for a custom range
	Custom bool
}

func readPageRange(c echo.Context, def string, now time.Time) (pageRange, error) {
	from, to, last := c.QueryParam("from"), c.QueryParam("to"), c.QueryParam("last")
	r := pageRange{Range: diagnose.Range{To: now}}
	if from != "" || to != "" {
		r.Custom = true
		if to != "" {
			t, err := parsePageTime("to", to)
			if err != nil {
				return r, err
			}
			r.To = t
		}
		if from == "" {
			return r, badRequest("a custom range needs a start (from)")
		}
		t, err := parsePageTime("from", from)
		if err != nil {
			return r, err
		}
		r.From = t
	} else {
		if last == "" {
			last = def
		}
		d, err := parseLast(last)
		if err != nil {
			return r, err
		}
		r.From, r.Last = now.Add(-d), last
	}
	if !r.From.Before(r.To) {
		return r, badRequest("the start of the range must be before its end")
	}
	if r.Duration() > analysis.MaxWindow {
		return r, badRequest("a range of %s is too long: the limit is %d days", humanDuration(r.Duration().Round(time.Hour)), int(analysis.MaxWindow.Hours()/24))
	}
	return r, nil
}

// query returns the URL parameters that reproduce the range.
func (r pageRange) query() url.Values {
	v := url.Values{}
	if r.Custom {
		v.Set("from", r.From.UTC().Format(time.RFC3339))
		v.Set("to", r.To.UTC().Format(time.RFC3339))
	} else if r.Last != "" {
		v.Set("last", r.Last)
	}
	return v
}

// label says what the range is: "Last 1 h" or "2 Dec 13:00 – 14:00 UTC".
func (r pageRange) label() string {
	if !r.Custom {
		for _, p := range rangePresets {
			if p.last == r.Last {
				return "Last " + p.label
			}
		}
		return "Last " + humanDuration(r.Duration())
	}
	from, to := r.From.UTC(), r.To.UTC()
	if from.YearDay() == to.YearDay() && from.Year() == to.Year() {
		return from.Format(dayMinute) + " – " + to.Format("15:04") + " UTC"
	}
	return from.Format(dayMinute) + " – " + to.Format(dayMinute) + " UTC"
}

// rangeBar builds the picker: preset links and the custom-range form,
// each keeping the page's other parameters (keep) but dropping paging.
func (r pageRange) rangeBar(path string, keep url.Values) views.RangeBar {
	bar := views.RangeBar{Label: r.label(), Action: path, Custom: r.Custom,
		From: r.From.UTC().Format("2006-01-02T15:04"), To: r.To.UTC().Format("2006-01-02T15:04")}
	for _, p := range rangePresets {
		v := url.Values{}
		for k, vs := range keep {
			v[k] = vs
		}
		v.Set("last", p.last)
		bar.Options = append(bar.Options, views.RangeOption{Label: p.label, Href: path + "?" + v.Encode(),
			Current: !r.Custom && r.Last == p.last})
	}
	keys := make([]string, 0, len(keep))
	for k := range keep {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, x := range keep[k] {
			bar.Hidden = append(bar.Hidden, views.HiddenField{Name: k, Value: x})
		}
	}
	return bar
}
