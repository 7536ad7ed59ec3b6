// Package episode segments one service's time into incidents ("episodes"):
// stretches where TTFT p95, ITL p95 or the error rate departs from a robust
// rolling baseline of the recent healthy minutes (median + k·MAD), or where
// TTFT p95 is above an absolute objective whatever the baseline says. It is
// pure Go over per-minute histograms: the worker (analysis.EpisodeDetector)
// reads them from the per-minute rollup and stores what Detect returns.
package episode

import (
	"math"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// Minute is one minute of one service's traffic.
type Minute struct {
	Start    time.Time
	Requests int64
	Errors   int64
	TTFT     Histogram // ms
	ITL      Histogram // ms
	// Waiting is how many requests waited on the service's servers (each
	// instance's peak of the waiting gauge in the minute, summed); 0
	// without the gauge. Requests still in a queue have not finished, so
	// the newest minutes of a queue under-report it: a high gauge keeps an
	// open episode going (SignalWaiting).
	Waiting float64
}

// Signal is a set of ways a stretch departed from its baseline.
type Signal uint8

// The signals an episode can depart on.
const (
	// SignalTTFT: TTFT p95 above the baseline.
	SignalTTFT Signal = 1 << iota
	// SignalITL: ITL p95 above the baseline.
	SignalITL
	// SignalErrors: the error rate above the baseline.
	SignalErrors
	// SignalObjective: TTFT p95 above the absolute objective.
	SignalObjective
	// SignalWaiting: requests waiting on the servers above the baseline
	// kept an open episode going; it never opens one.
	SignalWaiting
)

var signalNames = []struct {
	s    Signal
	name string
}{{SignalTTFT, "ttft"}, {SignalITL, "itl"}, {SignalErrors, "errors"}, {SignalObjective, "objective"}, {SignalWaiting, "waiting"}}

// String lists the signals, comma-separated ("ttft,objective").
func (s Signal) String() string {
	var out []string
	for _, n := range signalNames {
		if s&n.s != 0 {
			out = append(out, n.name)
		}
	}
	return strings.Join(out, ",")
}

// ParseSignal reads what String wrote; unknown names are ignored.
func ParseSignal(v string) Signal {
	var s Signal
	for _, part := range strings.Split(v, ",") {
		for _, n := range signalNames {
			if part == n.name {
				s |= n.s
			}
		}
	}
	return s
}

// Config tunes detection. The zero value of a field takes its default
// (DefaultConfig); TTFTObjective 0 means no objective.
type Config struct {
	// MinRequests is how many requests a point needs; a quiet minute is
	// pooled with the minutes before it, up to MaxPool minutes, and is
	// "unknown" when even that is too few.
	MinRequests int64
	MaxPool     int
	// BaselineMinutes is how many of the latest healthy points the baseline
	// holds; with fewer than MinBaseline only the objective is checked.
	BaselineMinutes int
	MinBaseline     int
	// K is how many scaled MADs (≈ standard deviations) a point must rise
	// above the baseline median; MinRatio is the least rise of a latency
	// (×), MinErrorRise the least rise of the error rate (absolute), so a
	// very steady baseline does not turn small moves into episodes.
	K            float64
	MinRatio     float64
	MinErrorRise float64
	// MinITLMedianRatio is the least rise of the ITL median (×, and K
	// MADs) that opens an episode on ITL p95 alone: one of the anomalous
	// points in a row that open it must have it. A slower decode slows
	// every sequence of the batch, so the median moves with the p95; a
	// minute's p95 of ~50 requests is its third-slowest and jumps 1.5× on
	// a few requests in a crowded batch alone (TestNoFalseAlarms, "a few
	// requests in a crowded batch"). The median lags in the minute a
	// slowdown starts, so the p95 alone still counts in the run.
	MinITLMedianRatio float64
	// Enter anomalous points in a row, departing on a common signal, open
	// an episode; Exit minutes in a row without one close it.
	Enter, Exit int
	// SevereRatio: a point whose TTFT p95 is at least this many times the
	// baseline's opens an episode on its own. A cold start holds requests
	// for one minute, and 5 % of a minute's requests held ten times longer
	// than usual is an incident, not noise (TestDetectSevereMinute).
	SevereRatio float64
	// TTFTObjective (ms): a point whose TTFT p95 is above it is anomalous
	// whatever the baseline, so a service slow all along is never healthy.
	TTFTObjective float64
	// BaselineSpan is the longest clean stretch before an episode offered
	// as its diagnosis baseline.
	BaselineSpan time.Duration
	// MinWaiting is the least waiting gauge that keeps an episode open
	// (it must also stand K MADs above the healthy minutes' waiting).
	MinWaiting float64
	// Until is where the series ends: the minutes between the last one
	// given and Until had no request (a service gone silent). Zero: the
	// series ends with its last minute.
	Until time.Time
}

// DefaultConfig is what the detector runs with. The false-alarm suite
// (TestNoFalseAlarms) and the planted incidents (TestDetect) hold it.
var DefaultConfig = Config{
	MinRequests: 20, MaxPool: 5,
	BaselineMinutes: 60, MinBaseline: 15,
	K: 4, MinRatio: 1.5, MinErrorRise: 0.05, MinITLMedianRatio: 1.2,
	Enter: 2, Exit: 5,
	SevereRatio:  10,
	BaselineSpan: time.Hour,
	MinWaiting:   1,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	if c.MinRequests <= 0 {
		c.MinRequests = d.MinRequests
	}
	if c.MaxPool <= 0 {
		c.MaxPool = d.MaxPool
	}
	if c.BaselineMinutes <= 0 {
		c.BaselineMinutes = d.BaselineMinutes
	}
	if c.MinBaseline <= 0 {
		c.MinBaseline = d.MinBaseline
	}
	if c.K <= 0 {
		c.K = d.K
	}
	if c.MinRatio <= 0 {
		c.MinRatio = d.MinRatio
	}
	if c.MinErrorRise <= 0 {
		c.MinErrorRise = d.MinErrorRise
	}
	if c.MinITLMedianRatio <= 0 {
		c.MinITLMedianRatio = d.MinITLMedianRatio
	}
	if c.Enter <= 0 {
		c.Enter = d.Enter
	}
	if c.SevereRatio <= 0 {
		c.SevereRatio = d.SevereRatio
	}
	if c.Exit <= 0 {
		c.Exit = d.Exit
	}
	if c.BaselineSpan <= 0 {
		c.BaselineSpan = d.BaselineSpan
	}
	if c.MinWaiting <= 0 {
		c.MinWaiting = d.MinWaiting
	}
	return c
}

// Episode is one incident of a service.
type Episode struct {
	Start time.Time
	// End is the minute after the last anomalous one; zero while ongoing.
	// An episode whose service went silent ends Config.Exit minutes into
	// the silence, not when its last request was served.
	End time.Time
	// SilentSince is the first minute without a request when the service
	// went silent in the episode and stayed so to its end (or to now while
	// it is ongoing); zero otherwise.
	SilentSince time.Time
	// RecoveringSince is the minute after the last anomalous one while the
	// episode is open and its newest minutes are healthy: it stays open
	// for Config.Exit quiet minutes against flapping, but is recovering
	// (TestDetectRecovering). Zero while the newest minute is anomalous,
	// and once the episode has ended.
	RecoveringSince time.Time
	// Signals are every way the episode departed.
	Signals Signal
	// Peak is the minute of the highest TTFT p95, PeakTTFT that value (ms),
	// PeakErrorRate the highest error rate (0..1).
	Peak          time.Time
	PeakTTFT      float64
	PeakErrorRate float64
	// BaselineTTFT is the baseline's TTFT p95 median when the episode
	// started (ms); 0 when there was no baseline yet.
	BaselineTTFT float64
	// Baseline is the clean stretch right before the episode (after the
	// previous one, at most Config.BaselineSpan long); zero when the
	// episode follows another with no clean minute between them or starts
	// the series.
	Baseline diagnose.Range
}

// Ongoing reports whether the episode has not ended.
func (e Episode) Ongoing() bool { return e.End.IsZero() }

// Duration is how long the episode lasted, up to now when ongoing.
func (e Episode) Duration(now time.Time) time.Duration {
	if e.Ongoing() {
		return now.Sub(e.Start)
	}
	return e.End.Sub(e.Start)
}

// point is one minute read against the baseline.
type point struct {
	start        time.Time
	pooledFrom   time.Time // the first minute pooled into it
	known        bool
	ttft, itl    float64 // p95, ms; NaN without values
	itlMedian    float64 // ms; NaN without values
	itlMedianUp  bool    // the ITL median above the baseline's
	errorRate    float64
	errors       int64
	requests     int64
	waiting      float64
	signals      Signal
	baselineTTFT float64
}

// rolling holds the latest healthy points' values.
type rolling struct {
	logTTFT, logITL, logITLMedian, errs, waiting window
	// calls pools the same points' requests and errors: the baseline's
	// error rate as one rate, not a median of per-minute ones.
	calls pooled
}

func newRolling(n int) rolling {
	return rolling{logTTFT: window{n: n}, logITL: window{n: n}, logITLMedian: window{n: n}, errs: window{n: n}, waiting: window{n: n}, calls: pooled{n: n}}
}

// pooled sums the requests and errors of the latest n points.
type pooled struct {
	n                int
	fifo             [][2]int64 // requests, errors
	requests, errors int64
}

func (w *pooled) push(requests, errors int64) {
	w.fifo = append(w.fifo, [2]int64{requests, errors})
	w.requests, w.errors = w.requests+requests, w.errors+errors
	if len(w.fifo) > w.n {
		w.requests, w.errors = w.requests-w.fifo[0][0], w.errors-w.fifo[0][1]
		w.fifo = w.fifo[1:]
	}
}

// unlikely reports whether errors or more among requests occur by chance
// less often than maxChance at the pooled error rate.
func (w *pooled) unlikely(requests, errors int64) bool {
	return w.chance(requests, errors) < maxChance
}

// chance is how often errors or more among requests occur by chance at
// the pooled error rate: the Poisson tail of the count it predicts.
func (w *pooled) chance(requests, errors int64) float64 {
	if w.requests == 0 || w.errors == 0 {
		return 0
	}
	mean := float64(requests) * float64(w.errors) / float64(w.requests)
	// P(X < errors), its terms in logs so a large mean does not underflow.
	below := 0.0
	for k := range errors {
		lg, _ := math.Lgamma(float64(k) + 1)
		below += math.Exp(float64(k)*math.Log(mean) - mean - lg)
	}
	return 1 - below
}

// maxChance is how rarely chance may give a run's errors at the
// baseline's rate for them to open an episode on their own: far below
// the false-alarm suite's noise (errorsUnlikely).
const maxChance = 1e-6

// minuteChance: a minute whose errors chance gives less often than this
// departs on them even within K MADs of the baseline's rates: per-minute
// rates of a few dozen calls spread so wide that K MADs missed a
// rate-limits incident's minutes (TestRateLimitsOpenAnErrorsEpisode).
const minuteChance = 1e-2

func (r *rolling) add(p point) {
	if !math.IsNaN(p.ttft) && p.ttft > 0 {
		r.logTTFT.push(math.Log(p.ttft))
	}
	if !math.IsNaN(p.itl) && p.itl > 0 {
		r.logITL.push(math.Log(p.itl))
	}
	if !math.IsNaN(p.itlMedian) && p.itlMedian > 0 {
		r.logITLMedian.push(math.Log(p.itlMedian))
	}
	r.errs.push(p.errorRate)
	r.calls.push(p.requests, p.errors)
	r.waiting.push(p.waiting)
}

// waitingHigh reports whether p's waiting gauge stands above the healthy
// minutes' (median + K·MAD), and at least MinWaiting.
func (r *rolling) waitingHigh(p point, c Config) bool {
	if p.waiting < c.MinWaiting {
		return false
	}
	if r.waiting.len() < c.MinBaseline {
		return true
	}
	med, mad := r.waiting.medianMAD()
	return p.waiting > med+max(c.K*mad, c.MinWaiting)
}

// Detect segments minutes (one service, in time order, one per minute;
// missing minutes had no request) into episodes. The last episode has a
// zero End when it had not ended by the last minute (or Config.Until).
//
// While an episode is open, a minute with requests waiting above the
// baseline extends it (TestDetectWaitingHoldsEpisode), and minutes without
// a request neither end nor extend it: Exit of them in a row end it as
// silent (TestDetectOutage), unless its traffic had already recovered.
func Detect(minutes []Minute, c Config) []Episode {
	c = c.withDefaults()
	if len(minutes) == 0 {
		return nil
	}
	minutes = fill(minutes, c.Until)
	base := newRolling(c.BaselineMinutes)
	var out []Episode
	var open *Episode
	// run holds the anomalous points in a row while no episode is open
	// (quiet minutes that pool too few requests neither extend nor break
	// it), departing on a common signal (shared): a TTFT p95 spike and
	// the next minute's ITL p95 spike are two lone spikes of noise, not
	// an incident (TestNoFalseAlarms, "lone spikes on different
	// signals"). seen counts those among them that pool none of the same
	// minutes, so one slow minute pooled into the next points opens
	// nothing.
	var run []point
	var shared Signal
	seen, counted := 0, time.Time{}
	quiet := 0 // minutes in a row without an anomaly while one is open
	// silent counts the minutes in a row without a request while one is
	// open; quietBefore is quiet when they began.
	silent, quietBefore := 0, 0
	lastEnd := minutes[0].Start
	lastAnomalous := time.Time{}
	closeAt := func(end time.Time) {
		open.End = end
		out = append(out, *open)
		lastEnd, open, quiet, silent = end, nil, 0, 0
	}
	for i := range minutes {
		p := measure(minutes, i, c)
		p.signals, p.baselineTTFT, p.itlMedianUp = judge(p, &base, c)
		if open != nil && p.signals == 0 && base.waitingHigh(p, c) {
			p.signals = SignalWaiting
		}
		switch {
		case open != nil && p.signals != 0:
			quiet, silent = 0, 0
			open.SilentSince = time.Time{}
			lastAnomalous = p.start
			grow(open, p)
		case open != nil && minutes[i].Requests == 0:
			if silent == 0 {
				open.SilentSince, quietBefore = p.start, quiet
			}
			silent++
			if silent < c.Exit {
				break
			}
			if quietBefore > 0 {
				// It had recovered before it went silent.
				open.SilentSince = time.Time{}
				closeAt(lastAnomalous.Add(time.Minute))
				break
			}
			closeAt(p.start.Add(time.Minute))
		case open != nil:
			quiet++
			if silent > 0 {
				silent = 0
				open.SilentSince = time.Time{}
			}
			if quiet >= c.Exit {
				closeAt(lastAnomalous.Add(time.Minute))
			}
		case p.signals != 0:
			if shared &= p.signals; len(run) == 0 || shared == 0 {
				run, seen, shared = run[:0], 0, p.signals
			}
			if seen == 0 || p.pooledFrom.After(counted) {
				seen, counted = seen+1, p.start
			}
			run = append(run, p)
			if (seen >= c.Enter || severe(p, c)) && corroborated(run) && errorsUnlikely(run, shared, &base) {
				e := Episode{Start: run[0].start, BaselineTTFT: run[0].baselineTTFT}
				from := e.Start.Add(-c.BaselineSpan)
				if lastEnd.After(from) {
					from = lastEnd
				}
				if from.Before(e.Start) {
					e.Baseline.From, e.Baseline.To = from, e.Start
				}
				for _, q := range run {
					grow(&e, q)
					lastAnomalous = q.start
				}
				open, run, seen = &e, nil, 0
			}
		case p.known:
			run, seen = nil, 0
			base.add(p)
		}
	}
	if open != nil {
		if silent < minSilence {
			open.SilentSince = time.Time{}
		}
		if quiet > 0 {
			// Healthy minutes since the last anomalous one; silence after
			// them does not undo the recovery (as when it closes).
			open.RecoveringSince, open.SilentSince = lastAnomalous.Add(time.Minute), time.Time{}
		}
		out = append(out, *open)
	}
	return out
}

// minSilence is how many minutes without a request an ongoing episode
// needs before it reads as silent: a request is counted in the minute it
// started, so in a slow incident the newest minute lacks the requests
// still under way.
const minSilence = 2

// fill returns minutes with a zero Minute for every missing one, up to
// until.
func fill(minutes []Minute, until time.Time) []Minute {
	out := make([]Minute, 0, len(minutes))
	gap := func(to time.Time) {
		for t := out[len(out)-1].Start.Add(time.Minute); t.Before(to); t = t.Add(time.Minute) {
			out = append(out, Minute{Start: t})
		}
	}
	for _, m := range minutes {
		if len(out) > 0 {
			gap(m.Start)
		}
		out = append(out, m)
	}
	gap(until)
	return out
}

// measure reads minute i, pooled with the minutes before it while it has
// fewer than MinRequests.
func measure(minutes []Minute, i int, c Config) point {
	p := point{start: minutes[i].Start, ttft: math.NaN(), itl: math.NaN(), itlMedian: math.NaN(), waiting: minutes[i].Waiting}
	if m := minutes[i]; m.Requests >= c.MinRequests {
		// Enough on its own: read the minute's histograms as they are
		// instead of copying them into pooled ones.
		p.pooledFrom, p.requests, p.errors, p.known = m.Start, m.Requests, m.Errors, true
		p.ttft = m.TTFT.Quantile(0.95)
		p.itl, p.itlMedian = m.ITL.Quantiles(0.95, 0.5)
		p.errorRate = float64(p.errors) / float64(p.requests)
		return p
	}
	var ttft, itl Histogram
	for j := i; j >= 0 && j > i-c.MaxPool; j-- {
		m := minutes[j]
		p.pooledFrom = m.Start
		p.requests += m.Requests
		p.errors += m.Errors
		ttft, itl = ttft.Merge(m.TTFT), itl.Merge(m.ITL)
		if p.requests >= c.MinRequests {
			break
		}
	}
	if p.requests < c.MinRequests || minutes[i].Requests == 0 {
		return p
	}
	p.known = true
	p.ttft = ttft.Quantile(0.95)
	p.itl, p.itlMedian = itl.Quantiles(0.95, 0.5)
	p.errorRate = float64(p.errors) / float64(p.requests)
	return p
}

// judge returns the signals on which p departs from the baseline, the
// baseline's TTFT p95 median (0 without a baseline), and whether its ITL
// median rose with an ITL p95 departure.
func judge(p point, base *rolling, c Config) (Signal, float64, bool) {
	if !p.known {
		return 0, 0, false
	}
	var s Signal
	if c.TTFTObjective > 0 && p.ttft > c.TTFTObjective {
		s |= SignalObjective
	}
	if base.errs.len() < c.MinBaseline {
		return s, 0, false
	}
	// above: v is above the baseline xs (logs of healthy p95s); also its
	// median as a value (0 when xs is too short).
	above := func(xs *window, v, minRatio float64) (bool, float64) {
		if xs.len() < c.MinBaseline {
			return false, 0
		}
		med, mad := xs.medianMAD()
		up := !math.IsNaN(v) && v > 0 && math.Log(v) > med+max(c.K*mad, math.Log(minRatio))
		return up, math.Exp(med)
	}
	up, baseTTFT := above(&base.logTTFT, p.ttft, c.MinRatio)
	if up {
		s |= SignalTTFT
	}
	medianUp := false
	if up, _ := above(&base.logITL, p.itl, c.MinRatio); up {
		s |= SignalITL
		medianUp, _ = above(&base.logITLMedian, p.itlMedian, c.MinITLMedianRatio)
	}
	med, mad := base.errs.medianMAD()
	if p.errors >= 3 && p.errorRate > med+c.MinErrorRise && (p.errorRate > med+c.K*mad || base.calls.chance(p.requests, p.errors) < minuteChance) {
		s |= SignalErrors
	}
	return s, baseTTFT, medianUp
}

// corroborated reports whether anomalous points in a row may open an
// episode: unless one departed on more than its ITL p95, one had its ITL
// median up too (Config.MinITLMedianRatio).
func corroborated(run []point) bool {
	for _, q := range run {
		if q.signals&^SignalITL != 0 || q.itlMedianUp {
			return true
		}
	}
	return false
}

// errorsUnlikely reports whether anomalous points in a row that depart on
// their error rate alone (shared) may open an episode: their errors
// together must be rarer by chance than maxChance at the baseline's
// pooled error rate. A minute's error rate spreads wider the fewer its
// requests: at a 4–4.5 % rate, 4 failures of 31 calls then 6 of 43
// (13–14 %) pass the per-minute rise, yet their 10 of 74 calls happen by
// chance once in 400–1,500 pairs of minutes (TestNoFalseAlarms, "a
// managed API's unlucky minutes"); a rate-limits incident's minutes are
// far rarer (TestRateLimitsOpenAnErrorsEpisode in demo). A run that
// falls short grows with the next anomalous points and is weighed again.
func errorsUnlikely(run []point, shared Signal, base *rolling) bool {
	if shared != SignalErrors {
		return true
	}
	var requests, errors int64
	counted := time.Time{}
	for _, q := range run {
		// A pooled point holds the minutes before it: count each once.
		if q.pooledFrom.After(counted) || counted.IsZero() {
			requests, errors, counted = requests+q.requests, errors+q.errors, q.start
		}
	}
	return base.calls.unlikely(requests, errors)
}

// grow widens e with an anomalous point.
func grow(e *Episode, p point) {
	e.Signals |= p.signals
	if !math.IsNaN(p.ttft) && p.ttft > e.PeakTTFT {
		e.Peak, e.PeakTTFT = p.start, p.ttft
	}
	if e.Peak.IsZero() {
		e.Peak = p.start
	}
	e.PeakErrorRate = max(e.PeakErrorRate, p.errorRate)
}

// severe reports whether p's TTFT rose at least SevereRatio times its
// baseline: enough to open an episode alone.
func severe(p point, c Config) bool {
	return p.signals&SignalTTFT != 0 && p.baselineTTFT > 0 && p.ttft >= c.SevereRatio*p.baselineTTFT
}
