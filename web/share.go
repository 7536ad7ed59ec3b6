package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/tokenpath/tokenpath/share"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web/views"
)

// ShareLinks is what the share pages need from the relational store
// (store/postgres) beyond what package share uses.
type ShareLinks interface {
	share.Links
	ListShares(ctx context.Context, projectID int64, limit int) ([]postgres.ShareLink, error)
	RevokeShare(ctx context.Context, projectID, id int64) error
}

// Share creation is rate-limited per project: each link runs a whole
// diagnosis, and a leaked session should not fill the table.
const (
	shareBurst     = 30
	sharePerMinute = 30
)

// shareState is the per-server share machinery, built on first use from
// Deps so web.go needs no new field.
type shareState struct {
	svc     *share.Service
	links   ShareLinks
	limiter *middleware.RateLimiterMemoryStore
}

var shareStates sync.Map // *Server → *shareState

func (s *Server) shareState() *shareState {
	if st, ok := shareStates.Load(s); ok {
		return st.(*shareState)
	}
	st := &shareState{
		svc: &share.Service{Source: s.deps.Queries, PublicURL: s.deps.PublicURL, Assembly: s.deps.Assembly},
		limiter: middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
			Rate: sharePerMinute / 60.0, Burst: shareBurst, ExpiresIn: 10 * time.Minute}),
	}
	if s.deps.PG != nil {
		st.links = s.deps.PG
		st.svc.Links = s.deps.PG
	}
	if s.deps.Settings != nil {
		st.svc.Settings = s.deps.Settings
	}
	actual, _ := shareStates.LoadOrStore(s, st)
	return actual.(*shareState)
}

// shares computes the diagnose/compare/trace page data and share links.
func (s *Server) shares() *share.Service { return s.shareState().svc }

// createShare freezes the page at path (a diagnosis, e.g. "/diagnose?
// service=rag-chat&from=…&to=…") for the project and returns the link's
// public URL; it expires after the default 30 days. The alert worker uses
// it to put a frozen diagnosis into a notification.
func (s *Server) createShare(ctx context.Context, project uint32, path string) (string, error) {
	return s.shares().CreateLink(ctx, project, path)
}

// allowShare applies the per-project creation limit.
func (s *Server) allowShare(project uint32) bool {
	ok, err := s.shareState().limiter.Allow("project:" + strconv.FormatUint(uint64(project), 10))
	return err == nil && ok
}

// shareError maps a failed creation to a status and a sentence.
func (s *Server) shareError(err error) error {
	if msg, ok := shareInputError(err); ok {
		return echo.NewHTTPError(http.StatusBadRequest, msg)
	}
	return s.internal(err)
}

// apiCreateShare is POST /api/v1/share {path, expires} → {url, …}.
func (s *Server) apiCreateShare(c echo.Context) error {
	var body struct {
		Path    string `json:"path"`
		Expires string `json:"expires"`
	}
	if err := c.Bind(&body); err != nil {
		return badRequest("the body must be JSON like {\"path\": \"/diagnose?service=rag-chat&last=1h\", \"expires\": \"30d\"}")
	}
	if strings.TrimSpace(body.Path) == "" {
		return badRequest("path is required: the page to share, e.g. /diagnose?service=rag-chat&last=1h")
	}
	exp, err := share.ParseExpiry(body.Expires)
	if err != nil {
		return s.shareError(err)
	}
	project := projectOf(c)
	if !s.allowShare(project) {
		c.Response().Header().Set("Retry-After", "60")
		return echo.NewHTTPError(http.StatusTooManyRequests, "too many share links created in the last minute; try again shortly")
	}
	if s.shareState().links == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "share links need PostgreSQL")
	}
	link, err := s.shares().Create(c.Request().Context(), project, body.Path, share.Options{Expires: exp})
	if err != nil {
		return s.shareError(err)
	}
	return c.JSON(http.StatusCreated, link)
}

// createShareForm is POST /share from a page's Share button: it creates the
// link and sends the browser to the list, which shows the new URL once.
func (s *Server) createShareForm(c echo.Context) error {
	project := projectOf(c)
	exp, err := share.ParseExpiry(c.FormValue("expires"))
	if err != nil {
		return s.sharesResult(c, http.StatusBadRequest, err.Error())
	}
	if !s.allowShare(project) {
		c.Response().Header().Set("Retry-After", "60")
		return s.sharesResult(c, http.StatusTooManyRequests, "Too many share links were created in the last minute. Wait a minute and try again.")
	}
	link, err := s.shares().Create(c.Request().Context(), project, c.FormValue("path"), share.Options{Expires: exp})
	if err != nil {
		if msg, ok := shareInputError(err); ok {
			return s.sharesResult(c, http.StatusBadRequest, msg)
		}
		return s.internal(err)
	}
	// The token is never stored in clear, so the one page that shows it
	// gets it in its URL (the link itself carries it anyway).
	return c.Redirect(http.StatusSeeOther, "/shares?created="+url.QueryEscape(link.Token))
}

// sharesResult renders the list with a message after a failed POST.
func (s *Server) sharesResult(c echo.Context, code int, msg string) error {
	v, err := s.sharesView(c)
	if err != nil {
		return err
	}
	v.Error = msg
	return render(c, code, views.SharesPage(s.page(c, "Share links", ""), v))
}

// sharesPage is GET /shares: the project's links, with revoke buttons.
func (s *Server) sharesPage(c echo.Context) error {
	v, err := s.sharesView(c)
	if err != nil {
		return err
	}
	if tok := c.QueryParam("created"); tok != "" {
		// Only a live link of this project is shown back.
		snap, row, err := s.shares().Open(c.Request().Context(), tok)
		if err == nil && uint32(row.ProjectID) == projectOf(c) {
			v.Created = &views.CreatedShare{URL: s.shares().URL(tok), Title: row.Title, Of: snapshotOf(snap),
				Expires: expiresText(row.ExpiresAt)}
		}
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.SharesPage(s.page(c, "Share links", ""), v))
}

func (s *Server) sharesView(c echo.Context) (views.SharesView, error) {
	tok, _ := c.Get(ctxCSRF).(string)
	v := views.SharesView{CSRF: tok}
	st := s.shareState()
	if st.links == nil {
		v.Error = "Share links need PostgreSQL, which this server has not configured."
		return v, nil
	}
	rows, err := st.links.ListShares(c.Request().Context(), int64(projectOf(c)), 200)
	if err != nil {
		return v, s.internal(err)
	}
	now := time.Now()
	for _, r := range rows {
		shown, err := url.PathUnescape(r.Path)
		if err != nil {
			shown = r.Path
		}
		row := views.ShareRow{ID: strconv.FormatInt(r.ID, 10), Title: r.Title, Path: r.Path, PathText: shown, Created: views.HumanTime(r.CreatedAt),
			Expires: expiresText(r.ExpiresAt)}
		switch {
		case r.RevokedAt != nil:
			row.State, row.StateText = "revoked", "Revoked "+views.HumanTime(*r.RevokedAt)
		case !r.Active(now):
			row.State, row.StateText = "expired", "Expired"
		default:
			row.State, row.StateText = "active", "Active"
		}
		v.Links = append(v.Links, row)
	}
	return v, nil
}

func expiresText(t *time.Time) string {
	if t == nil {
		return "Never expires"
	}
	if t.Before(time.Now()) {
		return "Expired " + views.HumanTime(*t)
	}
	return "Expires " + views.HumanTime(*t)
}

// revokeShare is POST /shares/:id/revoke.
func (s *Server) revokeShare(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return echo.NewHTTPError(http.StatusNotFound, "There is no such share link.")
	}
	st := s.shareState()
	if st.links == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "share links need PostgreSQL")
	}
	if err := st.links.RevokeShare(c.Request().Context(), int64(projectOf(c)), id); err != nil {
		if errors.Is(err, postgres.ErrNoShare) {
			return s.sharesResult(c, http.StatusNotFound, "There is no such share link in this project.")
		}
		return s.internal(err)
	}
	return c.Redirect(http.StatusSeeOther, "/shares?revoked="+strconv.FormatInt(id, 10))
}

// notFoundShare is the one answer for a token that is malformed, unknown,
// revoked or expired: the same page and status, so a guesser learns
// nothing.
func notFoundShare() error {
	return echo.NewHTTPError(http.StatusNotFound, "This link does not exist, has expired or was revoked.")
}

// sharedSnapshot is GET /s/:token: the frozen page, no login needed.
func (s *Server) sharedSnapshot(c echo.Context) error {
	h := c.Response().Header()
	// Revocation must take effect at once, and links stay out of indexes.
	h.Set("Cache-Control", "no-store")
	h.Set("X-Robots-Tag", "noindex, nofollow")
	if s.shareState().links == nil {
		return notFoundShare()
	}
	token := c.Param("token")
	snap, row, err := s.shares().Open(c.Request().Context(), token)
	if errors.Is(err, share.ErrNotFound) {
		return notFoundShare()
	}
	if err != nil {
		s.deps.Log.Error("open share link", "err", err)
		return echo.NewHTTPError(http.StatusInternalServerError, "This snapshot cannot be shown right now.")
	}
	p := views.Page{Title: snap.Title(), Shared: true, Version: assetVersion}
	if VendorMissing() {
		p.Notice = "Chart libraries are missing from this build; figures are shown as tables."
	}
	p.Meta = s.unfurlMeta(c, snap, row, token)
	info := views.SnapshotInfo{TakenAt: views.HumanTime(snap.TakenAt), Of: snapshotOf(snap), LivePath: snap.Path,
		Expires: expiresText(row.ExpiresAt) + ".", Behind: snapshotBehind(snap)}
	switch snap.Kind {
	case share.KindDiagnose:
		if snap.Diagnose == nil {
			break
		}
		v := diagnoseView(snap.Diagnose, false)
		v.Snapshot = &info
		return render(c, http.StatusOK, views.DiagnosePage(p, v))
	case share.KindCompare:
		if snap.Compare == nil {
			break
		}
		v := compareView(snap.Compare, false)
		v.Snapshot = &info
		return render(c, http.StatusOK, views.ComparePage(p, v))
	case share.KindTrace:
		if snap.Trace == nil {
			break
		}
		// The trace page itself (requests_page.go), from the frozen rows,
		// under the banner that offers its live page.
		v := traceDetailView(snap.Trace.TraceID, snap.Trace.Spans, snap.Trace.Requests, snap.TakenAt, false)
		v.Snapshot = &info
		v.Page = p
		return render(c, http.StatusOK, views.RequestDetail(v))
	}
	s.deps.Log.Error("share link with an unreadable snapshot", "id", row.ID, "kind", snap.Kind)
	return echo.NewHTTPError(http.StatusInternalServerError, "This snapshot cannot be shown by this version of Tokenpath.")
}

// unfurlMeta is what a chat app shows for a link: service, verdict and
// window in the title, the verdict sentence and headline evidence below,
// and the chart drawn when the snapshot was taken. Chat apps fetch the
// picture from its own absolute URL, without cookies.
func (s *Server) unfurlMeta(c echo.Context, snap share.Snapshot, row postgres.ShareLink, token string) []views.MetaTag {
	title, desc := unfurlTitle(snap), unfurlDescription(snap)
	meta := []views.MetaTag{
		{Property: "og:title", Content: title},
		{Property: "og:description", Content: desc},
		{Property: "og:type", Content: "article"},
		{Property: "og:site_name", Content: "Tokenpath"},
		{Property: "og:url", Content: s.absoluteURL(c, s.shares().URL(token))},
	}
	card := "summary"
	if row.HasChart {
		card = "summary_large_image"
		img := s.absoluteURL(c, s.shares().ChartURL(token))
		meta = append(meta,
			views.MetaTag{Property: "og:image", Content: img},
			views.MetaTag{Property: "og:image:type", Content: "image/png"},
			views.MetaTag{Property: "og:image:width", Content: strconv.Itoa(share.ChartWidthPx)},
			views.MetaTag{Property: "og:image:height", Content: strconv.Itoa(share.ChartHeightPx)},
			views.MetaTag{Property: "og:image:alt", Content: chartAlt(snap)},
			views.MetaTag{Property: "twitter:image", Content: img})
	}
	return append(meta,
		views.MetaTag{Property: "twitter:card", Content: card},
		views.MetaTag{Property: "twitter:title", Content: title},
		views.MetaTag{Property: "twitter:description", Content: desc})
}

// absoluteURL makes a site path absolute: with the public URL setting when
// it is set (share.Service.URL already did), else from the request's own
// scheme and host, since OpenGraph readers take only absolute URLs.
func (s *Server) absoluteURL(c echo.Context, u string) string {
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return u
	}
	return c.Scheme() + "://" + c.Request().Host + u
}

// unfurlTitle names what the link is about: "rag-chat: Queueing ·
// 13:05–14:05 UTC, 2 Dec 2026".
func unfurlTitle(snap share.Snapshot) string {
	switch {
	case snap.Diagnose != nil:
		p := snap.Diagnose.Params
		return subjectHeading(p.Service, p.Model) + ": " + views.VerdictLabel(string(snap.Diagnose.Diagnosis.Verdict)) +
			" · " + views.HumanRange(p.Window.From, p.Window.To)
	case snap.Compare != nil:
		p := snap.Compare.Params
		return "Compare " + subjectHeading(p.Service, p.Model) + " · " + views.HumanRange(p.A.From, p.A.To) +
			" against " + views.HumanRange(p.B.From, p.B.To)
	}
	return snap.Title()
}

// unfurlDescription is the verdict sentence (a comparison's summary) and
// then the headline evidence, within the ~300 characters chat apps show.
func unfurlDescription(snap share.Snapshot) string {
	d := snap.Description()
	if snap.Trace == nil {
		d = joinSentences(snap.Title(), d)
	}
	if r := []rune(d); len(r) > 300 {
		d = string(r[:299]) + "…"
	}
	return d
}

// chartAlt describes the unfurl picture for a screen reader.
func chartAlt(snap share.Snapshot) string {
	if snap.Compare != nil {
		return "Bar chart of p95 latencies before and after."
	}
	return "Line chart of TTFT p95 and the p95 of queue, prefill, network and pre-inference over the window."
}

// sharedChart is GET /s/:token/chart.png: the picture drawn when the
// snapshot was taken, no login needed, gone with the link.
func (s *Server) sharedChart(c echo.Context) error {
	h := c.Response().Header()
	h.Set("X-Robots-Tag", "noindex, nofollow")
	if s.shareState().links == nil {
		return notFoundShare()
	}
	png, err := s.shares().Chart(c.Request().Context(), c.Param("token"))
	if errors.Is(err, share.ErrNotFound) {
		return notFoundShare()
	}
	if err != nil {
		s.deps.Log.Error("open share chart", "err", err)
		return echo.NewHTTPError(http.StatusInternalServerError, "This picture cannot be shown right now.")
	}
	// Revoking the link takes the picture down at once, as the page.
	h.Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "image/png", png)
}

// joinSentences joins the non-empty sentences with one space each.
func joinSentences(sentences ...string) string {
	var out []string
	for _, s := range sentences {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, " ")
}

// snapshotBehind tells the link's reader that requests were missing from
// the snapshot because assembly trailed the spans received when it was
// taken (the live page's notice, frozen with it); empty when it kept up.
func snapshotBehind(s share.Snapshot) string {
	if s.AssembledThrough == nil {
		return ""
	}
	wm := *s.AssembledThrough
	return fmt.Sprintf("When it was taken, LLM requests were assembled only from spans that arrived up to %s UTC, %s earlier: requests after that are missing from it.",
		humanTime(wm, s.TakenAt), strings.TrimSuffix(humanAgo(wm, s.TakenAt), " ago"))
}

// snapshotOf says what a snapshot shows: "the diagnosis of rag-chat,
// 13:05–14:05 UTC, 2 Dec 2026".
func snapshotOf(s share.Snapshot) string {
	switch {
	case s.Diagnose != nil:
		p := s.Diagnose.Params
		return "the diagnosis of " + subjectHeading(p.Service, p.Model) + ", " + views.HumanRange(p.Window.From, p.Window.To)
	case s.Compare != nil:
		p := s.Compare.Params
		return "the comparison of " + subjectHeading(p.Service, p.Model) + ", " + views.HumanRange(p.A.From, p.A.To) +
			" against " + views.HumanRange(p.B.From, p.B.To)
	case s.Trace != nil:
		return "trace " + s.Trace.TraceID
	}
	return "a page"
}
