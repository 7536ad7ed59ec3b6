package web

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/analysis/episode"
	"github.com/tokenpath/tokenpath/store/postgres"
	"github.com/tokenpath/tokenpath/web/views"
)

// episodes reads the stored episodes of the window (one service, or every
// service when service is "") and lays them out; nil when the store is
// not there. A failure costs only this section, so it is logged.
// An inference server paired with the app whose requests it served
// carries the app's stored diagnosis (analysis.EpisodeDetector), so the
// two never show contradictory verdicts.
func (s *Server) episodes(ctx context.Context, project uint32, service string, window diagnose.Range, now time.Time) *views.EpisodesView {
	if s.deps.PG == nil {
		return nil
	}
	eps, err := s.deps.PG.Episodes(ctx, int64(project), service, window.From, window.To)
	if err != nil {
		s.deps.Log.Error("read episodes", "err", err)
		return nil
	}
	v := episodesView(eps, window, now)
	return &v
}

// episodeContext is the stretch a diagnosis page's strip shows: the
// window and the 3× window before it, at least the hour up to its end.
func episodeContext(w diagnose.Range) diagnose.Range {
	from := w.From.Add(-3 * w.Duration())
	if h := w.To.Add(-time.Hour); h.Before(from) {
		from = h
	}
	return diagnose.Range{From: from, To: w.To}
}

// episodesView leads with the ongoing episodes, newest first, else the
// one that ended last; the strips hold every episode of the window.
func episodesView(eps []postgres.Episode, window diagnose.Range, now time.Time) views.EpisodesView {
	v := views.EpisodesView{From: window.From.UTC().Format("15:04"), To: window.To.UTC().Format("15:04")}
	if window.Duration() >= 24*time.Hour {
		v.From, v.To = window.From.UTC().Format("2 Jan 15:04"), window.To.UTC().Format("2 Jan 15:04")
	}
	var last *postgres.Episode
	for i := range eps {
		e := &eps[i]
		if e.End == nil {
			v.Now = append(v.Now, episodeLine(*e, now))
		} else if last == nil || e.End.After(*last.End) {
			last = e
		}
	}
	sort.Slice(v.Now, func(i, j int) bool { return v.Now[i].Text > v.Now[j].Text })
	if len(v.Now) == 0 && last != nil {
		v.Now = []views.EpisodeLine{episodeLine(*last, now)}
	}
	strips := map[string]*views.EpisodeStrip{}
	var order []string
	span := window.Duration().Seconds()
	for _, e := range eps {
		st, ok := strips[e.Service]
		if !ok {
			st = &views.EpisodeStrip{Service: e.Service}
			strips[e.Service], order = st, append(order, e.Service)
		}
		from, to := e.Start, now
		if e.End != nil {
			to = *e.End
		}
		x := max(0, from.Sub(window.From).Seconds()/span)
		w := min(1, to.Sub(window.From).Seconds()/span) - x
		mark := views.EpisodeMark{X: int(x * 1000), Width: max(4, int(w*1000)), Verdict: e.Verdict,
			Ongoing: e.End == nil, Title: episodeTitle(e, now), Href: analysis.EpisodePath(e, now)}
		if r := e.Recovering(); r != nil {
			mark.RecoveringX = max(mark.X+1, int(max(0, r.Sub(window.From).Seconds()/span)*1000))
		}
		st.Episodes = append(st.Episodes, mark)
	}
	sort.Strings(order)
	for _, name := range order {
		v.Strips = append(v.Strips, *strips[name])
	}
	return v
}

// episodeLine writes "Queueing since 03:23, 12 min, ongoing",
// "Queueing since 03:23, 7 min · recovering since 03:28" or
// "Queueing 03:10–03:28 (18 min), resolved 03:28".
func episodeLine(e postgres.Episode, now time.Time) views.EpisodeLine {
	return views.EpisodeLine{Service: e.Service, Verdict: e.Verdict, Ongoing: e.End == nil, Recovering: e.Recovering() != nil,
		Text: episodeText(e, now), Href: analysis.EpisodePath(e, now)}
}

func episodeText(e postgres.Episode, now time.Time) string {
	what := episodeWhat(e)
	clock := func(t time.Time) string { return t.UTC().Format("15:04") }
	// A service gone silent did not recover: its episode says since when
	// nothing was served rather than "resolved" (TestEpisodeTextSilence).
	if e.End == nil {
		since := fmt.Sprintf("%s since %s, %s", what, clock(e.Start), views.HumanDuration(now.Sub(e.Start).Round(time.Minute)))
		// Healthy again, held open a few minutes against flapping
		// (episode.Config.Exit): not "ongoing" (TestEpisodeTextRecovering).
		if r := e.Recovering(); r != nil {
			return since + " · recovering since " + clock(*r)
		}
		text := since + ", ongoing"
		if e.SilentSince != nil {
			text += ", no traffic since " + clock(*e.SilentSince)
		}
		return text
	}
	if e.SilentSince != nil {
		return fmt.Sprintf("%s %s–%s (%s), no traffic since %s", what, clock(e.Start), clock(*e.End), views.HumanDuration(e.End.Sub(e.Start)),
			clock(*e.SilentSince))
	}
	return fmt.Sprintf("%s %s–%s (%s), resolved %s", what, clock(e.Start), clock(*e.End), views.HumanDuration(e.End.Sub(e.Start)), clock(*e.End))
}

// episodeWhat names an episode by its verdict, else by what departed.
func episodeWhat(e postgres.Episode) string {
	if l := diagnose.Verdict(e.Verdict).Label(); l != "" && e.Verdict != string(diagnose.VerdictHealthy) {
		return l
	}
	var parts []string
	s := episode.ParseSignal(e.Signals)
	if s&(episode.SignalTTFT|episode.SignalObjective) != 0 {
		parts = append(parts, "TTFT up")
	}
	if s&episode.SignalITL != 0 {
		parts = append(parts, "ITL up")
	}
	if s&episode.SignalErrors != 0 {
		parts = append(parts, "errors up")
	}
	if len(parts) == 0 {
		return "Episode"
	}
	out := strings.Join(parts, ", ")
	return strings.ToUpper(out[:1]) + out[1:]
}

func episodeTitle(e postgres.Episode, now time.Time) string {
	t := e.Service + ": " + episodeText(e, now)
	if e.DiagnosedAs != "" {
		t += "; the same requests as " + e.DiagnosedAs + ", diagnosed once"
	}
	if e.PeakTTFTMs > 0 {
		t += fmt.Sprintf("; TTFT p95 peaked at %s at %s", diagnose.FormatMs(e.PeakTTFTMs), e.Peak.UTC().Format("15:04"))
		if e.BaselineTTFTMs > 0 {
			t += fmt.Sprintf(" (baseline %s)", diagnose.FormatMs(e.BaselineTTFTMs))
		}
	}
	return t
}
