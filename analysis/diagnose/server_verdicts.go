package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
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
)

// serverFigures is what the metrics verdict rules read.
type serverFigures struct {
	comps              map[string]ServerComponent
	clientP95, clientB *float64 // client TTFT p95, window and baseline (requests)
	win, base          gaugeFigures
	counters           [2]CounterFigures // window, baseline
	servers            []string
}

type gaugeFigures struct {
	kvPeak, waitingPeak *float64
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

// serverRule is one verdict the server metrics can reach: applies says
// whether it explains the window (and how much growth it accounts for),
// corroborate adds the evidence that supports it.
type serverRule struct {
	verdict     Verdict
	applies     func(f *serverFigures) (deltaMs float64, ok bool)
	corroborate func(f *serverFigures) []Evidence
	cause       string // completes "<Verdict> on <servers>: …"
}

// serverRules are tried in order; the first that applies wins.
var serverRules = []serverRule{
	{
		// The client waited longer but the server did not: the time went
		// between them (network, a gateway).
		verdict: VerdictNetwork,
		applies: func(f *serverFigures) (float64, bool) {
			if f.clientP95 == nil || f.clientB == nil {
				return 0, false
			}
			cd := *f.clientP95 - *f.clientB
			if *f.clientP95 < serverGrowthRatio**f.clientB || cd < 100 {
				return 0, false
			}
			sd, ok := f.serverTTFTGrowth()
			return cd - sd, ok && sd < 0.3*cd
		},
		corroborate: func(f *serverFigures) []Evidence {
			sd, _ := f.serverTTFTGrowth()
			return []Evidence{{Text: fmt.Sprintf("Client TTFT p95 %s → %s while the servers' own TTFT moved %s: the time is spent between the app and the server (network, gateway).",
				fmtMs(*f.clientB), fmtMs(*f.clientP95), fmtDelta(sd)),
				Figures: map[string]float64{"client_ttft_p95": *f.clientP95, "client_ttft_baseline_p95": *f.clientB, "server_ttft_growth_ms": sd}}}
		},
		cause: "the app waited longer but the server did not",
	},
	{
		verdict: VerdictQueueing,
		applies: func(f *serverFigures) (float64, bool) {
			q, ok := f.growth(ComponentQueue, serverGrowthRatio)
			p, _ := f.prefillGrowth()
			return q, ok && q >= p
		},
		corroborate: func(f *serverFigures) []Evidence { return append(f.pressureEvidence(), f.preemptionEvidence()...) },
		cause:       "requests waited for a batch slot",
	},
	{
		verdict: VerdictPrefill,
		applies: func(f *serverFigures) (float64, bool) { return f.prefillGrowth() },
		corroborate: func(f *serverFigures) []Evidence {
			return f.prefixCacheEvidence()
		},
		cause: "prompt processing took longer",
	},
	{
		verdict: VerdictDecode,
		applies: func(f *serverFigures) (float64, bool) {
			if d, ok := f.growthBy(ComponentITL, decodeGrowthRatio, itlGrowthMinMs); ok {
				return d, true
			}
			return f.growth(ComponentDecode, decodeGrowthRatio)
		},
		corroborate: func(f *serverFigures) []Evidence { return append(f.preemptionEvidence(), f.pressureEvidence()...) },
		cause:       "token generation slowed",
	},
}

// componentEvidence quotes a component's server p95 and its resolution.
func (f *serverFigures) componentEvidence(comp string) Evidence {
	c := f.comps[comp]
	text := fmt.Sprintf("Server %s p95 %s → %s (%s histogram of %s, interpolated within its buckets",
		componentWords(comp), fmtMs(*c.BaselineP95), fmtMs(*c.P95), c.Histogram, strings.Join(f.servers, ", "))
	figs := map[string]float64{"p95": *c.P95, "baseline_p95": *c.BaselineP95, "count": c.Count}
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
	if kv := f.win.kvPeak; kv != nil && *kv >= 0.9 {
		out = append(out, Evidence{Text: fmt.Sprintf("KV cache up to %s full: new requests cannot be scheduled until others finish.", fmtPct(*kv)),
			Figures: map[string]float64{"kv_cache_peak": *kv}})
	}
	return out
}

// preemptionEvidence: a burst of preemptions (KV cache exhausted mid-decode).
func (f *serverFigures) preemptionEvidence() []Evidence {
	w, b := f.counters[0].Preemptions, f.counters[1].Preemptions
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
	w, b := f.counters[0].PrefixHitRate(), f.counters[1].PrefixHitRate()
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

// ApplyServerMetrics rereads a diagnosis from the inference servers'
// metrics when its requests carry no server split (the servers send
// metrics, not spans) or there are no requests at all (a server known
// only by its metrics): server components, chart p95s and a verdict from
// serverRules, with the same verdict names and numbered evidence. A cold
// start found from events and instances stands.
func ApplyServerMetrics(d Diagnosis, in Input, sm ServerMetrics) Diagnosis {
	if len(sm.Histograms) == 0 || hasServerSplit(in) {
		return d
	}
	if !d.Baseline.IsZero() {
		in.Baseline = d.Baseline // the baseline the diagnosis chose
	}
	if in.Baseline.IsZero() {
		in.Baseline = DefaultBaseline(in.Window)
	}
	comps := serverComponents(sm, in.Window, in.Baseline)
	if len(comps) == 0 {
		return d
	}
	d.ServerMetrics = &ServerMetricsFigures{Servers: sm.Servers, Endpoints: sm.Endpoints, Components: comps}
	if d.Components == nil {
		d.Components = map[string]ComponentStats{}
	}
	for comp, c := range comps {
		if cur, ok := d.Components[comp]; ok && cur.Count > 0 {
			continue // the requests measured it themselves (client TTFT, ITL)
		}
		d.Components[comp] = ComponentStats{P50: c.P50, P95: c.P95, P99: c.P99, BaselineP95: c.BaselineP95,
			Count: int(c.Count), BaselineCount: int(c.BaseCount)}
	}
	if len(in.Requests) == 0 {
		d.TTFT = Percentiles{d.Components[ComponentTTFT].P50, d.Components[ComponentTTFT].P95, d.Components[ComponentTTFT].P99}
	}
	serverSeries(d.Series, sm, time.Duration(d.BucketSeconds*float64(time.Second)))
	if d.Verdict == VerdictColdStart {
		return d
	}
	f := &serverFigures{comps: comps, counters: [2]CounterFigures{sm.Window, sm.Baseline}, servers: sm.Servers}
	if len(in.Requests) > 0 {
		t := d.Components[ComponentTTFT]
		f.clientP95, f.clientB = t.P95, t.BaselineP95
	}
	f.win, f.base = gaugePeaks(sm, in.Window), gaugePeaks(sm, in.Baseline)

	split := Evidence{Text: "No server spans: the per-request split is unknown; queue, prefill and decode are the servers' histograms over the window."}
	if len(sm.Endpoints) > 0 {
		split.Text = fmt.Sprintf("No server spans: the calls to %s are tied to %s by its metrics; queue, prefill and decode are its histograms over the window, not per request.",
			strings.Join(sm.Endpoints, ", "), strings.Join(sm.Servers, ", "))
	}
	for _, r := range serverRules {
		delta, ok := r.applies(f)
		if !ok {
			continue
		}
		ev := []Evidence{}
		if comp := ruleComponent(r.verdict, f); comp != "" {
			ev = append(ev, f.componentEvidence(comp))
		}
		corr := r.corroborate(f)
		ev = append(append(ev, corr...), split)
		d.Verdict, d.Answers.Cause = r.verdict, r.verdict
		d.Confidence = math.Min(0.95, 0.55+0.15*float64(len(corr)))
		if c, ok := f.comps[ruleComponent(r.verdict, f)]; ok && c.ResolutionMs != nil && *c.ResolutionMs > delta {
			d.Confidence = math.Max(0.3, d.Confidence-0.15) // the growth is within one bucket's width
		}
		d.Summary = fmt.Sprintf("%s on %s: %s (%s p95 %s from server metrics).", r.verdict.Label(), strings.Join(sm.Servers, ", "), r.cause,
			componentWords(orComp(ruleComponent(r.verdict, f), ComponentTTFT)), fmtDelta(delta))
		d.Evidence = numberEvidence(ev)
		return d
	}
	if d.Verdict == VerdictProvider || d.Verdict == VerdictHealthy {
		d.Verdict, d.Answers.Cause = VerdictHealthy, VerdictHealthy
		d.Confidence = 0.6
		d.Summary = fmt.Sprintf("Healthy: the histograms of %s show no queue, prefill or decode growth beyond their bucket resolution.", strings.Join(sm.Servers, ", "))
		d.Evidence = numberEvidence(append(d.Evidence, split))
	}
	return d
}

// ruleComponent is the component a verdict's main evidence quotes.
func ruleComponent(v Verdict, f *serverFigures) string {
	switch v {
	case VerdictQueueing:
		return ComponentQueue
	case VerdictPrefill:
		if _, ok := f.comps[ComponentPrefill]; ok {
			return ComponentPrefill
		}
		return ComponentTTFT
	case VerdictDecode:
		if _, ok := f.growthBy(ComponentITL, decodeGrowthRatio, itlGrowthMinMs); ok {
			return ComponentITL
		}
		if _, ok := f.comps[ComponentDecode]; ok {
			return ComponentDecode
		}
		return ComponentITL
	}
	return ""
}

func orComp(c, def string) string {
	if c == "" {
		return def
	}
	return c
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

// numberEvidence numbers evidence from 1, keeping each text once.
func numberEvidence(ev []Evidence) []Evidence {
	out := make([]Evidence, 0, len(ev))
	var seen []string
	for _, e := range ev {
		if slices.Contains(seen, e.Text) {
			continue
		}
		seen = append(seen, e.Text)
		e.N = len(out) + 1
		out = append(out, e)
	}
	return out
}
