package share

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// InputError is a page or link request the user must fix; its message is
// written for them.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// DefaultLast is the diagnosis page's window when the URL names none.
const DefaultLast = "1h"

// LastOptions are the relative ranges the pickers offer.
var LastOptions = []string{"15m", "1h", "6h", "24h", "7d"}

// DiagnoseParams is the whole state of the diagnosis page; it lives in the
// page's URL.
type DiagnoseParams struct {
	Service string         `json:"service"`
	Model   string         `json:"model"`
	Window  diagnose.Range `json:"window"`
	// Last is the relative range the window was read from ("1h"); empty
	// for a custom window.
	Last string `json:"last,omitempty"`
	// Baseline is the chosen baseline; zero means the 3× window before.
	Baseline diagnose.Range `json:"baseline"`
}

// ParseDiagnose reads service, model, from/to or last, and
// baseline_from/baseline_to. Times are RFC 3339, or the browser's
// datetime-local form (2026-12-02T14:00), read as UTC.
func ParseDiagnose(q url.Values, now time.Time) (DiagnoseParams, error) {
	p := DiagnoseParams{Service: strings.TrimSpace(q.Get("service")), Model: strings.TrimSpace(q.Get("model"))}
	var err error
	if q.Get("from") != "" || q.Get("to") != "" {
		p.Window, err = parseRange(q, "from", "to", now)
	} else {
		p.Last = q.Get("last")
		if p.Last == "" {
			p.Last = DefaultLast
		}
		var d time.Duration
		if d, err = ParseLast(p.Last); err == nil {
			p.Window = diagnose.Range{From: now.Add(-d).UTC(), To: now.UTC()}
		}
	}
	if err != nil {
		return p, err
	}
	if q.Get("baseline_from") != "" || q.Get("baseline_to") != "" {
		if q.Get("baseline_from") == "" || q.Get("baseline_to") == "" {
			return p, invalid("Give both baseline start and end, or neither (the default baseline is the 3× window before).")
		}
		if p.Baseline, err = parseRange(q, "baseline_from", "baseline_to", now); err != nil {
			return p, err
		}
	}
	return p, nil
}

// EffectiveBaseline is the baseline the diagnosis reads.
func (p DiagnoseParams) EffectiveBaseline() diagnose.Range {
	if p.Baseline.IsZero() {
		return diagnose.DefaultBaseline(p.Window)
	}
	return p.Baseline
}

// Query writes the parameters back as a query; relative keeps last=…
// when the window was relative, otherwise from/to are absolute.
func (p DiagnoseParams) Query(relative bool) url.Values {
	q := url.Values{}
	if p.Service != "" {
		q.Set("service", p.Service)
	}
	if p.Model != "" {
		q.Set("model", p.Model)
	}
	if relative && p.Last != "" {
		q.Set("last", p.Last)
	} else {
		q.Set("from", FormatTime(p.Window.From))
		q.Set("to", FormatTime(p.Window.To))
	}
	if !p.Baseline.IsZero() {
		q.Set("baseline_from", FormatTime(p.Baseline.From))
		q.Set("baseline_to", FormatTime(p.Baseline.To))
	}
	return q
}

// Path is the page's absolute address: the same window whenever it is
// opened.
func (p DiagnoseParams) Path() string { return "/diagnose?" + p.Query(false).Encode() }

// ComparePreset is a named pair of windows on the compare page.
type ComparePreset struct {
	Name  string
	Label string
}

// ComparePresets are the compare page's one-click pairs.
var ComparePresets = []ComparePreset{
	{"hour", "Last hour vs the hour before"},
	{"day", "Last 24 h vs the 24 h before"},
	{"yesterday", "Today vs yesterday, same time"},
	{"week", "Last 24 h vs the same day a week ago"},
}

// DefaultPreset is what the compare page shows when the URL names no
// windows.
const DefaultPreset = "hour"

// CompareParams is the whole state of the compare page. A is before, B is
// after.
type CompareParams struct {
	Service string         `json:"service"`
	Model   string         `json:"model"`
	A       diagnose.Range `json:"a"`
	B       diagnose.Range `json:"b"`
	// Preset names the pair the windows came from; empty for custom ones.
	Preset string `json:"preset,omitempty"`
}

// ParseCompare reads service, model and either a_from/a_to/b_from/b_to or
// a preset (default: the last hour vs the hour before).
func ParseCompare(q url.Values, now time.Time) (CompareParams, error) {
	p := CompareParams{Service: strings.TrimSpace(q.Get("service")), Model: strings.TrimSpace(q.Get("model"))}
	keys := []string{"a_from", "a_to", "b_from", "b_to"}
	given := 0
	for _, k := range keys {
		if q.Get(k) != "" {
			given++
		}
	}
	now = now.UTC()
	switch {
	case given == len(keys):
		var err error
		if p.A, err = parseRange(q, "a_from", "a_to", now); err != nil {
			return p, err
		}
		if p.B, err = parseRange(q, "b_from", "b_to", now); err != nil {
			return p, err
		}
		return p, nil
	case given > 0:
		return p, invalid("Give all four times (before: from and to, after: from and to), or pick a preset.")
	}
	p.Preset = q.Get("preset")
	if p.Preset == "" {
		p.Preset = DefaultPreset
	}
	switch p.Preset {
	case "hour":
		p.B = diagnose.Range{From: now.Add(-time.Hour), To: now}
		p.A = diagnose.Range{From: now.Add(-2 * time.Hour), To: now.Add(-time.Hour)}
	case "day":
		p.B = diagnose.Range{From: now.Add(-24 * time.Hour), To: now}
		p.A = diagnose.Range{From: now.Add(-48 * time.Hour), To: now.Add(-24 * time.Hour)}
	case "yesterday":
		midnight := now.Truncate(24 * time.Hour)
		if !midnight.Before(now) {
			midnight = midnight.Add(-24 * time.Hour)
		}
		p.B = diagnose.Range{From: midnight, To: now}
		p.A = diagnose.Range{From: midnight.Add(-24 * time.Hour), To: now.Add(-24 * time.Hour)}
	case "week":
		p.B = diagnose.Range{From: now.Add(-24 * time.Hour), To: now}
		p.A = diagnose.Range{From: now.Add(-8 * 24 * time.Hour), To: now.Add(-7 * 24 * time.Hour)}
	default:
		return p, invalid("preset=%q is not one of hour, day, yesterday, week.", p.Preset)
	}
	return p, nil
}

// Query writes the parameters back; relative keeps the preset when there
// is one.
func (p CompareParams) Query(relative bool) url.Values {
	q := url.Values{}
	if p.Service != "" {
		q.Set("service", p.Service)
	}
	if p.Model != "" {
		q.Set("model", p.Model)
	}
	if relative && p.Preset != "" {
		q.Set("preset", p.Preset)
		return q
	}
	q.Set("a_from", FormatTime(p.A.From))
	q.Set("a_to", FormatTime(p.A.To))
	q.Set("b_from", FormatTime(p.B.From))
	q.Set("b_to", FormatTime(p.B.To))
	return q
}

// Path is the page's absolute address.
func (p CompareParams) Path() string { return "/compare?" + p.Query(false).Encode() }

// TracePath is the address of a trace's page.
func TracePath(traceID string) string { return "/requests/" + traceID }

// ValidTraceID reports whether id is 32 lowercase hex characters.
func ValidTraceID(id string) bool {
	return len(id) == 32 && strings.Trim(id, "0123456789abcdef") == ""
}

// ParseLast accepts Go durations plus a "d" suffix for days, up to the
// longest window a query may read.
func ParseLast(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if n, ok := strings.CutSuffix(v, "d"); ok {
		var days int
		days, err = strconv.Atoi(n)
		d = time.Duration(days) * 24 * time.Hour
	}
	if err != nil || d <= 0 {
		return 0, invalid("last=%q is not a duration (e.g. 15m, 1h, 7d).", v)
	}
	if d > analysis.MaxWindow {
		return 0, invalid("A window of %s is too long: the limit is %d days.", v, int(analysis.MaxWindow.Hours()/24))
	}
	return d, nil
}

// timeLayouts are the accepted spellings of a time: RFC 3339 from links and
// the API, the datetime-local value of a browser form (UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"}

// ParseTime reads a time in any accepted layout.
func ParseTime(v string) (time.Time, bool) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// FormatTime writes a time for a URL: RFC 3339 in UTC, whole seconds when
// the time has no fraction.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseRange(q url.Values, fromKey, toKey string, now time.Time) (diagnose.Range, error) {
	r := diagnose.Range{To: now.UTC()}
	if v := q.Get(toKey); v != "" {
		t, ok := ParseTime(v)
		if !ok {
			return r, invalid("%s=%q is not a time (e.g. 2026-12-02T14:00:00Z).", toKey, v)
		}
		r.To = t
	}
	v := q.Get(fromKey)
	if v == "" {
		return r, invalid("%s is missing: give a start time as well as an end.", fromKey)
	}
	t, ok := ParseTime(v)
	if !ok {
		return r, invalid("%s=%q is not a time (e.g. 2026-12-02T13:00:00Z).", fromKey, v)
	}
	r.From = t
	if !r.From.Before(r.To) {
		return r, invalid("The start (%s) must be before the end (%s).", fromKey, toKey)
	}
	if r.Duration() > analysis.MaxWindow {
		return r, invalid("A window of %s is too long: the limit is %d days.", r.Duration().Round(time.Hour), int(analysis.MaxWindow.Hours()/24))
	}
	return r, nil
}
