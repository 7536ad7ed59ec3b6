package web

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// episodeJSON is one stored episode in GET /api/v1/episodes (docs/api.md).
type episodeJSON struct {
	ID          int64      `json:"id"`
	Service     string     `json:"service"`
	Start       time.Time  `json:"start"`
	End         *time.Time `json:"end"`
	Ongoing     bool       `json:"ongoing"`
	SilentSince *time.Time `json:"silent_since"`
	// RecoveringSince: the episode is ongoing and its minutes since then
	// are healthy; absent otherwise.
	RecoveringSince *time.Time `json:"recovering_since,omitempty"`
	Signals         []string   `json:"signals"`
	Peak            struct {
		At        time.Time `json:"at"`
		TTFTP95Ms float64   `json:"ttft_p95_ms"`
		ErrorRate float64   `json:"error_rate"`
	} `json:"peak"`
	// Baseline is the clean stretch before the episode; nil when it had
	// none (its diagnosis read the default baseline).
	Baseline *episodeBaselineJSON `json:"baseline"`
	// Verdict and the rest are the stored diagnosis; "" until the detector
	// has diagnosed the episode.
	Verdict     string     `json:"verdict"`
	Confidence  float64    `json:"confidence"`
	Summary     string     `json:"summary"`
	DiagnosedAt *time.Time `json:"diagnosed_at"`
	DiagnosedAs string     `json:"diagnosed_as,omitempty"`
	// Diagnosis is the episode's diagnosis page, DiagnosisAPI the same
	// diagnosis from /api/v1/diagnose.
	Diagnosis    string `json:"diagnosis"`
	DiagnosisAPI string `json:"diagnosis_api"`
}

type episodeBaselineJSON struct {
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	TTFTP95Ms float64   `json:"ttft_p95_ms"`
}

func toEpisodeJSON(e postgres.Episode, now time.Time) episodeJSON {
	out := episodeJSON{ID: e.ID, Service: e.Service, Start: e.Start, End: e.End, Ongoing: e.End == nil, SilentSince: e.SilentSince,
		Signals: strings.Split(e.Signals, ","), Verdict: e.Verdict, Confidence: e.Confidence, Summary: e.Summary,
		DiagnosedAt: e.DiagnosedAt, DiagnosedAs: e.DiagnosedAs, RecoveringSince: e.Recovering()}
	if e.Signals == "" {
		out.Signals = []string{}
	}
	out.Peak.At, out.Peak.TTFTP95Ms, out.Peak.ErrorRate = e.Peak, e.PeakTTFTMs, e.PeakErrorRate
	if b := analysis.EpisodeBaseline(e); !b.IsZero() {
		out.Baseline = &episodeBaselineJSON{From: b.From, To: b.To, TTFTP95Ms: e.BaselineTTFTMs}
	}
	out.Diagnosis = analysis.EpisodePath(e, now)
	out.DiagnosisAPI = "/api/v1" + out.Diagnosis
	return out
}

// apiEpisodes answers GET /api/v1/episodes?[service]&from&to|last: the
// stored episodes that overlap the window (an ongoing one overlaps every
// window after its start), oldest first.
func (s *Server) apiEpisodes(c echo.Context) error {
	now := time.Now().UTC()
	w, err := window(c, "from", "to", now)
	if err != nil {
		return err
	}
	if s.deps.PG == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "episodes are kept in PostgreSQL, which this server runs without")
	}
	eps, err := s.deps.PG.Episodes(c.Request().Context(), int64(projectOf(c)), c.QueryParam("service"), w.From, w.To)
	if err != nil {
		return s.internal(err)
	}
	out := make([]episodeJSON, len(eps))
	for i, e := range eps {
		out[i] = toEpisodeJSON(e, now)
	}
	return c.JSON(http.StatusOK, map[string]any{"from": w.From, "to": w.To, "episodes": out})
}
