package demo

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

// base is a fixed historical instant, so tests do not depend on the clock.
var base = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Round(p*float64(len(s)-1)))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// vllmCalls selects the successful rag-chat calls whose client span
// started in [from, to), mapped through f.
func vllmCalls(sc *Scenario, from, to time.Time, f func(Request) float64) []float64 {
	var out []float64
	for _, r := range sc.Requests {
		if r.Managed || r.Start.Before(from) || !r.Start.Before(to) {
			continue
		}
		out = append(out, f(r))
	}
	return out
}

func TestEngineCosts(t *testing.T) {
	e := DefaultEngine
	if got := e.PrefillTime(4000) - e.PrefillTime(500); got != 3500*80*time.Microsecond {
		t.Errorf("prefill of 3500 more tokens costs %v, want %v (linear)", got, 3500*80*time.Microsecond)
	}
	if got := e.PrefillTime(0); got != 15*time.Millisecond {
		t.Errorf("prefill base = %v", got)
	}
	for n := 1; n < 100; n++ {
		if e.DecodeStep(n+1) <= e.DecodeStep(n) {
			t.Fatalf("decode step does not grow with the batch at %d", n)
		}
	}
	if got := e.DecodeStep(32); got != 12*time.Millisecond+32*1200*time.Microsecond {
		t.Errorf("decode step at 32 running = %v", got)
	}
}

func TestQueueComesFromKVSaturation(t *testing.T) {
	phase := Phase{Incident: KVSaturation, From: base.Add(10 * time.Minute), To: base.Add(14 * time.Minute)}
	sc := Simulate(Config{Seed: 7}, base, base.Add(15*time.Minute), []Phase{phase})

	queue := func(r Request) float64 { return ms(r.Queue) }
	healthy := vllmCalls(sc, base.Add(2*time.Minute), phase.From, queue)
	if p50, p95 := percentile(healthy, .5), percentile(healthy, .95); p50 > 20 || p95 > 150 {
		t.Errorf("healthy queue p50 %.1f ms p95 %.1f ms: want ~0 at low load (≤ one engine step)", p50, p95)
	}
	// The KV cache needs a minute of long answers to fill up.
	late := vllmCalls(sc, phase.From.Add(2*time.Minute), phase.To, queue)
	if p95 := percentile(late, .95); p95 < 2000 {
		t.Errorf("kv_saturation queue p95 %.0f ms, want seconds", p95)
	}

	var kvMax, waitingMax float64
	for _, p := range sc.Metrics {
		if !phase.Contains(p.Time) {
			continue
		}
		switch p.Name {
		case MetricKVCacheUsage:
			kvMax = max(kvMax, p.Value)
		case MetricRequestsWaiting:
			waitingMax = max(waitingMax, p.Value)
		}
	}
	if kvMax < 0.95 || waitingMax < 5 {
		t.Errorf("during kv_saturation KV max %.3f, waiting max %.0f: want ≥ 0.95 and a queue", kvMax, waitingMax)
	}
	// The long waits are the model's doing: they happen when the replica's
	// KV cache was (nearly) full or others were queued ahead.
	for _, r := range sc.Requests {
		if !r.Managed && r.Queue > 3*time.Second && r.KVUsageAtArrival < 0.85 && r.WaitingAtArrival == 0 {
			t.Errorf("request %s waited %v with KV %.2f and %d ahead of it", r.TraceID, r.Queue, r.KVUsageAtArrival, r.WaitingAtArrival)
			break
		}
	}
}

func TestPrefillFollowsInputTokens(t *testing.T) {
	phase := Phase{Incident: LongPrompt, From: base.Add(8 * time.Minute), To: base.Add(11 * time.Minute)}
	sc := Simulate(Config{Seed: 3}, base, base.Add(11*time.Minute), []Phase{phase})
	for _, r := range sc.Requests {
		if r.Managed {
			continue
		}
		if want := DefaultEngine.PrefillTime(r.InputTokens); r.Prefill != want {
			t.Fatalf("prefill %v for %d tokens, want %v", r.Prefill, r.InputTokens, want)
		}
	}
	in := func(r Request) float64 { return float64(r.InputTokens) }
	pre := func(r Request) float64 { return ms(r.Prefill) }
	ttft := func(r Request) float64 { return ms(r.TTFT) }
	for _, c := range []struct {
		name string
		f    func(Request) float64
		min  float64
	}{{"input tokens", in, 5}, {"prefill", pre, 4}, {"TTFT", ttft, 3}} {
		h := percentile(vllmCalls(sc, base.Add(time.Minute), phase.From, c.f), .5)
		l := percentile(vllmCalls(sc, phase.From, phase.To, c.f), .5)
		if l < c.min*h {
			t.Errorf("long_prompt %s median %.0f vs healthy %.0f: want ≥ %.0f×", c.name, l, h, c.min)
		}
	}
}

func TestITLGrowsWithBatch(t *testing.T) {
	phase := Phase{Incident: MemoryBoundDecode, From: base.Add(8 * time.Minute), To: base.Add(11 * time.Minute)}
	sc := Simulate(Config{Seed: 5}, base, base.Add(11*time.Minute), []Phase{phase})
	itl := func(r Request) float64 { return ms(r.ITL()) }
	batch := func(r Request) float64 { return float64(r.RunningAtAdmit) }
	hITL, mITL := percentile(vllmCalls(sc, base.Add(time.Minute), phase.From, itl), .5), percentile(vllmCalls(sc, phase.From.Add(time.Minute), phase.To, itl), .5)
	hB, mB := percentile(vllmCalls(sc, base.Add(time.Minute), phase.From, batch), .5), percentile(vllmCalls(sc, phase.From.Add(time.Minute), phase.To, batch), .5)
	if mB < 3*hB || mITL < 2.5*hITL {
		t.Errorf("memory_bound_decode: batch %.0f → %.0f, ITL %.1f → %.1f ms: want the batch ×3 and ITL ×2.5", hB, mB, hITL, mITL)
	}
	// An ITL is never below the decode step of the batch it joined.
	for _, r := range sc.Requests {
		if !r.Managed && r.OutputTokens > 1 && r.ITL() < DefaultEngine.DecodeStep(1) {
			t.Fatalf("ITL %v below one decode step", r.ITL())
		}
	}
}

func TestColdStart(t *testing.T) {
	phase := Phase{Incident: ColdStart, From: base.Add(8 * time.Minute), To: base.Add(11 * time.Minute)}
	sc := Simulate(Config{Seed: 13}, base, base.Add(13*time.Minute), []Phase{phase})

	var toZero, activated time.Time
	for _, e := range sc.Events {
		if e.Kind != "scale" || e.Service != vllmService || e.FromReplicas == nil || e.ToReplicas == nil {
			t.Fatalf("malformed event %+v", e)
		}
		switch {
		case *e.FromReplicas == 1 && *e.ToReplicas == 0 && e.Reason == "KEDAScaleTargetDeactivated" && e.Source == "keda":
			toZero = e.Time
		case *e.FromReplicas == 0 && *e.ToReplicas == 1 && e.Reason == "KEDAScaleTargetActivated" && e.Source == "keda":
			activated = e.Time
		}
	}
	if toZero.IsZero() || activated.IsZero() || !toZero.Before(activated) || !phase.Contains(toZero) || !phase.Contains(activated) {
		t.Fatalf("want a 1→0 then a 0→1 scale event inside the phase; events: %+v", sc.Events)
	}

	// Instances that existed before the scale to zero.
	old := map[string]bool{}
	for _, p := range sc.Metrics {
		if p.Instance != "" && p.Time.Before(toZero) {
			old[p.Instance] = true
		}
		if p.Instance != "" && p.Time.After(toZero) && p.Time.Before(activated) {
			t.Errorf("gauges from %s while scaled to zero", p.Instance)
		}
	}
	var held []Request
	for _, r := range sc.Requests {
		if r.ColdStart {
			held = append(held, r)
		}
	}
	if len(held) < 3 {
		t.Fatalf("%d held requests, want several", len(held))
	}
	first := held[0]
	for _, r := range held {
		if r.Start.Before(first.Start) {
			first = r
		}
	}
	if first.Hold < podStartMin-time.Second || first.Hold > podStartMax {
		t.Errorf("first held request waited %v, want the pod start time (%v–%v)", first.Hold, podStartMin, podStartMax)
	}
	for _, r := range held {
		if old[r.Instance] {
			t.Errorf("held request served by old instance %s", r.Instance)
		}
		// The held burst lands on one fresh pod at once, so the last ones
		// queue behind the others' prefill (~3 s for ~50 prompts), which is
		// small next to the pod start.
		if r.Queue > 4*time.Second {
			t.Errorf("held %v, then queued %v on the new pod: the server queue should stay small", r.Hold, r.Queue)
		}
		if got := r.Start.Add(r.NetworkUp + r.Hold); got.Before(activated.Add(podStartMin)) {
			t.Errorf("server span starts %v after activation, before the pod could be ready", got.Sub(activated))
		}
		if w := r.Want(); !w.ColdStart || *w.ColdStartWait != ms(r.NetworkUp+r.Hold) || *w.Network != ms(r.NetworkDown) {
			t.Errorf("Want() of a held request: cold %v wait %v network %v", w.ColdStart, *w.ColdStartWait, *w.Network)
		}
	}
	// Nobody is held outside the phase (and the pod start after it).
	for _, r := range sc.Requests {
		if r.ColdStart && (r.Start.Before(phase.From) || r.Start.After(phase.To.Add(podStartMax))) {
			t.Errorf("request at %v held outside the cold start", r.Start.Sub(base))
		}
	}
}

func TestSimulateIsDeterministic(t *testing.T) {
	phases := []Phase{{Incident: ColdStart, From: base.Add(2 * time.Minute), To: base.Add(5 * time.Minute)}}
	a := Simulate(Config{Seed: 42}, base, base.Add(6*time.Minute), phases)
	b := Simulate(Config{Seed: 42}, base, base.Add(6*time.Minute), phases)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different scenarios")
	}
	c := Simulate(Config{Seed: 43}, base, base.Add(6*time.Minute), phases)
	if reflect.DeepEqual(a.Requests, c.Requests) {
		t.Fatal("different seeds, same requests")
	}
	// Shifted by whole minutes (scrapes stay aligned), the same seed makes
	// the same scenario at the new time: tests may anchor on the clock.
	shift := 7*time.Hour + 13*time.Minute
	moved := []Phase{{Incident: ColdStart, From: phases[0].From.Add(shift), To: phases[0].To.Add(shift)}}
	d := Simulate(Config{Seed: 42}, base.Add(shift), base.Add(6*time.Minute+shift), moved)
	if len(d.Requests) != len(a.Requests) || len(d.Events) != len(a.Events) || len(d.Metrics) != len(a.Metrics) {
		t.Fatalf("shifted scenario: %d requests, %d events, %d points; want %d, %d, %d",
			len(d.Requests), len(d.Events), len(d.Metrics), len(a.Requests), len(a.Events), len(a.Metrics))
	}
	for i, r := range d.Requests {
		r.RootStart, r.Start = r.RootStart.Add(-shift), r.Start.Add(-shift)
		if !reflect.DeepEqual(r, a.Requests[i]) {
			t.Fatalf("shifted request %d differs:\n%+v\n%+v", i, r, a.Requests[i])
		}
	}
}

// TestSpansStateTheGroundTruth decomposes every call from its spans as
// DESIGN.md prescribes and checks it against Request.Want, to the
// microsecond: the ground truth is what the wire says, not a second story.
func TestSpansStateTheGroundTruth(t *testing.T) {
	phases := []Phase{
		{Incident: ColdStart, From: base.Add(3 * time.Minute), To: base.Add(6 * time.Minute)},
		{Incident: NetworkDelay, From: base.Add(7 * time.Minute), To: base.Add(8 * time.Minute)},
	}
	sc := Simulate(Config{Seed: 9}, base, base.Add(9*time.Minute), phases)
	byID := map[SpanID]*Span{}
	for i := range sc.Spans {
		sp := &sc.Spans[i]
		if _, dup := byID[sp.SpanID]; dup {
			t.Fatalf("duplicate span id %s", sp.SpanID)
		}
		byID[sp.SpanID] = sp
	}
	seconds := func(sp *Span, key string) time.Duration {
		v, ok := sp.Attr(key)
		if !ok {
			t.Fatalf("span %s has no %s", sp.Name, key)
		}
		return time.Duration(math.Round(v.(float64) * 1e9))
	}
	near := func(what string, got time.Duration, want *float64) {
		t.Helper()
		if want == nil || math.Abs(ms(got)-*want) > 0.001 {
			t.Fatalf("%s: spans say %v, Want says %v", what, got, want)
		}
	}
	var sawCold, sawManaged, sawError bool
	inCalls := map[TraceID]time.Duration{} // per trace, the model calls before (a task's calls run in turn)
	for _, r := range sc.Requests {
		w := r.Want()
		client := byID[r.ClientSpanID]
		root := byID[r.RootSpanID]
		if client == nil || root == nil || client.TraceID != r.TraceID || client.ParentSpanID != root.SpanID {
			t.Fatalf("call %s: client/root spans missing or unlinked", r.TraceID)
		}
		near("pre_inference", client.Start.Sub(root.Start)-inCalls[r.TraceID], w.PreInference)
		inCalls[r.TraceID] += client.End.Sub(client.Start)
		near("e2e", client.End.Sub(client.Start), w.E2E)
		if r.Error {
			sawError = true
			if !client.Error || w.TTFT != nil {
				t.Fatal("failed call must be an error span without TTFT")
			}
			continue
		}
		clientTTFT := seconds(client, "gen_ai.response.time_to_first_chunk")
		near("ttft", clientTTFT, w.TTFT)
		near("decode", client.Duration()-clientTTFT, w.Decode)
		if r.Managed {
			sawManaged = true
			if w.Queue != nil || w.Prefill != nil || w.Network != nil {
				t.Fatal("a managed call must not state queue/prefill/network")
			}
			continue
		}
		server := byID[r.ServerSpanID]
		if server == nil || server.ParentSpanID != client.SpanID || server.Resource.Instance != r.Instance {
			t.Fatalf("call %s: server span missing, unlinked or on the wrong instance", r.TraceID)
		}
		near("queue", seconds(server, "gen_ai.latency.time_in_queue"), w.Queue)
		near("prefill", seconds(server, "gen_ai.latency.time_in_model_prefill"), w.Prefill)
		serverTTFT := seconds(server, "gen_ai.latency.time_to_first_token")
		if got := seconds(server, "gen_ai.latency.e2e"); got != server.End.Sub(server.Start) {
			t.Fatalf("server e2e %v vs span %v", got, server.End.Sub(server.Start))
		}
		hold := server.Start.Sub(client.Start)
		if r.ColdStart {
			sawCold = true
			near("cold start wait", hold, w.ColdStartWait)
			near("network", clientTTFT-serverTTFT-hold, w.Network)
		} else {
			near("network", clientTTFT-serverTTFT, w.Network)
			if r.Incident == NetworkDelay && *w.Network < 800 {
				t.Fatalf("network_delay call with %v ms of network", *w.Network)
			}
		}
	}
	if !sawCold || !sawManaged || !sawError {
		t.Errorf("scenario lacks a case: cold %v managed %v error %v", sawCold, sawManaged, sawError)
	}
}

func TestProviderSlowness(t *testing.T) {
	phase := Phase{Incident: ProviderSlowness, From: base.Add(8 * time.Minute), To: base.Add(12 * time.Minute)}
	sc := Simulate(Config{Seed: 2}, base, base.Add(12*time.Minute), []Phase{phase})
	var healthy, slow, hIn, sIn []float64
	for _, r := range sc.Requests {
		if !r.Managed || r.Error {
			continue
		}
		if phase.Contains(r.Start) {
			slow, sIn = append(slow, ms(r.TTFT)), append(sIn, float64(r.InputTokens))
		} else {
			healthy, hIn = append(healthy, ms(r.TTFT)), append(hIn, float64(r.InputTokens))
		}
	}
	h, s := percentile(healthy, .5), percentile(slow, .5)
	if s < 3*h || h < 400 || h > 800 {
		t.Errorf("managed TTFT median %.0f → %.0f ms: want ~0.4–0.7 s, then ×4", h, s)
	}
	if hi, si := percentile(hIn, .5), percentile(sIn, .5); math.Abs(si-hi) > 0.25*hi {
		t.Errorf("input tokens moved %.0f → %.0f: provider slowness must not change tokens", hi, si)
	}
}

func TestBackfillPhases(t *testing.T) {
	phases := BackfillPhases(base, base.Add(90*time.Minute))
	if len(phases) != len(Incidents) {
		t.Fatalf("90 min backfill plants %d incidents, want %d", len(phases), len(Incidents))
	}
	prevEnd := base
	for i, p := range phases {
		if p.Incident != Incidents[i] {
			t.Errorf("phase %d is %s", i, p.Incident)
		}
		if healthy := p.From.Sub(prevEnd); healthy < 3*p.To.Sub(p.From) {
			t.Errorf("%s has only %v of healthy baseline before it", p.Incident, healthy)
		}
		prevEnd = p.To
	}
	// A short backfill keeps the last kinds: KV saturation ends the
	// history, and live traffic's first incident repeats it.
	if got := BackfillPhases(base, base.Add(10*time.Minute)); len(got) != 1 || got[0].Incident != KVSaturation {
		t.Errorf("10 min backfill: %+v, want one %s", got, KVSaturation)
	}
	got := BackfillPhases(base, base.Add(DefaultBackfill))
	if len(got) != len(Incidents) || got[len(got)-1].Incident != LiveIncidents[0] {
		t.Errorf("default backfill: %+v, want every incident, the last one live traffic's first", got)
	}
	if end := PlannedBackfill(base, base.Add(DefaultBackfill)); end[len(end)-1].To != base.Add(DefaultBackfill-backfillQuiet) {
		t.Errorf("the backfill's last incident ends at %v, want %v before live traffic", end[len(end)-1].To, backfillQuiet)
	}
	for _, p := range got {
		if p.To.Sub(p.From) != maxIncident {
			t.Errorf("default backfill: %s lasts %v, want %v", p.Incident, p.To.Sub(p.From), maxIncident)
		}
	}
	// Every phase leaves a cold start room to go to zero and come back.
	for _, d := range []time.Duration{10 * time.Minute, 30 * time.Minute, time.Hour, 3 * time.Hour} {
		for _, p := range BackfillPhases(base, base.Add(d)) {
			if p.To.Sub(p.From) < minIncident {
				t.Errorf("%v backfill: %s lasts %v", d, p.Incident, p.To.Sub(p.From))
			}
		}
	}
	live := LivePhases(base, base.Add(time.Hour), 1)
	if live[0].Incident != ColdStart || live[1].Incident != LongPrompt || live[2].Incident != KVSaturation {
		t.Errorf("live rotation %v", live)
	}
	if live[0].From.Sub(base) != 4*live[0].To.Sub(live[0].From) {
		t.Errorf("live incident %v after %v healthy", live[0].To.Sub(live[0].From), live[0].From.Sub(base))
	}
}
