package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/web/views"
)

// serverMappingBook reads and writes the gateway mappings
// (analysis.StoredSettings).
type serverMappingBook interface {
	ServerMappings(ctx context.Context, project uint32) ([]analysis.ServerMapping, error)
	SaveServerMappings(ctx context.Context, project uint32, m []analysis.ServerMapping) error
}

// serverMappingsJSON is the body of GET and PUT
// /api/v1/settings/server-mappings.
type serverMappingsJSON struct {
	Mappings []analysis.ServerMapping `json:"mappings"`
}

func (s *Server) mappingBook() (serverMappingBook, error) {
	mb, ok := s.deps.Settings.(serverMappingBook)
	if !ok {
		return nil, echo.NewHTTPError(http.StatusServiceUnavailable, "server mappings need PostgreSQL, which is not configured")
	}
	return mb, nil
}

// mappingRows are the saved mappings plus one empty row to add one.
func (s *Server) mappingRows(ctx context.Context, project uint32) ([]views.MappingRow, error) {
	var rows []views.MappingRow
	if mb, ok := s.deps.Settings.(serverMappingBook); ok {
		saved, err := mb.ServerMappings(ctx, project)
		if err != nil {
			return nil, s.storeError(err)
		}
		for _, m := range saved {
			rows = append(rows, views.MappingRow{Endpoint: m.Endpoint, Server: m.Server})
		}
	}
	return append(rows, views.MappingRow{}), nil
}

// saveServerMappings replaces the mappings with the form's rows
// (endpoint[] and server[] in step); a row with both empty is dropped.
func (s *Server) saveServerMappings(c echo.Context) error {
	mb, err := s.mappingBook()
	if err != nil {
		return err
	}
	form, err := c.FormParams()
	if err != nil {
		return badRequest("unreadable form")
	}
	var in []analysis.ServerMapping
	var rows []views.MappingRow
	for i, e := range form["endpoint"] {
		m := analysis.ServerMapping{Endpoint: e, Server: at(form["server"], i)}
		in = append(in, m)
		rows = append(rows, views.MappingRow{Endpoint: m.Endpoint, Server: m.Server})
	}
	clean, err := analysis.CleanServerMappings(in)
	if err != nil {
		v, verr := s.settingsView(c)
		if verr != nil {
			return verr
		}
		v.MappingError = "Nothing was saved: " + err.Error() + "."
		v.Mappings = append(rows, views.MappingRow{})
		return render(c, http.StatusUnprocessableEntity, views.Settings(v))
	}
	if err := mb.SaveServerMappings(c.Request().Context(), projectOf(c), clean); err != nil {
		return s.storeError(err)
	}
	return c.Redirect(http.StatusSeeOther, "/settings?done=mappings-saved#mappings")
}

// apiServerMappings answers GET /api/v1/settings/server-mappings.
func (s *Server) apiServerMappings(c echo.Context) error {
	mb, err := s.mappingBook()
	if err != nil {
		return err
	}
	m, err := mb.ServerMappings(c.Request().Context(), projectOf(c))
	if err != nil {
		return s.storeError(err)
	}
	if m == nil {
		m = []analysis.ServerMapping{}
	}
	return c.JSON(http.StatusOK, serverMappingsJSON{Mappings: m})
}

// apiPutServerMappings answers PUT /api/v1/settings/server-mappings: the
// body's mappings replace the saved ones, or nothing changes and the
// answer says what is wrong.
func (s *Server) apiPutServerMappings(c echo.Context) error {
	mb, err := s.mappingBook()
	if err != nil {
		return err
	}
	body, err := readLimited(c.Request(), 1<<20)
	if errors.Is(err, errBodyTooLarge) {
		return echo.NewHTTPError(http.StatusRequestEntityTooLarge, err.Error())
	}
	if err != nil {
		return badRequest("%s", err.Error())
	}
	var in serverMappingsJSON
	if err := json.Unmarshal(body, &in); err != nil {
		return badRequest(`the body must be {"mappings":[{"endpoint":"gateway:443","server":"vllm-llama"}]}: %s`, err.Error())
	}
	clean, err := analysis.CleanServerMappings(in.Mappings)
	if err != nil {
		return echo.NewHTTPError(http.StatusUnprocessableEntity, err.Error())
	}
	if err := mb.SaveServerMappings(c.Request().Context(), projectOf(c), clean); err != nil {
		return s.storeError(err)
	}
	if clean == nil {
		clean = []analysis.ServerMapping{}
	}
	return c.JSON(http.StatusOK, serverMappingsJSON{Mappings: clean})
}
