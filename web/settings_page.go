package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web/views"
)

// priceBook reads and writes the price table (analysis.StoredSettings).
type priceBook interface {
	Prices(ctx context.Context, project uint32) (map[string]diagnose.Price, error)
	SavePrices(ctx context.Context, project uint32, prices map[string]diagnose.Price) error
}

// settingsFlash are the notices a settings redirect can ask for; only
// these fixed sentences can appear, never text from the URL.
var settingsFlash = map[string]string{
	"key-revoked":    "The key was revoked: it no longer authenticates exports, API calls or logins.",
	"target-added":   "Scrape target added; the first scrape runs within a few seconds.",
	"target-deleted": "Scrape target deleted.",
	"prices-saved":   "Prices saved.",
	"mappings-saved": "Server mappings saved; diagnoses read them at once.",
}

// scrape interval bounds, in seconds.
const (
	defaultScrapeInterval = 15
	maxScrapeInterval     = 3600
	maxNameLen            = 80
)

// settingsPage shows keys, scrape targets, prices, retention and the OTLP
// snippet.
func (s *Server) settingsPage(c echo.Context) error {
	v, err := s.settingsView(c)
	if err != nil {
		return err
	}
	v.Flash = settingsFlash[c.QueryParam("done")]
	return render(c, http.StatusOK, views.Settings(v))
}

func (s *Server) settingsView(c echo.Context) (views.SettingsView, error) {
	ctx := c.Request().Context()
	now := time.Now().UTC()
	project := projectOf(c)
	if s.deps.PG == nil {
		return views.SettingsView{}, echo.NewHTTPError(http.StatusServiceUnavailable, "settings need PostgreSQL, which is not configured")
	}
	v := views.SettingsView{Page: s.page(c, "Settings", "settings"), OTLP: s.onboarding(c),
		Target: views.TargetForm{Interval: strconv.Itoa(defaultScrapeInterval)}}
	if s.deps.RetentionDays > 0 {
		v.Retention = countNoun(s.deps.RetentionDays, "day")
	} else {
		v.Retention = "the configured number of days"
	}
	keys, err := s.deps.PG.ListKeys(ctx, int64(project))
	if err != nil {
		return v, s.storeError(err)
	}
	current := s.sessionKeyID(c)
	for _, k := range keys {
		row := views.KeyRow{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Created: humanTime(k.CreatedAt, now), LastUsed: "never",
			Current: k.ID == current}
		if row.Name == "" {
			row.Name = "unnamed"
		}
		if k.LastUsedAt != nil {
			row.LastUsed = humanAgo(*k.LastUsedAt, now)
		}
		if k.RevokedAt != nil {
			row.Revoked = humanAgo(*k.RevokedAt, now)
		}
		v.Keys = append(v.Keys, row)
	}
	// Active keys first, each group oldest first.
	sort.SliceStable(v.Keys, func(i, j int) bool { return v.Keys[i].Revoked == "" && v.Keys[j].Revoked != "" })

	targets, err := s.deps.PG.ListTargets(ctx, int64(project))
	if err != nil {
		return v, s.storeError(err)
	}
	for _, t := range targets {
		row := views.TargetRow{ID: t.ID, URL: redactURL(t.URL), Service: t.Service, Interval: humanDuration(t.Interval),
			LastScrape: "not yet", State: "pending", LastError: t.LastError}
		if row.Service == "" {
			row.Service = "(host name)"
		}
		if t.LastScrapeAt != nil {
			row.LastScrape = humanAgo(*t.LastScrapeAt, now)
			row.State = "down"
			if t.Up {
				row.State = "up"
			}
		}
		v.Targets = append(v.Targets, row)
	}
	v.Prices, err = s.priceRows(ctx, project, now)
	if err != nil {
		return v, err
	}
	v.Mappings, err = s.mappingRows(ctx, project)
	return v, err
}

// priceRows lists the saved prices plus every model seen in the last 7
// days, and one empty row to add a model.
func (s *Server) priceRows(ctx context.Context, project uint32, now time.Time) ([]views.PriceRow, error) {
	saved := map[string]diagnose.Price{}
	if pb, ok := s.deps.Settings.(priceBook); ok {
		p, err := pb.Prices(ctx, project)
		if err != nil {
			return nil, s.storeError(err)
		}
		saved = p
	}
	seen := map[string]bool{}
	services, err := s.deps.Queries.Services(ctx, project, now.Add(-7*24*time.Hour))
	if err != nil {
		// The table still works with the saved models only.
		s.deps.Log.Error("settings: list models", "err", err)
	}
	for _, svc := range services {
		for _, m := range svc.Models {
			seen[m] = true
		}
	}
	names := map[string]bool{}
	for m := range saved {
		names[m] = true
	}
	for m := range seen {
		names[m] = true
	}
	var rows []views.PriceRow
	for _, m := range sortedKeys(names) {
		row := views.PriceRow{Model: m, Seen: seen[m]}
		if p, ok := saved[m]; ok {
			row.Input, row.Output = priceText(p.InputPerMTok), priceText(p.OutputPerMTok)
		}
		rows = append(rows, row)
	}
	return append(rows, views.PriceRow{}), nil
}

func priceText(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// sessionKeyID is the key this browser logged in with (0 if unknown).
func (s *Server) sessionKeyID(c echo.Context) int64 {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || s.deps.Sessions == nil {
		return 0
	}
	sess, err := s.deps.Sessions.SessionFor(c.Request().Context(), ck.Value)
	if err != nil {
		return 0
	}
	return sess.KeyID
}

// createKey creates a key and shows it once: the answer is the page
// itself, never a redirect, so the key is in no URL, cookie or log.
func (s *Server) createKey(c echo.Context) error {
	name := strings.TrimSpace(c.FormValue("name"))
	if name == "" || len([]rune(name)) > maxNameLen {
		v, err := s.settingsView(c)
		if err != nil {
			return err
		}
		v.Error = fmt.Sprintf("Give the key a name of 1 to %d characters, e.g. the service that will use it.", maxNameLen)
		return render(c, http.StatusUnprocessableEntity, views.Settings(v))
	}
	if s.deps.PG == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "settings need PostgreSQL, which is not configured")
	}
	key, err := s.deps.PG.CreateKey(c.Request().Context(), int64(projectOf(c)), name)
	if err != nil {
		return s.storeError(err)
	}
	v, err := s.settingsView(c)
	if err != nil {
		return err
	}
	v.NewKey, v.NewKeyName = key, name
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusCreated, views.Settings(v))
}

func (s *Server) revokeKey(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such key")
	}
	if err := s.deps.PG.RevokeKey(c.Request().Context(), int64(projectOf(c)), id); err != nil {
		if errors.Is(err, postgres.ErrUnknownKey) {
			return echo.NewHTTPError(http.StatusNotFound, "There is no such key in this project.")
		}
		return s.storeError(err)
	}
	if s.deps.KeysChanged != nil {
		s.deps.KeysChanged()
	}
	return c.Redirect(http.StatusSeeOther, "/settings?done=key-revoked#keys")
}

func (s *Server) createTarget(c echo.Context) error {
	form := views.TargetForm{URL: strings.TrimSpace(c.FormValue("url")), Service: strings.TrimSpace(c.FormValue("service")),
		Interval: strings.TrimSpace(c.FormValue("interval"))}
	interval := defaultScrapeInterval
	if form.Interval != "" {
		n, err := strconv.Atoi(form.Interval)
		if err != nil || n < 1 || n > maxScrapeInterval {
			form.Error = fmt.Sprintf("The interval must be a whole number of seconds from 1 to %d.", maxScrapeInterval)
		}
		interval = n
	}
	if u, err := url.Parse(form.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		form.Error = "The metrics URL must be an absolute http:// or https:// URL, e.g. http://vllm-0:8000/metrics."
	}
	if len([]rune(form.Service)) > maxNameLen {
		form.Error = fmt.Sprintf("The service name must be at most %d characters.", maxNameLen)
	}
	if form.Error == "" {
		if err := s.deps.Outbound.CheckURL(c.Request().Context(), form.URL); err != nil {
			form.Error = "This URL cannot be scraped: " + err.Error() + "."
		}
	}
	if form.Error == "" {
		_, err := s.deps.PG.CreateTarget(c.Request().Context(), int64(projectOf(c)), form.URL, form.Service, time.Duration(interval)*time.Second)
		switch {
		case errors.Is(err, postgres.ErrDuplicateTarget):
			form.Error = "This URL is already scraped for this project."
		case err != nil:
			return s.storeError(err)
		default:
			if s.deps.TargetsChanged != nil {
				s.deps.TargetsChanged()
			}
			return c.Redirect(http.StatusSeeOther, "/settings?done=target-added#targets")
		}
	}
	v, err := s.settingsView(c)
	if err != nil {
		return err
	}
	v.Target = form
	return render(c, http.StatusUnprocessableEntity, views.Settings(v))
}

func (s *Server) deleteTarget(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, "no such scrape target")
	}
	if err := s.deps.PG.DeleteTarget(c.Request().Context(), int64(projectOf(c)), id); err != nil {
		if errors.Is(err, postgres.ErrNoTarget) {
			return echo.NewHTTPError(http.StatusNotFound, "There is no such scrape target in this project.")
		}
		return s.storeError(err)
	}
	if s.deps.TargetsChanged != nil {
		s.deps.TargetsChanged()
	}
	return c.Redirect(http.StatusSeeOther, "/settings?done=target-deleted#targets")
}

// savePrices replaces the price table with the form's rows: model[],
// input[] and output[] in step. A row with both prices empty is dropped.
func (s *Server) savePrices(c echo.Context) error {
	pb, ok := s.deps.Settings.(priceBook)
	if !ok {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "the price table is not available in this build")
	}
	form, err := c.FormParams()
	if err != nil {
		return badRequest("unreadable form")
	}
	models, ins, outs := form["model"], form["input"], form["output"]
	prices := map[string]diagnose.Price{}
	var problems []string
	var rows []views.PriceRow
	for i, m := range models {
		m = strings.TrimSpace(m)
		in, out := strings.TrimSpace(at(ins, i)), strings.TrimSpace(at(outs, i))
		rows = append(rows, views.PriceRow{Model: m, Input: in, Output: out, Seen: true})
		if m == "" || (in == "" && out == "") {
			if m == "" && (in != "" || out != "") {
				problems = append(problems, "a price was given without a model name")
			}
			continue
		}
		pin, err1 := parsePrice(in)
		pout, err2 := parsePrice(out)
		if err1 != nil || err2 != nil {
			problems = append(problems, fmt.Sprintf("%s: prices must be dollar amounts of 0 or more, like 0.15", m))
			continue
		}
		prices[m] = diagnose.Price{InputPerMTok: pin, OutputPerMTok: pout}
	}
	if len(problems) > 0 {
		v, err := s.settingsView(c)
		if err != nil {
			return err
		}
		v.PriceError = "Nothing was saved: " + strings.Join(problems, "; ") + "."
		v.Prices = rows
		if len(rows) == 0 || rows[len(rows)-1].Model != "" {
			v.Prices = append(v.Prices, views.PriceRow{})
		}
		return render(c, http.StatusUnprocessableEntity, views.Settings(v))
	}
	if err := pb.SavePrices(c.Request().Context(), projectOf(c), prices); err != nil {
		return s.storeError(err)
	}
	return c.Redirect(http.StatusSeeOther, "/settings?done=prices-saved#prices")
}

func at(xs []string, i int) string {
	if i < len(xs) {
		return xs[i]
	}
	return ""
}

// parsePrice reads a dollar amount; empty is 0 (a free direction).
func parsePrice(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	x, err := strconv.ParseFloat(strings.TrimPrefix(s, "$"), 64)
	if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("bad price %q", s)
	}
	return x, nil
}

// redactURL hides credentials of a scrape URL on the page.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = url.User("…")
	return u.String()
}

// storeError logs a PostgreSQL failure and tells the user in a sentence.
func (s *Server) storeError(err error) error {
	s.deps.Log.Error("settings store", "err", err)
	return echo.NewHTTPError(http.StatusServiceUnavailable, "PostgreSQL could not answer; try again shortly.")
}
