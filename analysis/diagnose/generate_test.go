package diagnose

import (
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// t0 is the start of every test window: 14:00:00 UTC.
var t0 = time.Date(2026, 3, 14, 14, 0, 0, 0, time.UTC)

// sample is one request before assembly: a planted incident edits these
// raw parts, assemble derives TTFT, decode and E2E from them as the
// decomposition would.
type sample struct {
	t        time.Time
	inWindow bool
	instance string
	route    string
	tenant   string
	pre      float64
	queue    float64
	prefill  float64 // derived from input tokens unless an incident sets it
	network  float64
	itl      float64
	coldWait float64
	cold     bool
	in, out  int64
	// managed marks a managed API call: only TTFT is known, bundled.
	managed     bool
	managedTTFT float64
	skip        bool // drop the request (no traffic)
	// failed marks a call that ended in an error of errType (no first
	// token); trace, when set, puts the call in that trace at callIndex
	// (a retry in the same task).
	failed    bool
	errType   string
	trace     string
	callIndex int
}

// world is a synthetic service: a healthy baseline shape, plus hooks that
// plant an incident in the window.
type world struct {
	rng       *rand.Rand
	window    Range
	baseline  Range
	rate      float64 // requests per second
	instances []string
	// prefillPerToken is ms per input token: prefill is compute-bound and
	// scales with the prompt.
	prefillPerToken float64
	// tweak edits a sample after the healthy draw (the incident).
	tweak func(w *world, s *sample)
	// gauges returns an instance's kv usage, waiting and running at t; nil
	// leaves metrics out (managed APIs have none).
	gauges  func(w *world, t time.Time, inst string) (kv, waiting, running float64)
	events  []telemetry.Event
	managed bool
	noBase  bool
}

func newWorld(seed int64) *world {
	return &world{
		rng:             rand.New(rand.NewSource(seed)),
		window:          Range{From: t0, To: t0.Add(10 * time.Minute)},
		baseline:        Range{From: t0.Add(-30 * time.Minute), To: t0},
		rate:            2,
		instances:       []string{"vllm-7f9c-0", "vllm-7f9c-1", "vllm-7f9c-2"},
		prefillPerToken: 0.1,
		gauges:          healthyGauges,
	}
}

// lognormal draws around a median with multiplicative spread sigma.
func (w *world) lognormal(median, sigma float64) float64 {
	return median * math.Exp(sigma*w.rng.NormFloat64())
}

// healthyGauges is a server with room to spare.
func healthyGauges(w *world, _ time.Time, _ string) (float64, float64, float64) {
	kv := math.Min(0.6, math.Max(0.1, 0.35+0.05*w.rng.NormFloat64()))
	return kv, 0, math.Round(math.Max(1, 8+2*w.rng.NormFloat64()))
}

// draw makes the healthy parts of one request.
func (w *world) draw(t time.Time, inWindow bool) *sample {
	s := &sample{
		t: t, inWindow: inWindow,
		instance: w.instances[w.rng.Intn(len(w.instances))],
		route:    []string{"/chat", "/search", "/summarize"}[w.rng.Intn(3)],
		tenant:   []string{"acme", "globex", "initech", "umbrella"}[w.rng.Intn(4)],
		pre:      w.lognormal(40, 0.3),
		queue:    w.lognormal(5, 0.5),
		network:  w.lognormal(15, 0.3),
		itl:      w.lognormal(20, 0.12),
		in:       int64(math.Max(20, w.lognormal(800, 0.5))),
		out:      int64(math.Max(5, w.lognormal(200, 0.5))),
		managed:  w.managed,
	}
	s.prefill = -1 // derive from tokens
	if w.managed {
		s.managedTTFT = w.lognormal(600, 0.35)
	}
	return s
}

// assemble turns a sample into the decomposed request.
func (w *world) assemble(s *sample, n int) telemetry.LLMRequest {
	if s.prefill < 0 {
		s.prefill = w.prefillPerToken*float64(s.in)*w.lognormal(1, 0.1) + 5
	}
	decode := s.itl * float64(s.out-1)
	r := telemetry.LLMRequest{
		TraceID:       fmt.Sprintf("%032x", n),
		SpanID:        fmt.Sprintf("%016x", n),
		Service:       "chat-api",
		ServerService: "vllm",
		Model:         "llama-3.1-8b",
		Provider:      "vllm",
		Instance:      s.instance,
		Start:         s.t,
		PreInference:  telemetry.Ptr(s.pre),
		ITL:           telemetry.Ptr(s.itl),
		Decode:        telemetry.Ptr(decode),
		InputTokens:   telemetry.Ptr(s.in),
		OutputTokens:  telemetry.Ptr(s.out),
		ColdStart:     s.cold,
		Route:         s.route,
		Tenant:        s.tenant,
	}
	var ttft float64
	if s.managed {
		ttft = s.managedTTFT
		r.ServerService, r.Provider, r.Model, r.Instance = "", "openai", "gpt-4o", ""
	} else {
		ttft = s.coldWait + s.queue + s.prefill + s.network
		r.Queue = telemetry.Ptr(s.queue)
		r.Prefill = telemetry.Ptr(s.prefill)
		r.Network = telemetry.Ptr(s.network)
		if s.coldWait > 0 {
			r.ColdStartWait = telemetry.Ptr(s.coldWait)
		}
	}
	r.TTFT = telemetry.Ptr(ttft)
	r.E2E = telemetry.Ptr(ttft + decode)
	if s.trace != "" {
		r.TraceID, r.CallIndex = s.trace, s.callIndex
	}
	if s.failed {
		r.Error, r.ErrorType = true, s.errType
		r.TTFT, r.Decode, r.ITL, r.OutputTokens = nil, nil, nil, nil
		r.E2E = telemetry.Ptr(w.lognormal(300, 0.3))
	}
	return r
}

// requests draws Poisson arrivals over r.
func (w *world) requests(r Range, inWindow bool, n *int) []telemetry.LLMRequest {
	var out []telemetry.LLMRequest
	for t := r.From; ; {
		t = t.Add(time.Duration(w.rng.ExpFloat64() / w.rate * float64(time.Second)))
		if !t.Before(r.To) {
			return out
		}
		s := w.draw(t, inWindow)
		if w.tweak != nil {
			w.tweak(w, s)
		}
		if s.skip {
			continue
		}
		*n++
		out = append(out, w.assemble(s, *n))
	}
}

// metrics scrapes every instance every 10 s over baseline and window.
func (w *world) metrics() []telemetry.MetricPoint {
	if w.gauges == nil {
		return nil
	}
	var out []telemetry.MetricPoint
	for t := w.baseline.From; t.Before(w.window.To); t = t.Add(10 * time.Second) {
		for _, inst := range w.instances {
			kv, waiting, running := w.gauges(w, t, inst)
			if math.IsNaN(kv) {
				continue // instance not up
			}
			for name, v := range map[string]float64{
				MetricKVCacheUsage: kv, MetricRequestsWaiting: waiting, MetricRequestsRunning: running,
			} {
				out = append(out, telemetry.MetricPoint{Time: t, Service: "vllm", Instance: inst, Name: name, Value: v})
			}
		}
	}
	return out
}

// input generates the whole diagnosis input.
func (w *world) input() Input {
	n := 0
	var base []telemetry.LLMRequest
	if !w.noBase {
		base = w.requests(w.baseline, false, &n)
	}
	win := w.requests(w.window, true, &n)
	return Input{
		Window: w.window, Baseline: w.baseline,
		Requests: win, BaselineRequests: base,
		Metrics: w.metrics(), Events: w.events,
	}
}

// inIncident reports whether t falls in the planted incident, minutes 3–8
// of the window: leaving calm buckets in the window gives the per-bucket
// correlation something to work with.
func (w *world) inIncident(t time.Time) bool {
	return !t.Before(w.window.From.Add(3*time.Minute)) && t.Before(w.window.From.Add(8*time.Minute))
}

// queueSaturation plants a full KV cache and waiting requests on the given
// instances (all when none are given).
func queueSaturation(w *world, only ...string) {
	hit := func(inst string) bool {
		if len(only) == 0 {
			return true
		}
		for _, o := range only {
			if o == inst {
				return true
			}
		}
		return false
	}
	w.tweak = func(w *world, s *sample) {
		if s.inWindow && w.inIncident(s.t) && hit(s.instance) {
			s.queue = w.lognormal(1500, 0.4)
			s.itl *= 1.1
		}
	}
	w.gauges = func(w *world, t time.Time, inst string) (float64, float64, float64) {
		if w.window.Contains(t) && w.inIncident(t) && hit(inst) {
			return 0.95 + 0.04*w.rng.Float64(), math.Round(10 + 25*w.rng.Float64()), 48
		}
		return healthyGauges(w, t, inst)
	}
}

// coldStartFromZero: traffic stops 20 min into the baseline, the service
// scales to zero, traffic resumes 2 min into the window and waits ~40 s for
// a new pod.
func coldStartFromZero(w *world) {
	w.instances = []string{"vllm-a", "vllm-b"}
	stop := w.baseline.From.Add(20 * time.Minute)
	resume := w.window.From.Add(2 * time.Minute)
	ready := resume.Add(40 * time.Second)
	w.tweak = func(w *world, s *sample) {
		switch {
		case !s.inWindow:
			s.skip = !s.t.Before(stop)
			s.instance = "vllm-a"
		case s.t.Before(resume):
			s.skip = true
		default:
			s.instance = "vllm-b"
			if s.t.Before(ready) {
				s.cold = true
				s.coldWait = float64(ready.Sub(s.t)/time.Millisecond) + w.lognormal(300, 0.3)
			}
		}
	}
	w.gauges = func(w *world, t time.Time, inst string) (float64, float64, float64) {
		switch {
		case inst == "vllm-a" && t.Before(stop.Add(5*time.Minute)):
		case inst == "vllm-b" && !t.Before(ready):
		default:
			return math.NaN(), 0, 0
		}
		return healthyGauges(w, t, inst)
	}
	w.events = []telemetry.Event{
		{Time: stop.Add(5 * time.Minute), Kind: telemetry.EventScale, Service: "vllm",
			FromReplicas: telemetry.Ptr[int32](1), ToReplicas: telemetry.Ptr[int32](0), Reason: "idle"},
		{Time: resume, Kind: telemetry.EventScale, Service: "vllm",
			FromReplicas: telemetry.Ptr[int32](0), ToReplicas: telemetry.Ptr[int32](1), Reason: "request arrived"},
		{Time: ready, Kind: telemetry.EventInstanceStarted, Service: "vllm", Instance: "vllm-b"},
	}
}

// prefillSurge: from minute 2, 30 % of requests carry 8× longer prompts.
func prefillSurge(w *world) {
	w.tweak = func(w *world, s *sample) {
		if s.inWindow && s.t.After(w.window.From.Add(2*time.Minute)) && w.rng.Float64() < 0.3 {
			s.in *= 8
			s.route = "/summarize"
		}
	}
	w.gauges = func(w *world, t time.Time, inst string) (float64, float64, float64) {
		kv, waiting, running := healthyGauges(w, t, inst)
		if w.window.Contains(t) {
			kv += 0.2
		}
		return kv, waiting, running
	}
}

// gatewayDelay: a new gateway adds ~400 ms between server and client.
func gatewayDelay(w *world) {
	w.tweak = func(w *world, s *sample) {
		if s.inWindow {
			s.network = w.lognormal(420, 0.3)
		}
	}
}

// slowRetrieval: the /search route's retrieval takes ~1.5 s.
func slowRetrieval(w *world) {
	w.tweak = func(w *world, s *sample) {
		if s.inWindow && s.route == "/search" {
			s.pre = w.lognormal(1500, 0.3)
		}
	}
}

// memoryBoundDecode: the batch ramps from 8 to 56 over the window and ITL
// rises with it.
func memoryBoundDecode(w *world) {
	running := func(w *world, t time.Time) float64 {
		if !w.window.Contains(t) {
			return 8
		}
		return 8 + 48*t.Sub(w.window.From).Seconds()/w.window.Duration().Seconds()
	}
	w.tweak = func(w *world, s *sample) {
		s.itl = w.lognormal(18*(1+running(w, s.t)/20), 0.08)
	}
	w.gauges = func(w *world, t time.Time, _ string) (float64, float64, float64) {
		r := running(w, t) + 2*w.rng.NormFloat64()
		return math.Min(0.88, 0.3+0.01*r), 0, math.Round(math.Max(1, r))
	}
}

// rateLimited: a managed API that refuses a third of the calls of the
// incident minutes with 429 (a tenth of the refusals a 5xx), each retried
// at once by the next call of the same task; latency unchanged.
func rateLimited(w *world) {
	w.managed = true
	w.gauges = nil
	w.instances = []string{""}
	retry := ""
	n := 0
	w.tweak = func(w *world, s *sample) {
		n++
		if retry != "" {
			s.trace, s.callIndex, retry = retry, 1, ""
			return
		}
		if s.inWindow && w.inIncident(s.t) && w.rng.Float64() < 0.33 {
			s.failed, s.errType = true, "429"
			if w.rng.Float64() < 0.1 {
				s.errType = "InternalServerError"
			}
			s.trace = fmt.Sprintf("retried-%d", n)
			retry = s.trace
		}
	}
}

// providerSlowdown: a managed API whose TTFT quadruples from minute 1,
// prompts unchanged.
func providerSlowdown(w *world) {
	w.managed = true
	w.gauges = nil
	w.instances = []string{""}
	w.tweak = func(w *world, s *sample) {
		if s.inWindow && s.t.After(w.window.From.Add(time.Minute)) {
			s.managedTTFT = w.lognormal(2400, 0.35)
		}
	}
}
