// Package share freezes a page of Tokenpath — a diagnosis, a comparison or
// a trace — into a share link: it computes the page's data once, stores it
// as JSON next to a hashed random token, and hands back the public URL. The
// link keeps saying what the incident channel saw after retention (or
// anyone) deletes the rows. The same functions compute the live pages, so a
// snapshot and its page cannot drift apart.
package share

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Source is what the shared pages read (analysis.Queries).
type Source interface {
	Requests(ctx context.Context, f analysis.RequestFilter) ([]telemetry.LLMRequest, analysis.Count, error)
	DiagnoseWithSlowest(ctx context.Context, d analysis.DiagnoseRequest, n int) (diagnose.Diagnosis, []telemetry.LLMRequest, error)
	Compare(ctx context.Context, project uint32, a, b diagnose.Range, service, model string, prices map[string]diagnose.Price) (diagnose.Comparison, error)
	Trace(ctx context.Context, project uint32, traceID string) ([]telemetry.Span, []telemetry.LLMRequest, error)
	Coverage(ctx context.Context, project uint32, from, to time.Time, service string) ([]analysis.ServiceCoverage, error)
}

// Settings supplies per-project SLOs and model prices; optional.
type Settings interface {
	SLOAndPrices(ctx context.Context, project uint32, service, model string) (*diagnose.SLO, map[string]diagnose.Price)
}

// Links stores share links (store/postgres).
type Links interface {
	CreateShare(ctx context.Context, l postgres.ShareLink) (postgres.ShareLink, error)
	ActiveShare(ctx context.Context, tokenHash []byte) (postgres.ShareLink, error)
	ShareChart(ctx context.Context, tokenHash []byte) ([]byte, error)
}

// Service computes pages and creates and opens share links.
type Service struct {
	Source   Source
	Links    Links
	Settings Settings // nil: no SLOs, no prices
	// PublicURL prefixes links ("https://tokenpath.example.com"); empty
	// gives a path ("/s/<token>").
	PublicURL string
	// Assembly is how far the assembler has come (assembler.Assembler);
	// nil: snapshots do not record it.
	Assembly analysis.Progress
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ErrNotFound means a token is malformed, unknown, revoked or expired; the
// four look alike on purpose.
var ErrNotFound = errors.New("share link not found")

// Expiry choices, as the forms and the API spell them.
const (
	DefaultExpiry = 30 * 24 * time.Hour
	// Never is the Options.Expires of a link that never expires.
	Never time.Duration = -1
)

// ExpiryChoices are the expiries the share form offers, in order.
var ExpiryChoices = []struct{ Value, Label string }{
	{"1d", "1 day"}, {"7d", "7 days"}, {"30d", "30 days"}, {"90d", "90 days"}, {"never", "Never"},
}

// ParseExpiry reads "1d", "7d", "30d", "90d" (or the bare day counts) and
// "never"; empty means DefaultExpiry.
func ParseExpiry(v string) (time.Duration, error) {
	switch strings.TrimSuffix(strings.TrimSpace(strings.ToLower(v)), "d") {
	case "", "30":
		return DefaultExpiry, nil
	case "1":
		return 24 * time.Hour, nil
	case "7":
		return 7 * 24 * time.Hour, nil
	case "90":
		return 90 * 24 * time.Hour, nil
	case "never":
		return Never, nil
	}
	return 0, invalid("expires=%q is not one of 1d, 7d, 30d, 90d or never.", v)
}

// Options adjust a new link.
type Options struct {
	// Expires is the link's lifetime: 0 = DefaultExpiry, Never = forever.
	Expires time.Duration
}

// Link is a created share link. Token and URL are shown once: only the
// token's hash is stored.
type Link struct {
	ID        int64      `json:"id"`
	Token     string     `json:"-"`
	URL       string     `json:"url"`
	Title     string     `json:"title"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	Snapshot  Snapshot   `json:"-"`
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

// tokenBytes is the token's entropy: 256 bits, written as 43 base64url
// characters, far past guessing; a fast hash of it is safe to store.
const tokenBytes = 32

// TokenLen is the length of a token in its URL.
var TokenLen = base64.RawURLEncoding.EncodedLen(tokenBytes)

// HashToken is the digest a token is stored and looked up under.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func newToken() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("share token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// URL is the public address of a token.
func (s *Service) URL(token string) string {
	return strings.TrimRight(s.PublicURL, "/") + "/s/" + token
}

// Create freezes the page at path (/diagnose?…, /compare?… or
// /requests/<trace id>) for the project and stores a link to it.
func (s *Service) Create(ctx context.Context, project uint32, path string, opt Options) (Link, error) {
	snap, err := s.Freeze(ctx, project, path)
	if err != nil {
		return Link{}, err
	}
	body, err := json.Marshal(snap)
	if err != nil {
		return Link{}, fmt.Errorf("encode snapshot of %s: %w", snap.Path, err)
	}
	// Drawn now, from the snapshot's own figures: the unfurl shows what
	// the link shows, however the data changes later.
	chart, err := snap.ChartPNG()
	if err != nil {
		return Link{}, fmt.Errorf("draw the chart of %s: %w", snap.Path, err)
	}
	token, err := newToken()
	if err != nil {
		return Link{}, err
	}
	row := postgres.ShareLink{ProjectID: int64(project), TokenHash: HashToken(token), Path: snap.Path,
		Title: snap.Title(), Snapshot: body, ChartPNG: chart}
	switch {
	case opt.Expires == Never:
	case opt.Expires <= 0:
		t := snap.TakenAt.Add(DefaultExpiry)
		row.ExpiresAt = &t
	default:
		t := snap.TakenAt.Add(opt.Expires)
		row.ExpiresAt = &t
	}
	row, err = s.Links.CreateShare(ctx, row)
	if err != nil {
		return Link{}, err
	}
	return Link{ID: row.ID, Token: token, URL: s.URL(token), Title: row.Title, CreatedAt: row.CreatedAt,
		ExpiresAt: row.ExpiresAt, Snapshot: snap}, nil
}

// CreateLink freezes a page with the default expiry and returns its URL.
// Its signature fits a func value, so the alert worker can put a frozen
// diagnosis into a notification without importing this package.
func (s *Service) CreateLink(ctx context.Context, project uint32, path string) (string, error) {
	l, err := s.Create(ctx, project, path, Options{})
	if err != nil {
		return "", err
	}
	return l.URL, nil
}

// Open returns the snapshot behind a token and its stored link, or
// ErrNotFound for a token that is malformed, unknown, revoked or expired.
func (s *Service) Open(ctx context.Context, token string) (Snapshot, postgres.ShareLink, error) {
	if !validToken(token) {
		return Snapshot{}, postgres.ShareLink{}, ErrNotFound
	}
	row, err := s.Links.ActiveShare(ctx, HashToken(token))
	if errors.Is(err, postgres.ErrNoShare) {
		return Snapshot{}, row, ErrNotFound
	}
	if err != nil {
		return Snapshot{}, row, err
	}
	var snap Snapshot
	if err := json.Unmarshal(row.Snapshot, &snap); err != nil {
		return snap, row, fmt.Errorf("decode snapshot of share link %d: %w", row.ID, err)
	}
	if snap.Version > SnapshotVersion {
		return snap, row, fmt.Errorf("share link %d has snapshot version %d, newer than this server reads (%d)", row.ID, snap.Version, SnapshotVersion)
	}
	return snap, row, nil
}

// Chart returns the unfurl picture (a PNG) of a token's snapshot, or
// ErrNotFound when the link does not open or has no picture.
func (s *Service) Chart(ctx context.Context, token string) ([]byte, error) {
	if !validToken(token) {
		return nil, ErrNotFound
	}
	png, err := s.Links.ShareChart(ctx, HashToken(token))
	if errors.Is(err, postgres.ErrNoShare) {
		return nil, ErrNotFound
	}
	return png, err
}

// ChartURL is the public address of a token's unfurl picture.
func (s *Service) ChartURL(token string) string { return s.URL(token) + "/chart.png" }

func validToken(t string) bool {
	if len(t) != TokenLen {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Freeze computes the data of the page at path, as Create stores it.
func (s *Service) Freeze(ctx context.Context, project uint32, path string) (Snapshot, error) {
	// A URL pasted from the browser's address bar is this site's page too.
	if base := strings.TrimRight(s.PublicURL, "/"); base != "" && strings.HasPrefix(path, base+"/") {
		path = strings.TrimPrefix(path, base)
	}
	u, err := parsePagePath(path)
	if err != nil {
		return Snapshot{}, err
	}
	now := s.now()
	snap := Snapshot{Version: SnapshotVersion, TakenAt: now}
	through := s.assembledThrough(ctx, now)
	switch {
	case u.Path == "/diagnose":
		p, err := ParseDiagnose(u.Query(), now)
		if err != nil {
			return snap, err
		}
		d, err := s.Diagnose(ctx, project, p)
		if err != nil {
			return snap, err
		}
		snap.Kind, snap.Path, snap.Diagnose = KindDiagnose, p.Path(), d
	case u.Path == "/compare":
		p, err := ParseCompare(u.Query(), now)
		if err != nil {
			return snap, err
		}
		c, err := s.Compare(ctx, project, p)
		if err != nil {
			return snap, err
		}
		snap.Kind, snap.Path, snap.Compare = KindCompare, p.Path(), c
	default:
		id := strings.ToLower(strings.TrimPrefix(u.Path, "/requests/"))
		t, err := s.Trace(ctx, project, id)
		if err != nil {
			return snap, err
		}
		snap.Kind, snap.Path, snap.Trace = KindTrace, TracePath(id), t
	}
	snap.AssembledThrough = through
	return snap, nil
}

// assembledThrough is the assembler's watermark when it trails now by
// analysis.BehindAfter or more, else nil. Read before the page's data, it
// is no later than what that data saw. A watermark it cannot read is left
// out rather than failing the link: the page's data is what matters.
func (s *Service) assembledThrough(ctx context.Context, now time.Time) *time.Time {
	wm, behind := analysis.AssemblyBehind(ctx, s.Assembly, now)
	if !behind {
		return nil
	}
	return &wm
}

// parsePagePath accepts a site-relative path of a shareable page:
// /diagnose, /compare or /requests/<trace id>, with its query.
func parsePagePath(path string) (*url.URL, error) {
	path = strings.TrimSpace(path)
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") || strings.ContainsAny(path, "\\\r\n") {
		return nil, invalid("Only a page of this site can be shared: give its path, like /diagnose?service=rag-chat&last=1h.")
	}
	u, err := url.Parse(path)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return nil, invalid("%q is not a page path.", path)
	}
	switch {
	case u.Path == "/diagnose", u.Path == "/compare":
	case strings.HasPrefix(u.Path, "/requests/") && ValidTraceID(strings.ToLower(strings.TrimPrefix(u.Path, "/requests/"))):
	default:
		return nil, invalid("%s cannot be shared: only /diagnose, /compare and /requests/<trace id> pages can.", u.Path)
	}
	return u, nil
}

// Diagnose computes the diagnosis page's data.
func (s *Service) Diagnose(ctx context.Context, project uint32, p DiagnoseParams) (*DiagnoseData, error) {
	req := analysis.DiagnoseRequest{Project: project, Window: p.Window, Baseline: p.Baseline, Service: p.Service, Model: p.Model}
	if s.Settings != nil {
		req.SLO, req.Prices = s.Settings.SLOAndPrices(ctx, project, p.Service, p.Model)
	}
	var guard analysis.BaselineGuard
	if g, ok := s.Settings.(analysis.DiagnosisGuard); ok {
		guard = g.GuardDiagnosis(ctx, &req)
	}
	d, slow, err := s.Source.DiagnoseWithSlowest(ctx, req, SlowestShown)
	if err != nil {
		return nil, err
	}
	guard.Explain(&d)
	if slow == nil {
		slow = []telemetry.LLMRequest{}
	}
	cov, err := s.Source.Coverage(ctx, project, p.Window.From, p.Window.To, p.Service)
	if err != nil {
		return nil, err
	}
	if p.Service != "" && len(cov) == 1 {
		analysis.CoverageEvidence(&d, cov[0])
	}
	return &DiagnoseData{Params: p, Diagnosis: d, Slowest: slow, Guard: guard, Coverage: cov}, nil
}

// Compare computes the compare page's data.
func (s *Service) Compare(ctx context.Context, project uint32, p CompareParams) (*CompareData, error) {
	var prices map[string]diagnose.Price
	if s.Settings != nil {
		_, prices = s.Settings.SLOAndPrices(ctx, project, p.Service, p.Model)
	}
	c, err := s.Source.Compare(ctx, project, p.A, p.B, p.Service, p.Model, prices)
	if err != nil {
		return nil, err
	}
	return &CompareData{Params: p, Comparison: c}, nil
}

// Trace computes a trace page's data; a trace the project does not have is
// an InputError.
func (s *Service) Trace(ctx context.Context, project uint32, traceID string) (*TraceData, error) {
	if !ValidTraceID(traceID) {
		return nil, invalid("A trace id is 32 hex characters.")
	}
	spans, reqs, err := s.Source.Trace(ctx, project, traceID)
	if err != nil {
		return nil, err
	}
	if len(spans) == 0 && len(reqs) == 0 {
		return nil, invalid("There is no trace %s in this project (yet).", traceID)
	}
	return &TraceData{TraceID: traceID, Spans: spans, Requests: reqs}, nil
}
