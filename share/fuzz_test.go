package share

import (
	"errors"
	"net/url"
	"testing"

	"github.com/tokenpath/tokenpath/analysis"
)

// FuzzParseDiagnose: any query string either fails with a user-facing
// InputError or yields a window inside the limits that survives a round
// trip through its own URL.
func FuzzParseDiagnose(f *testing.F) {
	for _, s := range []string{
		"", "last=15m", "last=7d&service=chat", "from=2026-12-02T13:00:00Z&to=2026-12-02T14:00:00Z",
		"from=2026-12-02T13:00&to=2026-12-02T14:00&baseline_from=2026-12-02T10:00:00Z&baseline_to=2026-12-02T13:00:00Z",
		"from=2300-01-01T00:00:00Z", "last=-5m", "last=99999999h", "service=%27%3B--&model=%3Cscript%3E", "from=\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := ParseDiagnose(q, now)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) || ie.Msg == "" {
				t.Fatalf("%q: error %v is not a user-facing InputError", raw, err)
			}
			return
		}
		if !p.Window.From.Before(p.Window.To) || p.Window.Duration() > analysis.MaxWindow {
			t.Fatalf("%q: window %s..%s outside the limits", raw, FormatTime(p.Window.From), FormatTime(p.Window.To))
		}
		u, err := url.Parse(p.Path())
		if err != nil {
			t.Fatalf("%q: own path %q does not parse: %v", raw, p.Path(), err)
		}
		again, err := ParseDiagnose(u.Query(), now)
		if err != nil {
			t.Fatalf("%q: own path %q is refused: %v", raw, p.Path(), err)
		}
		if !again.Window.From.Equal(p.Window.From) || !again.Window.To.Equal(p.Window.To) ||
			again.Service != p.Service || again.Model != p.Model ||
			!again.Baseline.From.Equal(p.Baseline.From) || !again.Baseline.To.Equal(p.Baseline.To) {
			t.Fatalf("%q: round trip changed %+v into %+v", raw, p, again)
		}
	})
}

// FuzzParseCompare: the same guarantees for the compare page's two windows.
func FuzzParseCompare(f *testing.F) {
	for _, s := range []string{
		"", "preset=day", "preset=nonsense", "a_from=2026-12-02T10:00:00Z&a_to=2026-12-02T11:00:00Z&b_from=2026-12-02T12:00:00Z&b_to=2026-12-02T13:00:00Z",
		"a_from=x&a_to=y&b_from=z&b_to=w", "a_from=2026-12-02T10:00:00Z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := ParseCompare(q, now)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) || ie.Msg == "" {
				t.Fatalf("%q: error %v is not a user-facing InputError", raw, err)
			}
			return
		}
		for _, w := range []struct {
			name   string
			ok     bool
			length float64
		}{{"before", p.A.From.Before(p.A.To), p.A.Duration().Hours()}, {"after", p.B.From.Before(p.B.To), p.B.Duration().Hours()}} {
			if !w.ok || w.length > analysis.MaxWindow.Hours() {
				t.Fatalf("%q: %s window %+v / %+v outside the limits", raw, w.name, p.A, p.B)
			}
		}
	})
}
