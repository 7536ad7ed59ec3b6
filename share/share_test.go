package share

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/telemetry"
)

var now = time.Date(2026, 12, 2, 14, 30, 15, 0, time.UTC)

func TestParseDiagnose(t *testing.T) {
	for _, tc := range []struct {
		query    string
		from, to time.Time
		last     string
		baseline bool
		err      string
	}{
		{"", now.Add(-time.Hour), now, "1h", false, ""},
		{"last=15m&service=a", now.Add(-15 * time.Minute), now, "15m", false, ""},
		{"last=7d", now.Add(-7 * 24 * time.Hour), now, "7d", false, ""},
		{"from=2026-12-02T13:00:00Z&to=2026-12-02T14:00:00Z", now.Add(-90*time.Minute - 15*time.Second), now.Add(-30*time.Minute - 15*time.Second), "", false, ""},
		// datetime-local from a browser form is UTC.
		{"from=2026-12-02T13:00&to=2026-12-02T14:00", now.Add(-90*time.Minute - 15*time.Second), now.Add(-30*time.Minute - 15*time.Second), "", false, ""},
		{"from=2026-12-02T13:00:00Z", now.Add(-90*time.Minute - 15*time.Second), now, "", false, ""},
		{"last=1h&baseline_from=2026-12-01T13:00:00Z&baseline_to=2026-12-01T14:00:00Z", now.Add(-time.Hour), now, "1h", true, ""},
		{"last=1h&baseline_from=2026-12-01T13:00:00Z", time.Time{}, time.Time{}, "", false, "both baseline"},
		{"from=2026-12-02T14:00:00Z&to=2026-12-02T13:00:00Z", time.Time{}, time.Time{}, "", false, "must be before"},
		{"from=yesterday", time.Time{}, time.Time{}, "", false, "is not a time"},
		{"last=40d", time.Time{}, time.Time{}, "", false, "too long"},
		{"last=-1h", time.Time{}, time.Time{}, "", false, "not a duration"},
	} {
		q, _ := url.ParseQuery(tc.query)
		p, err := ParseDiagnose(q, now)
		if tc.err != "" {
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want an InputError with %q", tc.query, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.query, err)
			continue
		}
		if !p.Window.From.Equal(tc.from) || !p.Window.To.Equal(tc.to) || p.Last != tc.last || p.Baseline.IsZero() == tc.baseline {
			t.Errorf("%q: window %v–%v last %q baseline %v", tc.query, p.Window.From, p.Window.To, p.Last, p.Baseline)
		}
		// The absolute path reads back to the same window.
		u, _ := url.Parse(p.Path())
		back, err := ParseDiagnose(u.Query(), now.Add(time.Hour))
		if err != nil || back.Window != p.Window || back.Baseline != p.Baseline || back.Service != p.Service {
			t.Errorf("%q: path %s reads back as %+v, %v", tc.query, p.Path(), back, err)
		}
	}
}

func TestParseCompare(t *testing.T) {
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		query string
		a, b  diagnose.Range
		err   string
	}{
		{"", diagnose.Range{From: now.Add(-2 * time.Hour), To: now.Add(-time.Hour)}, diagnose.Range{From: now.Add(-time.Hour), To: now}, ""},
		{"preset=yesterday", diagnose.Range{From: midnight.Add(-24 * time.Hour), To: now.Add(-24 * time.Hour)}, diagnose.Range{From: midnight, To: now}, ""},
		{"preset=week", diagnose.Range{From: now.Add(-8 * 24 * time.Hour), To: now.Add(-7 * 24 * time.Hour)}, diagnose.Range{From: now.Add(-24 * time.Hour), To: now}, ""},
		{"a_from=2026-12-01T10:00:00Z&a_to=2026-12-01T11:00:00Z&b_from=2026-12-02T10:00:00Z&b_to=2026-12-02T11:00:00Z",
			diagnose.Range{From: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)},
			diagnose.Range{From: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)}, ""},
		{"a_from=2026-12-01T10:00:00Z", diagnose.Range{}, diagnose.Range{}, "all four"},
		{"preset=month", diagnose.Range{}, diagnose.Range{}, "not one of"},
	} {
		q, _ := url.ParseQuery(tc.query)
		p, err := ParseCompare(q, now)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.query, err, tc.err)
			}
			continue
		}
		if err != nil || p.A != tc.a || p.B != tc.b {
			t.Errorf("%q: A %v B %v, %v; want A %v B %v", tc.query, p.A, p.B, err, tc.a, tc.b)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	for in, want := range map[string]time.Duration{"": DefaultExpiry, "30d": DefaultExpiry, "1d": 24 * time.Hour, "7": 7 * 24 * time.Hour,
		"90d": 90 * 24 * time.Hour, "never": Never, "Never": Never} {
		if got, err := ParseExpiry(in); err != nil || got != want {
			t.Errorf("ParseExpiry(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"2y", "0", "-1d", "forever"} {
		if _, err := ParseExpiry(in); err == nil {
			t.Errorf("ParseExpiry(%q) accepted", in)
		}
	}
}

// fakeSource answers with one diagnosis and remembers what it was asked.
type fakeSource struct {
	diagnosed []analysis.DiagnoseRequest
}

func (f *fakeSource) Requests(_ context.Context, r analysis.RequestFilter) ([]telemetry.LLMRequest, analysis.Count, error) {
	return []telemetry.LLMRequest{{TraceID: "t1", TTFT: telemetry.Ptr(1900.0)}}, analysis.Count{N: 1}, nil
}

func (f *fakeSource) DiagnoseWithSlowest(ctx context.Context, d analysis.DiagnoseRequest, n int) (diagnose.Diagnosis, []telemetry.LLMRequest, error) {
	f.diagnosed = append(f.diagnosed, d)
	slow, _, _ := f.Requests(ctx, analysis.RequestFilter{Limit: n})
	return diagnose.Diagnosis{Verdict: diagnose.VerdictQueueing, Summary: "TTFT p95 rose from 12 ms to 1.9 s because requests queued.",
		Requests: 40, Evidence: []diagnose.Evidence{{N: 1, Text: "queue p95 12 ms → 1.9 s."}, {N: 2, Text: "KV cache 97–99 %."}, {N: 3, Text: "third"}}}, slow, nil
}

func (f *fakeSource) Compare(context.Context, uint32, diagnose.Range, diagnose.Range, string, string, map[string]diagnose.Price) (diagnose.Comparison, error) {
	return diagnose.Comparison{}, nil
}

func (f *fakeSource) Trace(context.Context, uint32, string) ([]telemetry.Span, []telemetry.LLMRequest, error) {
	return nil, nil, nil
}

func (f *fakeSource) Coverage(context.Context, uint32, time.Time, time.Time, string) ([]analysis.ServiceCoverage, error) {
	return nil, nil
}

// fakeLinks keeps links in memory.
type fakeLinks struct{ rows []postgres.ShareLink }

func (f *fakeLinks) CreateShare(_ context.Context, l postgres.ShareLink) (postgres.ShareLink, error) {
	l.ID, l.CreatedAt = int64(len(f.rows)+1), now
	f.rows = append(f.rows, l)
	return l, nil
}

func (f *fakeLinks) ActiveShare(_ context.Context, hash []byte) (postgres.ShareLink, error) {
	for _, r := range f.rows {
		if string(r.TokenHash) == string(hash) {
			return r, nil
		}
	}
	return postgres.ShareLink{}, postgres.ErrNoShare
}

func (f *fakeLinks) ShareChart(_ context.Context, hash []byte) ([]byte, error) {
	for _, r := range f.rows {
		if string(r.TokenHash) == string(hash) && r.ChartPNG != nil {
			return r.ChartPNG, nil
		}
	}
	return nil, postgres.ErrNoShare
}

func TestCreateAndOpen(t *testing.T) {
	src, links := &fakeSource{}, &fakeLinks{}
	svc := &Service{Source: src, Links: links, PublicURL: "https://tp.example.com/", Now: func() time.Time { return now }}
	ctx := context.Background()

	link, err := svc.Create(ctx, 7, "/diagnose?service=rag-chat&last=1h", Options{Expires: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link.URL, "https://tp.example.com/s/") || len(link.Token) != TokenLen || TokenLen < 22 {
		t.Errorf("link %q, token %q", link.URL, link.Token)
	}
	stored := links.rows[0]
	if string(stored.TokenHash) != string(HashToken(link.Token)) || strings.Contains(string(stored.Snapshot), link.Token) {
		t.Error("the stored row must hold the token's hash, never the token")
	}
	if stored.ProjectID != 7 || stored.Title != "TTFT p95 rose from 12 ms to 1.9 s because requests queued." ||
		stored.ExpiresAt == nil || !stored.ExpiresAt.Equal(now.Add(7*24*time.Hour)) {
		t.Errorf("stored %+v", stored)
	}
	// last=1h was frozen into absolute times.
	if want := "/diagnose?from=2026-12-02T13%3A30%3A15Z&service=rag-chat&to=2026-12-02T14%3A30%3A15Z"; stored.Path != want {
		t.Errorf("path = %s, want %s", stored.Path, want)
	}
	if d := src.diagnosed[0]; d.Project != 7 || d.Service != "rag-chat" || !d.Window.To.Equal(now) {
		t.Errorf("diagnosed %+v", d)
	}

	snap, row, err := svc.Open(ctx, link.Token)
	if err != nil || row.ID != 1 {
		t.Fatalf("Open: %v", err)
	}
	if snap.Kind != KindDiagnose || snap.Diagnose.Diagnosis.Verdict != diagnose.VerdictQueueing || len(snap.Diagnose.Slowest) != 1 ||
		!snap.TakenAt.Equal(now) {
		t.Errorf("snapshot %+v", snap)
	}
	if d := snap.Description(); d != "1. queue p95 12 ms → 1.9 s. 2. KV cache 97–99 %." {
		t.Errorf("description = %q", d)
	}
	for _, tok := range []string{"", "short", strings.Repeat("A", TokenLen), link.Token[:TokenLen-1] + "!"} {
		if _, _, err := svc.Open(ctx, tok); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(%q) = %v, want ErrNotFound", tok, err)
		}
	}

	if _, err := svc.Create(ctx, 7, "https://tp.example.com/diagnose?last=15m", Options{}); err != nil {
		t.Errorf("a full URL of this site: %v", err)
	}
	never, err := svc.Create(ctx, 7, "/diagnose?last=15m", Options{Expires: Never})
	if err != nil || never.ExpiresAt != nil {
		t.Errorf("never-expiring link: %+v, %v", never, err)
	}
	if u, err := svc.CreateLink(ctx, 7, "/diagnose?last=15m"); err != nil || !strings.HasPrefix(u, "https://tp.example.com/s/") {
		t.Errorf("CreateLink = %q, %v", u, err)
	}
	if l := links.rows[len(links.rows)-1]; l.ExpiresAt == nil || !l.ExpiresAt.Equal(now.Add(DefaultExpiry)) {
		t.Errorf("CreateLink expiry = %v, want 30 days", l.ExpiresAt)
	}

	for _, p := range []string{"https://evil.example/diagnose", "//evil/diagnose", "/settings", "/requests/abc", "/diagnose\n?x", "/s/x"} {
		var ie *InputError
		if _, err := svc.Create(ctx, 7, p, Options{}); !errors.As(err, &ie) {
			t.Errorf("Create(%q) = %v, want an InputError", p, err)
		}
	}
	// A trace the project does not hold is an input error, not a link.
	var ie *InputError
	if _, err := svc.Create(ctx, 7, "/requests/0123456789abcdef0123456789abcdef", Options{}); !errors.As(err, &ie) {
		t.Errorf("unknown trace: %v", err)
	}
}

func TestCompareSentence(t *testing.T) {
	p := func(x float64) *float64 { return &x }
	c := diagnose.Comparison{
		Changes: []diagnose.Change{{Name: "ttft", Before: diagnose.Percentiles{P95: p(135)}, After: diagnose.Percentiles{P95: p(40100)}}},
		Worse:   []string{"queue", "kv_cache_usage", "decode", "e2e", "tpot"},
	}
	if got, want := CompareSentence(c), "TTFT p95 135 ms → 40.1 s. Worse: queue, KV-cache usage, decode and 2 more; nothing got better."; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	c.Better, c.Worse = []string{"queue", "ttft"}, []string{"cost_per_task"}
	if got, want := CompareSentence(c), "TTFT p95 135 ms → 40.1 s. Better: queue and TTFT; but worse elsewhere: cost per task."; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := CompareSentence(diagnose.Comparison{}); got != "Nothing changed beyond noise." {
		t.Errorf("empty: %q", got)
	}
}
