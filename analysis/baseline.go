package analysis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// A diagnosis's default baseline is the 3× window before it. During a
// repeating incident that stretch holds the previous episode, and the
// window then reads "nothing moved". GuardDiagnosis moves the default
// baseline to the clean stretch before the window (and before the episode
// the window opens in), says when none exists, and puts an objective under
// every TTFT, so a 27 s p95 is never healthy.

// minCleanBaseline is the shortest clean stretch taken as a baseline (or
// the default baseline's length, when shorter): fewer minutes hold too
// few requests for a p95.
const minCleanBaseline = 15 * time.Minute

// DiagnosisGuard prepares a diagnosis request against stored episodes
// and objectives (StoredSettings implements it).
type DiagnosisGuard interface {
	GuardDiagnosis(ctx context.Context, d *DiagnoseRequest) BaselineGuard
}

// BaselineGuard is what GuardDiagnosis changed, for the evidence.
type BaselineGuard struct {
	// Moved: the default baseline was replaced by Baseline.
	Moved    bool
	Baseline diagnose.Range
	// NoClean: no clean stretch before the window; it was compared with
	// nothing (its objective only).
	NoClean bool
	// Excluded are the episodes the default baseline would have held;
	// Within is the episode under way when the window starts, if any.
	Excluded []postgres.Episode
	Within   *postgres.Episode
	// ObjectiveMs is the default TTFT p95 objective put in for a missing
	// TTFT SLO (0: the SLO was kept).
	ObjectiveMs float64
	// PairedServer is the inference server asked about when the diagnosis
	// is of the app whose requests it served, DiagnosedAs ("" otherwise).
	PairedServer, DiagnosedAs string
}

// CleanBaseline is the baseline of window that holds no episode: it ends
// where the window starts, or where the episode under way then started
// (within), and reaches back at most span, stopping at the last episode
// before. When that stretch is shorter than min(span, 15 min) — an
// incident that repeats soon after the last — it looks before that
// episode instead, back to cleanBaselineReach. ok is false when no such
// stretch exists. Every episode the baseline skips over is excluded.
func CleanBaseline(window diagnose.Range, span time.Duration, eps []postgres.Episode) (r diagnose.Range, within *postgres.Episode, excluded []postgres.Episode, ok bool) {
	to := startOfEpisodeAt(window.From, eps, &within)
	need := min(span, minCleanBaseline)
	for {
		from, blocker := to.Add(-span), (*postgres.Episode)(nil)
		for i := range eps {
			e := &eps[i]
			if e.Start.Before(to) && e.End != nil && e.End.After(from) {
				from, blocker = *e.End, e
			}
		}
		r = diagnose.Range{From: from, To: to}
		if ok = r.Duration() >= need; ok || blocker == nil || window.From.Sub(blocker.Start) > cleanBaselineReach {
			break
		}
		to = startOfEpisodeAt(blocker.Start, eps, nil)
	}
	reach := window.From.Add(-span) // what the default baseline would hold, or more
	if r.From.Before(reach) {
		reach = r.From
	}
	for _, e := range eps {
		if e.Start.Before(window.From) && (e.End == nil || e.End.After(reach)) && (within == nil || e.ID != within.ID) {
			excluded = append(excluded, e)
		}
	}
	return r, within, excluded, ok
}

// cleanBaselineReach bounds how far before the window a clean baseline is
// looked for: GuardDiagnosis reads a day of episodes before the default
// baseline.
const cleanBaselineReach = 24 * time.Hour

// startOfEpisodeAt moves t back to the start of any episode running at t
// (and of one running at that start, and so on); the earliest of them
// goes to *within when within is not nil.
func startOfEpisodeAt(t time.Time, eps []postgres.Episode, within **postgres.Episode) time.Time {
	for moved := true; moved; {
		moved = false
		for i := range eps {
			e := &eps[i]
			if e.Start.Before(t) && (e.End == nil || !e.End.Before(t)) {
				t, moved = e.Start, true
				if within != nil {
					*within = e
				}
			}
		}
	}
	return t
}

// GuardDiagnosis prepares d against stored episodes and objectives: with
// no TTFT SLO it judges TTFT p95 against the service's objective
// (Objectives.For), and a default baseline (d.Baseline zero, one service)
// becomes the clean stretch before the window, or nothing when there is
// none. An inference server that served exactly one app's requests in the
// window is diagnosed as that app, with its SLO: the same requests get one
// verdict (TestGuardDiagnosesPairedServerAsItsApp). Stored errors are
// logged and leave d as it was.
func (s *StoredSettings) GuardDiagnosis(ctx context.Context, d *DiagnoseRequest) BaselineGuard {
	var g BaselineGuard
	if s.Pairs != nil && d.Service != "" {
		apps, err := s.Pairs.PairedApps(ctx, d.Project, diagnose.Range{From: d.Window.From.Truncate(time.Minute), To: d.Window.To})
		if err != nil {
			s.logError("read paired services", err)
		} else if app, ok := apps[d.Service]; ok {
			g.PairedServer, g.DiagnosedAs, d.Service = d.Service, app, app
			d.SLO, d.Prices = s.SLOAndPrices(ctx, d.Project, app, d.Model)
		}
	}
	if d.SLO == nil || d.SLO.TTFTMs <= 0 {
		o, err := s.Objectives(ctx, d.Project)
		if err != nil {
			s.logError("read objectives", err)
		} else {
			slo := diagnose.SLO{Percentile: 95}
			if d.SLO != nil {
				slo = *d.SLO
			}
			slo.TTFTMs = o.For(d.Service)
			g.ObjectiveMs, d.SLO = slo.TTFTMs, &slo
		}
	}
	if !d.Baseline.IsZero() || d.Service == "" {
		return g
	}
	span := diagnose.DefaultBaseline(d.Window).Duration()
	// Episodes back to a day before the default baseline: one running then
	// may still run at the window's start.
	eps, err := s.PG.Episodes(ctx, int64(d.Project), d.Service, d.Window.From.Add(-span-24*time.Hour), d.Window.From)
	if err != nil {
		s.logError("read episodes", err)
		return g
	}
	if len(eps) == 0 {
		return g
	}
	r, within, excluded, ok := CleanBaseline(d.Window, span, eps)
	if within == nil && len(excluded) == 0 {
		return g
	}
	g.Within, g.Excluded = within, excluded
	if !ok {
		g.NoClean = true
		r = diagnose.Range{From: d.Window.From, To: d.Window.From}
	}
	g.Moved, g.Baseline, d.Baseline = true, r, r
	return g
}

// Explain adds what the guard did to a diagnosis: a first evidence line,
// and the summary of a window with no clean baseline says so first.
func (g BaselineGuard) Explain(d *diagnose.Diagnosis) {
	var notes []string
	clock := func(t time.Time) string { return t.UTC().Format("15:04") }
	if g.PairedServer != "" {
		notes = append(notes, fmt.Sprintf("Same requests as %[2]s: %[1]s served exactly %[2]s's requests in this window, so they are diagnosed once, as %[2]s (with its SLO).",
			g.PairedServer, g.DiagnosedAs))
	}
	if g.Moved {
		var parts []string
		if w := g.Within; w != nil {
			if w.End == nil {
				parts = append(parts, "the episode under way since "+clock(w.Start))
			} else {
				// Resolved since: "under way" would read as ongoing.
				parts = append(parts, "the episode "+episodeSpan(*w)+" that runs into the window")
			}
		}
		for _, e := range g.Excluded {
			parts = append(parts, "the episode "+episodeSpan(e))
		}
		if g.NoClean {
			notes = append(notes, fmt.Sprintf("No clean baseline: the time before the window holds %s, so nothing is compared with it.", strings.Join(parts, " and ")))
		} else {
			notes = append(notes, fmt.Sprintf("Baseline %s–%s UTC: the clean stretch before the window, leaving out %s.", clock(g.Baseline.From), clock(g.Baseline.To), strings.Join(parts, " and ")))
		}
	}
	if g.ObjectiveMs > 0 {
		notes = append(notes, fmt.Sprintf("No TTFT SLO covers this service: TTFT p95 is held to the default objective of %s (settable per service).", diagnose.FormatMs(g.ObjectiveMs)))
	}
	if len(notes) == 0 {
		return
	}
	ev := make([]diagnose.Evidence, 0, len(notes)+len(d.Evidence))
	for _, n := range notes {
		ev = append(ev, diagnose.Evidence{Text: n})
	}
	ev = append(ev, d.Evidence...)
	for i := range ev {
		ev[i].N = i + 1
	}
	d.Evidence = ev
	if g.NoClean && d.Verdict == diagnose.VerdictHealthy {
		d.Summary, d.Confidence = noCleanSummary+d.Summary, min(d.Confidence, 0.5)
	}
}

const noCleanSummary = "No clean baseline to compare with (the time before is an episode); within the objective. "

// ExplainVerdict is Explain for an overview badge.
func (g BaselineGuard) ExplainVerdict(v *ServiceVerdict) {
	if g.NoClean && v.Verdict == diagnose.VerdictHealthy {
		v.Summary, v.Confidence = noCleanSummary+v.Summary, min(v.Confidence, 0.5)
	}
}

// episodeSpan writes an episode's time: "02:10–02:22", or "since 02:10".
func episodeSpan(e postgres.Episode) string {
	if e.End == nil {
		return "since " + e.Start.UTC().Format("15:04")
	}
	return e.Start.UTC().Format("15:04") + "–" + e.End.UTC().Format("15:04")
}
