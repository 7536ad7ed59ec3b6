package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tokenpath/tokenpath/telemetry"
)

// A component's p95 moved when it grew by half and by more than noise
// (server histograms read a healthy queue of milliseconds as a fraction of
// their first bucket, 0–300 ms for vLLM).
const (
	serverGrowthRatio = 1.5
	serverGrowthMinMs = 50
	// decodeGrowthRatio: ITL moves less than waits do under pressure, and
	// by milliseconds (itlGrowthMinMs) rather than tenths of seconds.
	decodeGrowthRatio = 1.3
	itlGrowthMinMs    = 5
	// clientGrowthMinMs: the app's TTFT p95 must grow this much (and by
	// serverGrowthRatio) before a gap between app and server counts.
	clientGrowthMinMs = 100
)

// serverFigures is what the verdict rules read when a window's calls
// carry no server split and the servers' metrics stand in for it
// (a.server, nil otherwise). pick names the verdict the metrics point to,
// decided once so the rules' claims cannot overlap; the rule of that
// verdict writes the evidence (its Claim).
type serverFigures struct {
	sm                 ServerMetrics
	comps              map[string]ServerComponent
	clientP95, clientB *float64 // client TTFT p95, window and baseline (requests)
	win, base          gaugeFigures
	pick               Verdict
	// comp and delta: the component the winning claim quotes and its p95
	// growth (ms), for the summary.
	comp  string
	delta float64
}

type gaugeFigures struct {
	kvPeak, waitingPeak *float64
}

// newServerFigures reads the servers' metrics of a window whose calls
// carry no server split; nil when there are none to read.
func newServerFigures(in Input) *serverFigures {
	sm := in.ServerMetrics
	if sm == nil || len(sm.Histograms) == 0 || hasServerSplit(in) {
		return nil
	}
	comps := serverComponents(*sm, in.Window, in.Baseline)
	if len(comps) == 0 {
		return nil
	}
	return &serverFigures{sm: *sm, comps: comps, win: gaugePeaks(*sm, in.Window), base: gaugePeaks(*sm, in.Baseline)}
}

// apply adds the server components where the requests measured nothing
// themselves, the chart's server p95s, and the page's figures; then picks
// the verdict the metrics point to.
func (f *serverFigures) apply(a *analysis, d *Diagnosis) {
	d.ServerMetrics = &ServerMetricsFigures{Servers: f.sm.Servers, Endpoints: f.sm.Endpoints, Components: f.comps}
	if d.Components == nil {
		d.Components = map[string]ComponentStats{}
	}
	for comp, c := range f.comps {
		if cur, ok := d.Components[comp]; ok && cur.Count > 0 {
			continue // the requests measured it themselves (client TTFT, ITL)
		}
		d.Components[comp] = ComponentStats{P50: c.P50, P95: c.P95, P99: c.P99, BaselineP95: c.BaselineP95,
			Count: int(c.Count), BaselineCount: int(c.BaseCount)}
	}
	a.comps = d.Components
	if len(a.in.Requests) == 0 {
		d.TTFT = Percentiles{d.Components[ComponentTTFT].P50, d.Components[ComponentTTFT].P95, d.Components[ComponentTTFT].P99}
	} else {
		t := a.comps[ComponentTTFT]
		f.clientP95, f.clientB = t.P95, t.BaselineP95
	}
	serverSeries(a.series, f.sm, a.width)
	if g := gpuDecodeBound(f.sm.Window); g != nil {
		if itl, ok := f.comps[ComponentITL]; ok {
			g.ITLP50, g.ITLP95 = itl.P50, itl.P95
		}
		d.Answers.Decode = g
	}
	f.pick = f.choose(a)
}

// choose is the order in which the metrics explain a window: a hold
// before the server (cold start), then the server's own waits (queue or
// prefill, the larger), then time between app and server (network), then
// slower tokens (decode); healthy when nothing moved beyond its buckets.
func (f *serverFigures) choose(a *analysis) Verdict {
	_, queued := f.queueGrowth()
	_, prefilled := f.prefillGrowth()
	_, gap := f.clientGap()
	switch {
	case (gap || prefilled) && !queued && a.scaledUp():
		return VerdictColdStart
	case queued:
		return VerdictQueueing
	case prefilled:
		return VerdictPrefill
	case gap:
		return VerdictNetwork
	}
	if _, ok := f.decodeGrowth(); ok {
		return VerdictDecode
	}
	return VerdictHealthy
}

// growth is how much a component's p95 grew (ms) and whether that counts.
func (f *serverFigures) growth(comp string, ratio float64) (float64, bool) {
	return f.growthBy(comp, ratio, serverGrowthMinMs)
}

func (f *serverFigures) growthBy(comp string, ratio, minMs float64) (float64, bool) {
	c, ok := f.comps[comp]
	if !ok || c.P95 == nil || c.BaselineP95 == nil {
		return 0, false
	}
	d := *c.P95 - *c.BaselineP95
	return d, *c.P95 >= ratio**c.BaselineP95 && d >= minMs
}

// queueGrowth counts when the queue grew at least as much as prefill.
func (f *serverFigures) queueGrowth() (float64, bool) {
	q, ok := f.growth(ComponentQueue, serverGrowthRatio)
	p, _ := f.prefillGrowth()
	return q, ok && q >= p
}

// prefillGrowth is the prefill histogram's growth, else the server TTFT's
// growth beyond the queue's (SGLang and TGI export no prefill histogram).
func (f *serverFigures) prefillGrowth() (float64, bool) {
	if _, ok := f.comps[ComponentPrefill]; ok {
		return f.growth(ComponentPrefill, serverGrowthRatio)
	}
	t, tok := f.growth(ComponentTTFT, serverGrowthRatio)
	q, _ := f.growth(ComponentQueue, serverGrowthRatio)
	if !tok {
		return 0, false
	}
	return t - math.Max(q, 0), t-math.Max(q, 0) >= serverGrowthMinMs && t-q > q
}

// decodeGrowth is the ITL's growth, else the decode histogram's.
func (f *serverFigures) decodeGrowth() (float64, bool) {
	if d, ok := f.growthBy(ComponentITL, decodeGrowthRatio, itlGrowthMinMs); ok {
		return d, true
	}
	return f.growth(ComponentDecode, decodeGrowthRatio)
}

// serverTTFTGrowth is the server-side TTFT growth: the TTFT histogram,
// else queue + prefill.
func (f *serverFigures) serverTTFTGrowth() (float64, bool) {
	if _, ok := f.comps[ComponentTTFT]; ok {
		d, _ := f.growth(ComponentTTFT, 1)
		return d, true
	}
	_, hasQ := f.comps[ComponentQueue]
	_, hasP := f.comps[ComponentPrefill]
	if !hasQ && !hasP {
		return 0, false
	}
	q, _ := f.growth(ComponentQueue, 1)
	p, _ := f.growth(ComponentPrefill, 1)
	return q + p, true
}

// clientGap is the app's TTFT growth that the servers' own TTFT does not
// account for; it counts when the app waited clearly longer and the
// servers grew less than 30 % of that.
func (f *serverFigures) clientGap() (float64, bool) {
	if f.clientP95 == nil || f.clientB == nil {
		return 0, false
	}
	cd := *f.clientP95 - *f.clientB
	if *f.clientP95 < serverGrowthRatio**f.clientB || cd < clientGrowthMinMs {
		return 0, false
	}
	sd, ok := f.serverTTFTGrowth()
	return cd - sd, ok && sd < 0.3*cd
}

// scaledUp reports a scale-up or a started instance of the servers (or
// the diagnosed service) from shortly before the window to its end, or a
// server instance that the baseline never saw.
func (a *analysis) scaledUp() bool {
	if len(a.server.sm.NewInstances) > 0 {
		return true
	}
	for _, e := range a.in.Events {
		if !a.nearWindow(e) {
			continue
		}
		if e.Kind == telemetry.EventInstanceStarted ||
			e.Kind == telemetry.EventScale && e.ToReplicas != nil && (e.FromReplicas == nil || *e.ToReplicas > *e.FromReplicas) {
			return true
		}
	}
	return false
}

// serverPicked returns the servers' figures when they stand in for the
// split and point to v; nil otherwise.
func (a *analysis) serverPicked(v Verdict) *serverFigures {
	if a.server == nil || a.server.pick != v {
		return nil
	}
	return a.server
}

// claimFromServer writes a metrics verdict's evidence: the component's
// server p95, the corroborating lines, and how the calls were tied to
// the servers. The component's growth against the app's (or the
// server's TTFT) growth is the share it explains; a growth within one
// bucket's width costs confidence.
func (a *analysis) claimFromServer(comp string, delta float64, corroboration []Evidence, cause string) bool {
	f := a.server
	f.comp, f.delta = comp, delta
	if comp != "" {
		if _, ok := f.comps[comp]; ok {
			a.addEvidence(f.componentEvidence(comp))
		}
	}
	for _, e := range corroboration {
		a.addEvidence(e)
	}
	// A preemption burst and a prefix-cache hit-rate drop are lines of
	// their own whichever verdict the window reaches; they count for the
	// verdicts whose corroboration names them.
	for _, e := range append(f.preemptionEvidence(), f.prefixCacheEvidence()...) {
		if !slices.ContainsFunc(corroboration, func(c Evidence) bool { return c.Text == e.Text }) {
			a.addEvidence(e)
		}
	}
	a.addEvidence(f.splitEvidence())
	a.winner.explained = 1
	if f.clientP95 != nil && f.clientB != nil && *f.clientP95 > *f.clientB {
		a.winner.explained = math.Min(1, math.Max(delta, 0)/(*f.clientP95-*f.clientB))
	}
	a.bonus += 0.15 * float64(len(corroboration))
	if c, ok := f.comps[comp]; ok && c.ResolutionMs != nil && *c.ResolutionMs > delta {
		a.penalty += 0.15 // the growth is within one bucket's width
	}
	a.cause = cause
	return true
}

func (a *analysis) addEvidence(e Evidence) { a.add(e.Text, e.Figures) }

// serverSummary is the sentence of a verdict the servers' metrics reached.
func (a *analysis) serverSummary() string {
	f := a.server
	figure := fmt.Sprintf("%s p95 %s from server metrics", componentWords(f.comp), fmtDelta(f.delta))
	if f.comp == "" {
		figure = fmt.Sprintf("the app's TTFT p95 %s beyond the servers' own", fmtDelta(f.delta))
	}
	return fmt.Sprintf("%s on %s: %s (%s).", a.rules.of(f.pick).Label, strings.Join(f.sm.Servers, ", "), a.cause, figure)
}

// splitEvidence says the split is the servers' histograms, not per request.
func (f *serverFigures) splitEvidence() Evidence {
	if len(f.sm.Endpoints) > 0 {
		return Evidence{Text: fmt.Sprintf("No server spans: the calls to %s are tied to %s by its metrics; queue, prefill and decode are its histograms over the window, not per request.",
			strings.Join(f.sm.Endpoints, ", "), strings.Join(f.sm.Servers, ", "))}
	}
	return Evidence{Text: "No server spans: the per-request split is unknown; queue, prefill and decode are the servers' histograms over the window."}
}

// componentEvidence quotes a component's server p95 and its resolution.
func (f *serverFigures) componentEvidence(comp string) Evidence {
	c := f.comps[comp]
	what := c.Histogram + " histogram"
	if _, batch := serverHistogramFallbacks[c.Histogram]; batch {
		what += " (TGI's forward passes, per batch rather than per request)"
	}
	text := fmt.Sprintf("Server %s p95 %s → %s (%s of %s, interpolated within its buckets",
		componentWords(comp), fmtMs(val(c.BaselineP95)), fmtMs(val(c.P95)), what, strings.Join(f.sm.Servers, ", "))
	figs := figures("p95", val(c.P95), "baseline_p95", val(c.BaselineP95), "count", c.Count)
	if c.ResolutionMs != nil {
		text += fmt.Sprintf("; the p95 lies in a %s wide bucket", fmtMs(*c.ResolutionMs))
		figs["resolution_ms"] = *c.ResolutionMs
	}
	return Evidence{Text: text + ").", Figures: figs}
}

func componentWords(comp string) string {
	switch comp {
	case ComponentQueue:
		return "queue time"
	case ComponentTTFT:
		return "TTFT"
	case ComponentITL:
		return "inter-token latency"
	}
	return comp + " time"
}

// pressureEvidence: waiting requests and KV-cache usage, window vs baseline.
func (f *serverFigures) pressureEvidence() []Evidence {
	var out []Evidence
	if w := f.win.waitingPeak; w != nil && *w >= 1 {
		b := 0.0
		if f.base.waitingPeak != nil {
			b = *f.base.waitingPeak
		}
		if *w > b {
			out = append(out, Evidence{Text: fmt.Sprintf("Up to %s requests waiting on the servers (baseline peak %s).", fmtCount(*w), fmtCount(b)),
				Figures: map[string]float64{"requests_waiting_peak": *w, "baseline_requests_waiting_peak": b}})
		}
	}
	if kv := f.win.kvPeak; kv != nil && *kv >= kvFull {
		out = append(out, Evidence{Text: fmt.Sprintf("KV cache up to %s full: new requests cannot be scheduled until others finish.", fmtPct(*kv)),
			Figures: map[string]float64{"kv_cache_peak": *kv}})
	}
	return out
}

// preemptionEvidence: a burst of preemptions (KV cache exhausted
// mid-decode), a line of its own whichever verdict the window reaches.
func (f *serverFigures) preemptionEvidence() []Evidence {
	w, b := f.sm.Window.Preemptions, f.sm.Baseline.Preemptions
	if w == nil || *w < 1 {
		return nil
	}
	base := 0.0
	if b != nil {
		base = *b
	}
	if *w <= 2*base {
		return nil
	}
	return []Evidence{{Text: fmt.Sprintf("Preemption burst: %s requests preempted in the window against %s in the baseline.", fmtCount(*w), fmtCount(base)),
		Figures: map[string]float64{"preemptions": *w, "baseline_preemptions": base}}}
}

// prefixCacheEvidence: a drop of the prefix-cache hit rate means prompts
// are prefilled again instead of reused.
func (f *serverFigures) prefixCacheEvidence() []Evidence {
	w, b := f.sm.Window.PrefixHitRate(), f.sm.Baseline.PrefixHitRate()
	if w == nil || b == nil || *b-*w < 0.1 {
		return nil
	}
	return []Evidence{{Text: fmt.Sprintf("Prefix-cache hit rate dropped %s → %s: prompts are computed again instead of reused.", fmtPct(*b), fmtPct(*w)),
		Figures: map[string]float64{"prefix_cache_hit_rate": *w, "baseline_prefix_cache_hit_rate": *b}}}
}

// hasServerSplit reports whether any request carries the server's own
// split (server spans): then the requests, not the metrics, decide.
func hasServerSplit(in Input) bool {
	for i := range in.Requests {
		if r := &in.Requests[i]; r.Queue != nil || r.Prefill != nil || r.ServerService != "" {
			return true
		}
	}
	return false
}

// gaugePeaks are the peaks of KV usage and waiting requests over r.
func gaugePeaks(sm ServerMetrics, r Range) gaugeFigures {
	var g gaugeFigures
	for _, p := range sm.Gauges {
		if !r.Contains(p.Time) {
			continue
		}
		var dst **float64
		switch p.Name {
		case MetricKVCacheUsage:
			dst = &g.kvPeak
		case MetricRequestsWaiting:
			dst = &g.waitingPeak
		default:
			continue
		}
		if *dst == nil || p.Value > **dst {
			v := p.Value
			*dst = &v
		}
	}
	return g
}
