package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/analysis/episode"
	"github.com/tokenpath/tokenpath/store/postgres"
	"golang.org/x/sync/errgroup"
)

// SettingObjectives is the per-project document of default TTFT p95
// objectives (ms) by service ("" = every service), used where no TTFT SLO
// covers a service.
const SettingObjectives = "objectives"

// DefaultTTFTObjectiveMs is the TTFT p95 objective of a service with
// neither a TTFT SLO nor a saved objective: 10 s, far above any healthy
// interactive service, so a service slow all along still reads as an
// episode ("slow, and already slow before") rather than healthy.
const DefaultTTFTObjectiveMs = 10_000

// EpisodeHorizon and EpisodeWarmup are the detector's defaults: a pass
// rewrites the last day's episodes, reading two hours more for the
// baseline (bench query --ops episodes reads the same).
const (
	EpisodeHorizon = 24 * time.Hour
	EpisodeWarmup  = 2 * time.Hour
)

// EpisodeDetector segments every service's recent traffic (either side:
// calling app and inference server) into episodes, at least once per
// Interval and as soon as assembly finishes a minute, and stores them, so pages read them instead of computing them; each pass
// re-reads the last Horizon, so late data moves starts and ends. New or
// changed episodes are diagnosed against the clean stretch before them
// (at most DiagnosesPerPass a pass). One node of a cluster at a time.
type EpisodeDetector struct {
	Queries  *Queries
	PG       *postgres.Store
	Settings *StoredSettings
	Log      *slog.Logger
	Interval time.Duration // default 1 min
	// Horizon is how far back a pass rewrites episodes (default 24 h);
	// the baseline reads Warmup more before it (default 2 h).
	Horizon, Warmup time.Duration
	Config          episode.Config
	// DiagnosesPerPass bounds the diagnoses one pass runs (default 4); an
	// ongoing episode is diagnosed again every Rediagnose (default 5 min).
	DiagnosesPerPass int
	Rediagnose       time.Duration
	Now              func() time.Time
	// Progress, when set, is the assembler's watermark: a pass runs as
	// soon as it has assembled another minute (Run), and Poll (default
	// 5 s) is how often it is read.
	Progress Progress
	Poll     time.Duration

	once sync.Once
}

func (d *EpisodeDetector) defaults() {
	d.once.Do(func() {
		if d.Interval <= 0 {
			d.Interval = time.Minute
		}
		if d.Horizon <= 0 {
			d.Horizon = EpisodeHorizon
		}
		if d.Warmup <= 0 {
			d.Warmup = EpisodeWarmup
		}
		if d.DiagnosesPerPass <= 0 {
			d.DiagnosesPerPass = 4
		}
		if d.Rediagnose <= 0 {
			d.Rediagnose = 5 * time.Minute
		}
		if d.Now == nil {
			d.Now = time.Now
		}
		if d.Poll <= 0 {
			d.Poll = 5 * time.Second
		}
		if d.Log == nil {
			d.Log = slog.New(slog.DiscardHandler)
		}
		if d.Settings == nil {
			d.Settings = &StoredSettings{PG: d.PG, Log: d.Log}
		}
	})
}

// Detect runs one pass over every project. A failing project does not stop
// the others; the first error is returned.
func (d *EpisodeDetector) Detect(ctx context.Context) error {
	d.defaults()
	projects, err := d.PG.ProjectIDs(ctx)
	if err != nil {
		return err
	}
	var first error
	for _, p := range projects {
		if err := d.detectProject(ctx, uint32(p)); err != nil {
			d.Log.Error("episodes", "project", p, "err", err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

func (d *EpisodeDetector) detectProject(ctx context.Context, project uint32) error {
	// The minute under way is left out: its slow requests are not yet
	// assembled, so it reads faster than it is.
	now := d.Now().UTC().Truncate(time.Minute)
	since := now.Add(-d.Horizon)
	byService, err := d.Queries.EpisodeMinutes(ctx, project, since.Add(-d.Warmup), now)
	if err != nil {
		return err
	}
	objectives, err := d.Settings.Objectives(ctx, project)
	if err != nil {
		return err
	}
	var found []postgres.Episode
	detected := DetectEpisodes(byService, func(service string) episode.Config {
		cfg := d.Config
		cfg.TTFTObjective, cfg.Until = objectives.For(service), now
		return cfg
	})
	for service, eps := range detected {
		for _, e := range eps {
			if e.End.IsZero() || e.End.After(since) {
				found = append(found, storedEpisode(project, service, e))
			}
		}
	}
	if err := d.PG.ReplaceEpisodes(ctx, int64(project), since, found); err != nil {
		return err
	}
	return d.diagnose(ctx, project, since, now)
}

// DetectEpisodes segments each service's minutes into episodes with its
// config, services side by side on every core: a pass's detection takes
// the time of its busiest cores, not of every service in turn (bench query
// --ops episodes).
func DetectEpisodes(byService map[string][]episode.Minute, config func(service string) episode.Config) map[string][]episode.Episode {
	out := make(map[string][]episode.Episode, len(byService))
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for service, minutes := range byService {
		g.Go(func() error {
			eps := episode.Detect(minutes, config(service))
			mu.Lock()
			out[service] = eps
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait() // the detections return no error
	return out
}

func storedEpisode(project uint32, service string, e episode.Episode) postgres.Episode {
	s := postgres.Episode{ProjectID: int64(project), Service: service, Start: e.Start, Signals: e.Signals.String(),
		Peak: e.Peak, PeakTTFTMs: e.PeakTTFT, PeakErrorRate: e.PeakErrorRate, BaselineTTFTMs: e.BaselineTTFT}
	if !e.Ongoing() {
		s.End = &e.End
	}
	if !e.Baseline.IsZero() {
		s.BaselineFrom, s.BaselineTo = &e.Baseline.From, &e.Baseline.To
	}
	if !e.SilentSince.IsZero() {
		s.SilentSince = &e.SilentSince
	}
	if !e.RecoveringSince.IsZero() {
		s.RecoveringSince = &e.RecoveringSince
	}
	return s
}

// diagnose runs the diagnosis of episodes never diagnosed, whose end moved
// since, or ongoing and last diagnosed over Rediagnose ago; newest first.
// An inference server's episode whose requests are exactly one app's
// carries the diagnosis of the app's overlapping episode, or is diagnosed
// once as the app when the app has none, so the two never contradict
// (TestEpisodeDetectorPairedServerCarriesAppDiagnosis).
func (d *EpisodeDetector) diagnose(ctx context.Context, project uint32, since, now time.Time) error {
	eps, err := d.PG.Episodes(ctx, int64(project), "", since, now.Add(time.Minute))
	if err != nil {
		return err
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].Start.After(eps[j].Start) })
	apps, err := d.pairedApps(ctx, project, eps, diagnose.Range{From: since, To: now.Add(time.Minute)}, now)
	if err != nil {
		return err
	}
	budget := d.DiagnosesPerPass
	for i := range eps {
		if _, paired := apps[eps[i].ID]; !paired {
			if err := d.diagnoseEpisode(ctx, project, &eps[i], eps[i].Service, now, &budget); err != nil {
				return err
			}
		}
	}
	for i := range eps {
		e := &eps[i]
		app, paired := apps[e.ID]
		if !paired {
			continue
		}
		src := overlappingEpisode(eps, app, *e)
		if src == nil {
			if err := d.diagnoseEpisode(ctx, project, e, app, now, &budget); err != nil {
				return err
			}
			continue
		}
		carried := postgres.EpisodeDiagnosis{Verdict: src.Verdict, Confidence: src.Confidence, Summary: src.Summary, At: *src.DiagnosedAt,
			SawEnd: e.End, As: app}
		if e.Verdict == carried.Verdict && e.Confidence == carried.Confidence && e.Summary == carried.Summary && e.DiagnosedAs == app &&
			e.DiagnosedAt != nil && sameEnd(e.DiagnosedEnd, e.End) {
			continue
		}
		if err := d.PG.RecordEpisodeDiagnosis(ctx, e.ID, carried); err != nil {
			return err
		}
	}
	return nil
}

// diagnoseEpisode diagnoses e as service (its own, or the app whose
// requests it served) when its diagnosis is stale and the pass has budget
// left, and records it on e.
func (d *EpisodeDetector) diagnoseEpisode(ctx context.Context, project uint32, e *postgres.Episode, service string, now time.Time, budget *int) error {
	as := service
	if as == e.Service {
		as = ""
	}
	stale := e.DiagnosedAt == nil || e.DiagnosedAs != as || !sameEnd(e.End, e.DiagnosedEnd) ||
		(e.End == nil && now.Sub(*e.DiagnosedAt) >= d.Rediagnose)
	if !stale || *budget <= 0 {
		return nil
	}
	*budget--
	slo, prices := d.Settings.SLOAndPrices(ctx, project, service, "")
	dg, err := d.Queries.Diagnose(ctx, DiagnoseRequest{Project: project, Window: EpisodeWindow(*e, now), Baseline: EpisodeBaseline(*e),
		Service: service, SLO: slo, Prices: prices})
	if err != nil {
		return fmt.Errorf("diagnose episode %d of %s: %w", e.ID, e.Service, err)
	}
	rec := postgres.EpisodeDiagnosis{Verdict: string(dg.Verdict), Confidence: dg.Confidence, Summary: dg.Summary, At: now, SawEnd: e.End, As: as}
	if err := d.PG.RecordEpisodeDiagnosis(ctx, e.ID, rec); err != nil {
		return err
	}
	e.Verdict, e.Confidence, e.Summary, e.DiagnosedAt, e.DiagnosedEnd, e.DiagnosedAs = rec.Verdict, rec.Confidence, rec.Summary, &rec.At, rec.SawEnd, as
	return nil
}

// pairedApps maps the id of each inference server's episode whose
// requests are exactly one app's to that app. A pair over the whole
// horizon is a pair in every window of it; other servers are asked over
// their episode's own window.
func (d *EpisodeDetector) pairedApps(ctx context.Context, project uint32, eps []postgres.Episode, horizon diagnose.Range, now time.Time) (map[int64]string, error) {
	out := map[int64]string{}
	if len(eps) == 0 {
		return out, nil
	}
	services, err := d.Queries.servicePairs(ctx, project, horizon)
	if err != nil {
		return nil, err
	}
	overHorizon, servers := map[string]string{}, map[string]bool{}
	for _, s := range services {
		if s.SameRequestsAs != "" && s.Role == "server" {
			overHorizon[s.Service] = s.SameRequestsAs
		} else if s.Role == "server" && len(s.Partners) > 0 {
			servers[s.Service] = true
		}
	}
	for _, e := range eps {
		if app, ok := overHorizon[e.Service]; ok {
			out[e.ID] = app
			continue
		}
		if !servers[e.Service] {
			continue
		}
		w := EpisodeWindow(e, now.Add(time.Minute))
		inWindow, err := d.Queries.PairedApps(ctx, project, diagnose.Range{From: w.From.Truncate(time.Minute), To: w.To})
		if err != nil {
			return nil, err
		}
		if app, ok := inWindow[e.Service]; ok {
			out[e.ID] = app
		}
	}
	return out, nil
}

// overlappingEpisode is service's newest diagnosed episode in eps (newest
// first) that shares a moment with e.
func overlappingEpisode(eps []postgres.Episode, service string, e postgres.Episode) *postgres.Episode {
	for i := range eps {
		o := &eps[i]
		if o.Service == service && o.DiagnosedAt != nil && o.DiagnosedAs == "" && overlap(*o, e) {
			return o
		}
	}
	return nil
}

// overlap reports whether two episodes share a moment (an ongoing one
// runs on).
func overlap(a, b postgres.Episode) bool {
	endsAfter := func(e postgres.Episode, t time.Time) bool { return e.End == nil || e.End.After(t) }
	return endsAfter(a, b.Start) && endsAfter(b, a.Start)
}

func sameEnd(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

// EpisodePath is an episode's own diagnosis page: its window (to the end
// of the minute under way while it is ongoing) against the clean stretch
// before it, in absolute times so the link can be shared; of the app
// whose diagnosis it carries, for a paired inference server's episode.
func EpisodePath(e postgres.Episode, now time.Time) string {
	w := EpisodeWindow(e, now.Truncate(time.Minute).Add(time.Minute))
	q := url.Values{"service": {e.DiagnosisService()}, "from": {w.From.UTC().Format(time.RFC3339)}, "to": {w.To.UTC().Format(time.RFC3339)}}
	if b := EpisodeBaseline(e); !b.IsZero() {
		q.Set("baseline_from", b.From.UTC().Format(time.RFC3339))
		q.Set("baseline_to", b.To.UTC().Format(time.RFC3339))
	}
	return "/diagnose?" + q.Encode()
}

// EpisodeWindow is the window an episode's diagnosis reads: its start to
// its end, or to now while it is ongoing.
func EpisodeWindow(e postgres.Episode, now time.Time) diagnose.Range {
	if e.End != nil {
		return diagnose.Range{From: e.Start, To: *e.End}
	}
	return diagnose.Range{From: e.Start, To: now}
}

// EpisodeBaseline is the clean stretch before an episode; zero (the
// diagnosis's default) when it has none.
func EpisodeBaseline(e postgres.Episode) diagnose.Range {
	if e.BaselineFrom == nil || e.BaselineTo == nil {
		return diagnose.Range{}
	}
	return diagnose.Range{From: *e.BaselineFrom, To: *e.BaselineTo}
}

// Objectives are a project's TTFT p95 objectives by service (ms), with
// the SLOs folded in.
type Objectives struct {
	ByService map[string]float64
	Default   float64
	// Saved is the objectives document as saved (service → ms, "" for
	// every service); sloFor marks the services, and "" the project
	// default, whose objective is a TTFT SLO.
	Saved  map[string]float64
	sloFor map[string]bool
}

// Source says where For(service) comes from: "slo" (a TTFT SLO of the
// service), "saved" (its saved objective), "project slo", "project" (the
// project's), or "default" (DefaultTTFTObjectiveMs).
func (o Objectives) Source(service string) string {
	if v, ok := o.ByService[service]; ok && v > 0 && service != "" {
		if o.sloFor[service] {
			return "slo"
		}
		return "saved"
	}
	switch {
	case o.Default > 0 && o.sloFor[""]:
		return "project slo"
	case o.Default > 0:
		return "project"
	}
	return "default"
}

// For is the objective of service: its TTFT SLO (the most specific one),
// else its saved objective, else the project's, else
// DefaultTTFTObjectiveMs.
func (o Objectives) For(service string) float64 {
	if v, ok := o.ByService[service]; ok && v > 0 {
		return v
	}
	if o.Default > 0 {
		return o.Default
	}
	return DefaultTTFTObjectiveMs
}

// Objectives reads the project's saved TTFT p95 objectives and folds its
// TTFT SLOs over them (an SLO of every model of a service, or of every
// service). An SLO at any percentile serves as a p95 objective: a p95
// above a p99 threshold has the p99 above it too.
func (s *StoredSettings) Objectives(ctx context.Context, project uint32) (Objectives, error) {
	saved := map[string]float64{}
	if _, err := s.PG.Setting(ctx, int64(project), SettingObjectives, &saved); err != nil {
		return Objectives{}, err
	}
	slos, err := s.PG.ListSLOs(ctx, int64(project))
	if err != nil {
		return Objectives{}, err
	}
	o := Objectives{ByService: map[string]float64{}, Default: saved[""], Saved: saved, sloFor: map[string]bool{}}
	for k, v := range saved {
		if k != "" {
			o.ByService[k] = v
		}
	}
	for _, slo := range slos {
		if slo.Metric != postgres.SLOMetricTTFT || slo.Model != "" {
			continue
		}
		if slo.Service == "" {
			o.Default = slo.ThresholdMs
		} else {
			o.ByService[slo.Service] = slo.ThresholdMs
		}
		o.sloFor[slo.Service] = true
	}
	return o, nil
}

// SaveObjectives replaces the project's default TTFT p95 objectives by
// service ("" = every service), in ms.
func (s *StoredSettings) SaveObjectives(ctx context.Context, project uint32, objectives map[string]float64) error {
	return s.PG.PutSetting(ctx, int64(project), SettingObjectives, objectives)
}

// MaxObjectiveMs bounds a saved objective: ten minutes to a first token
// is no objective.
const MaxObjectiveMs = 600_000

// SetObjective sets one service's TTFT p95 objective ("" = every
// service) in ms; 0 removes it. An objective outside (0, MaxObjectiveMs]
// is refused with a sentence the user can act on.
func (s *StoredSettings) SetObjective(ctx context.Context, project uint32, service string, ms float64) error {
	if ms < 0 || ms > MaxObjectiveMs || math.IsNaN(ms) {
		return fmt.Errorf("%w: the objective must be a TTFT p95 in milliseconds, above 0 and at most %d (10 minutes); 0 removes it",
			ErrBadObjective, MaxObjectiveMs)
	}
	saved := map[string]float64{}
	if _, err := s.PG.Setting(ctx, int64(project), SettingObjectives, &saved); err != nil {
		return err
	}
	if ms == 0 {
		delete(saved, service)
	} else {
		saved[service] = ms
	}
	return s.SaveObjectives(ctx, project, saved)
}

// ErrBadObjective marks an objective SetObjective refuses.
var ErrBadObjective = errors.New("bad objective")
