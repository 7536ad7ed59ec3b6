package main

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"time"
)

// The synthetic world both benches draw from: a few app services calling
// self-hosted vLLM deployments and managed APIs, with lognormal request
// components, a diurnal load curve, rare cold starts and one queueing
// incident at the end of the data.

// backend is where an app sends its LLM calls.
type backend struct {
	service   string // inference service; empty for a managed API
	provider  string
	model     string
	instances []string
	managed   bool
	// managed APIs: client-observed TTFT median
	ttftMs float64
	// self-hosted: prefill cost per input token and decode ITL median
	prefillMsPerTok float64
	itlMs           float64
	// incident multiplies queueing on this backend near the end of the data
	incident bool
}

// appService is one calling service with its traffic mix.
type appService struct {
	service   string
	route     string
	weight    float64
	preMs     float64 // pre-inference (retrieval, tools) median
	inTokens  float64 // input tokens median
	outTokens float64 // output tokens median
	backends  []*backend
	mix       []float64 // cumulative backend weights
}

func instances(service string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = service + "-" + string(rune('0'+i))
	}
	return out
}

var (
	llama70 = &backend{service: "vllm-llama-70b", provider: "vllm", model: "meta-llama/Llama-3.1-70B-Instruct",
		instances: instances("vllm-llama-70b", 6), prefillMsPerTok: 0.09, itlMs: 28, incident: true}
	qwen32 = &backend{service: "vllm-qwen-32b", provider: "vllm", model: "Qwen/Qwen2.5-32B-Instruct",
		instances: instances("vllm-qwen-32b", 4), prefillMsPerTok: 0.05, itlMs: 18}
	llama8 = &backend{service: "vllm-llama-8b", provider: "vllm", model: "meta-llama/Llama-3.1-8B-Instruct",
		instances: instances("vllm-llama-8b", 3), prefillMsPerTok: 0.015, itlMs: 9}
	gpt4oMini = &backend{provider: "openai", model: "gpt-4o-mini-2024-07-18", managed: true, ttftMs: 600, itlMs: 12}
	sonnet    = &backend{provider: "anthropic", model: "claude-sonnet-4-20250514", managed: true, ttftMs: 2400, itlMs: 20}

	selfHosted = []*backend{llama70, qwen32, llama8}

	apps = []*appService{
		{service: "rag-chat", route: "/v1/chat", weight: 0.40, preMs: 120, inTokens: 1800, outTokens: 250,
			backends: []*backend{llama70, gpt4oMini}, mix: []float64{0.7, 1}},
		{service: "support-agent", route: "/v1/agent/turn", weight: 0.25, preMs: 300, inTokens: 3000, outTokens: 180,
			backends: []*backend{qwen32, sonnet}, mix: []float64{0.6, 1}},
		{service: "code-assist", route: "/v1/complete", weight: 0.25, preMs: 15, inTokens: 900, outTokens: 60,
			backends: []*backend{llama8}, mix: []float64{1}},
		{service: "doc-summarize", route: "/v1/summarize", weight: 0.10, preMs: 40, inTokens: 6000, outTokens: 400,
			backends: []*backend{llama70, qwen32}, mix: []float64{0.5, 1}},
	}
)

// lognormal draws a value with the given median and log-space sigma.
func lognormal(rng *rand.Rand, median, sigma float64) float64 {
	return median * math.Exp(sigma*rng.NormFloat64())
}

// diurnalLoad is the relative traffic at t: busy in the European/US day,
// quiet at night, lighter at weekends. It averages about 1.
func diurnalLoad(t time.Time) float64 {
	h := float64(t.Hour()) + float64(t.Minute())/60
	load := 1 + 0.6*math.Sin(2*math.Pi*(h-9)/24)
	if wd := t.Weekday(); wd == time.Saturday || wd == time.Sunday {
		load *= 0.6
	}
	return load
}

// sample is one LLM request's ground truth, from which both a trace (ingest
// bench) and an llm_requests row (query bench) are made.
type sample struct {
	app      *appService
	backend  *backend
	instance string
	start    time.Time // root span start
	tenant   string

	preMs, queueMs, prefillMs, networkMs float64
	decodeMs, itlMs, ttftMs, e2eMs       float64
	coldWaitMs                           float64
	inTokens, outTokens                  int64
	coldStart, failed                    bool
}

// world draws samples; incidentFrom..incidentTo is when llama70 queues.
type world struct {
	rng                      *rand.Rand
	incidentFrom, incidentTo time.Time
}

func newWorld(seed uint64, incidentFrom, incidentTo time.Time) *world {
	return &world{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), incidentFrom: incidentFrom, incidentTo: incidentTo}
}

func (w *world) pickApp() *appService {
	u := w.rng.Float64()
	for _, a := range apps {
		if u < a.weight {
			return a
		}
		u -= a.weight
	}
	return apps[len(apps)-1]
}

// draw makes one request starting at t. selfHostedOnly sends every call to
// a vLLM backend (so every trace has a server span).
func (w *world) draw(t time.Time, selfHostedOnly bool) sample {
	rng := w.rng
	a := w.pickApp()
	u := rng.Float64()
	b := a.backends[len(a.backends)-1]
	for i, c := range a.mix {
		if u < c {
			b = a.backends[i]
			break
		}
	}
	if selfHostedOnly && b.managed {
		b = a.backends[0]
	}
	s := sample{app: a, backend: b, start: t, tenant: tenants[rng.IntN(len(tenants))]}
	s.inTokens = int64(min(max(lognormal(rng, a.inTokens, 0.7), 8), 120_000))
	s.outTokens = int64(min(max(lognormal(rng, a.outTokens, 0.6), 1), 8_000))
	s.preMs = max(lognormal(rng, a.preMs, 0.7), 4) // retrieval + a little app work
	load := diurnalLoad(t)
	busy := max(load-1, 0) // queueing and ITL grow past average load
	if b.managed {
		s.ttftMs = lognormal(rng, b.ttftMs*(0.8+0.2*float64(s.inTokens)/2000), 0.35)
		s.itlMs = lognormal(rng, b.itlMs, 0.25)
	} else {
		s.instance = b.instances[rng.IntN(len(b.instances))]
		s.queueMs = lognormal(rng, 8*(1+4*busy), 1.2)
		if b.incident && !t.Before(w.incidentFrom) && t.Before(w.incidentTo) {
			// KV cache full: requests wait for running ones to finish.
			s.queueMs += lognormal(rng, 1500, 0.6)
		}
		s.prefillMs = float64(s.inTokens) * b.prefillMsPerTok * lognormal(rng, 1, 0.15)
		s.networkMs = lognormal(rng, 6, 0.6)
		if rng.Float64() < 0.001 {
			s.coldStart = true
			s.coldWaitMs = lognormal(rng, 45_000, 0.3)
		}
		s.ttftMs = s.coldWaitMs + s.queueMs + s.prefillMs + s.networkMs
		s.itlMs = lognormal(rng, b.itlMs*(1+0.3*busy), 0.2)
	}
	s.decodeMs = s.itlMs * float64(max(s.outTokens-1, 0))
	s.e2eMs = s.ttftMs + s.decodeMs
	s.failed = rng.Float64() < 0.005
	return s
}

var tenants = func() []string {
	out := make([]string, 64)
	for i := range out {
		out[i] = "tenant-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return out
}()

// randomHex returns n random bytes as lowercase hex.
func randomHex(rng *rand.Rand, n int) string {
	var b [16]byte
	for i := 0; i < n; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:n])
}

// msDuration converts float milliseconds to a Duration.
func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
