package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/web/views"
)

// objectiveSettings reads and sets the default TTFT p95 objectives
// (analysis.StoredSettings): the floor a service without a TTFT SLO is
// judged against by the diagnosis and the episode detector.
type objectiveSettings interface {
	Objectives(ctx context.Context, project uint32) (analysis.Objectives, error)
	SetObjective(ctx context.Context, project uint32, service string, ms float64) error
}

// objectiveJSON is one service's objective as the API writes it.
type objectiveJSON struct {
	Service string  `json:"service"`
	TTFTP95 float64 `json:"ttft_p95_ms"`
	// Source: slo, saved, project slo, project or default.
	Source string `json:"source"`
}

// apiObjectives answers GET /api/v1/objectives: the saved objectives
// ("" = every service) and the one each known service is judged against.
func (s *Server) apiObjectives(c echo.Context) error {
	o, ok, err := s.objectives(c.Request().Context(), projectOf(c))
	if !ok {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "objectives need PostgreSQL, which is not configured")
	}
	if err != nil {
		return s.internal(err)
	}
	services, err := s.deps.Queries.Services(c.Request().Context(), projectOf(c), time.Now().UTC().Add(-sloScopeLookback))
	if err != nil {
		return s.internal(err)
	}
	names := []string{""}
	for _, svc := range services {
		names = append(names, svc.Service)
	}
	effective := make([]objectiveJSON, 0, len(names))
	for _, n := range names {
		effective = append(effective, objectiveJSON{Service: n, TTFTP95: o.For(n), Source: o.Source(n)})
	}
	saved := o.Saved
	if saved == nil {
		saved = map[string]float64{}
	}
	return c.JSON(http.StatusOK, map[string]any{"saved": saved, "effective": effective, "default_ms": analysis.DefaultTTFTObjectiveMs})
}

// apiSetObjective answers PUT /api/v1/objectives {service, ttft_p95_ms}:
// 0 removes the service's objective.
func (s *Server) apiSetObjective(c echo.Context) error {
	set, ok := s.deps.Settings.(objectiveSettings)
	if !ok || s.deps.PG == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "objectives need PostgreSQL, which is not configured")
	}
	body, err := readLimited(c.Request(), 64<<10)
	if err != nil {
		return badRequest("%s", err.Error())
	}
	var in struct {
		Service string   `json:"service"`
		TTFTP95 *float64 `json:"ttft_p95_ms"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.TTFTP95 == nil {
		return badRequest(`want {"service": "chat" (or "" for every service), "ttft_p95_ms": 5000 (0 removes it)}`)
	}
	if problem := s.setObjective(c.Request().Context(), set, projectOf(c), strings.TrimSpace(in.Service), *in.TTFTP95); problem != "" {
		return badRequest("%s", problem)
	}
	return s.apiObjectives(c)
}

// setObjective saves one objective; it returns what is wrong with it, or
// "" when saved. A store failure is logged and said as such.
func (s *Server) setObjective(ctx context.Context, set objectiveSettings, project uint32, service string, ms float64) string {
	if len([]rune(service)) > maxNameLen {
		return "The service name is too long."
	}
	if err := set.SetObjective(ctx, project, service, ms); err != nil {
		if errors.Is(err, analysis.ErrBadObjective) {
			_, why, _ := strings.Cut(err.Error(), ": ")
			return capitalize(why) + "."
		}
		s.deps.Log.Error("save objective", "err", err)
		return "The objective could not be saved: the settings store did not answer."
	}
	return ""
}

func (s *Server) objectives(ctx context.Context, project uint32) (analysis.Objectives, bool, error) {
	set, ok := s.deps.Settings.(objectiveSettings)
	if !ok || s.deps.PG == nil {
		return analysis.Objectives{}, false, nil
	}
	o, err := set.Objectives(ctx, project)
	return o, true, err
}

// objectivesView lists the objective of every service and of the project.
func (s *Server) objectivesView(ctx context.Context, project uint32, services []string) *views.ObjectivesView {
	o, ok, err := s.objectives(ctx, project)
	if !ok {
		return nil
	}
	if err != nil {
		s.deps.Log.Error("read objectives", "err", err)
		return &views.ObjectivesView{Error: "The objectives could not be read."}
	}
	v := &views.ObjectivesView{Default: diagnose.FormatMs(analysis.DefaultTTFTObjectiveMs), Services: services}
	names := append([]string{""}, services...)
	for k := range o.Saved {
		if k != "" && !slices.Contains(services, k) {
			names = append(names, k)
		}
	}
	sort.Strings(names[1:])
	for _, n := range names {
		row := views.ObjectiveRow{Service: n, Objective: diagnose.FormatMs(o.For(n)), Source: objectiveSourceWords[o.Source(n)]}
		if v, ok := o.Saved[n]; ok {
			row.Saved = strconv.FormatFloat(v, 'f', -1, 64)
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

var objectiveSourceWords = map[string]string{
	"slo": "its TTFT SLO", "saved": "set here", "project slo": "the project's TTFT SLO",
	"project": "the project's, set here", "default": "the built-in default",
}

// saveObjective handles the objectives form of the SLO page.
func (s *Server) saveObjective(c echo.Context) error {
	set, ok := s.deps.Settings.(objectiveSettings)
	if !ok || s.deps.PG == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "objectives need PostgreSQL, which is not configured")
	}
	service := strings.TrimSpace(c.FormValue("service"))
	raw := strings.TrimSpace(c.FormValue("ttft_p95_ms"))
	ms, err := strconv.ParseFloat(raw, 64)
	problem := ""
	switch {
	case raw == "":
		ms = 0
	case err != nil:
		problem = "The objective must be a number of milliseconds, e.g. 5000; leave it empty to remove it."
	}
	if problem == "" {
		problem = s.setObjective(c.Request().Context(), set, projectOf(c), service, ms)
	}
	if problem == "" {
		return c.Redirect(http.StatusSeeOther, "/slos?done=objective-saved#objectives")
	}
	v, err := s.slosView(c, views.SLOForm{Metric: "ttft", Percentile: "95", Window: "28d"})
	if err != nil {
		return err
	}
	if v.Objectives != nil {
		v.Objectives.Error, v.Objectives.Service, v.Objectives.Value = problem, service, raw
	}
	return render(c, http.StatusUnprocessableEntity, views.SLOs(v))
}
