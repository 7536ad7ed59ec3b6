// Package demo generates realistic LLM traffic for Tokenpath from a
// queueing model, not from random latencies: a simulated vLLM deployment
// (replicas with a running batch and a KV cache, FCFS admission, prefill ∝
// prompt tokens, decode steps that slow down as the batch grows, an
// autoscaler that scales to zero) serves a RAG chat app, while a support
// agent calls a managed API. Queue time, cold-start holds and TTFT are what
// the model produces, so planted incidents (KV saturation, cold start, long
// prompts …) show up in the telemetry the way they do in production.
//
// The traffic is sent through the public wire: traces and metrics through
// the OTel Go SDK's OTLP/HTTP exporters (otlptracehttp, otlpmetrichttp),
// scale events through the events API. Simulate returns the same data plus
// the model's ground truth per request, so tests can assert the
// decomposition to the millisecond without sending anything.
package demo

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"time"
)

// Config says where to send the traffic and how much of it to make.
type Config struct {
	// OTLPEndpoint is the OTLP/HTTP base URL, as in
	// OTEL_EXPORTER_OTLP_ENDPOINT; /v1/traces and /v1/metrics are
	// appended. Default http://127.0.0.1:4318.
	OTLPEndpoint string
	// APIBase is the REST API base URL (events). Default
	// http://127.0.0.1:8080.
	APIBase string
	// APIKey is sent as "Authorization: Bearer <key>" on every request.
	APIKey string
	// Seed makes the simulation reproducible: the same seed, window and
	// phases give the same spans, ids and figures. Run treats 0 as "pick
	// one from the clock", so restarts do not repeat trace ids.
	Seed int64
	// Resume is the end of the newest demo traffic the server already
	// holds (zero: none). Run backfills only from there, so a restart
	// continues the history instead of sending a second copy of it.
	Resume time.Time
	// Rate is the rag-chat request rate at steady state, per second.
	// Default 2. The support agent runs tasks at 0.15 × Rate.
	Rate float64
	// ScrapeTarget, when set, adds the metrics-only service: doc-summarizer
	// calling a vLLM with tracing off whose /metrics (127.0.0.1, an
	// ephemeral port) Tokenpath's scraper reads. Run calls it to register
	// that URL for the service's scraping at interval, and with an empty
	// URL to remove it when it stops. Nil leaves the service out.
	ScrapeTarget func(ctx context.Context, url, service string, interval time.Duration) error
	// Log receives progress and send failures; nil discards.
	Log *slog.Logger
}

// Defaults for Config.
const (
	DefaultOTLPEndpoint = "http://127.0.0.1:4318"
	DefaultAPIBase      = "http://127.0.0.1:8080"
	DefaultRate         = 2.0
	// DefaultBackfill is the history `make run` sends on first start: the
	// episode detector's baseline holds the last hour of healthy minutes
	// (analysis/episode.DefaultConfig), so four hours give every planted
	// incident a clean hour before it and leave history to compare with.
	DefaultBackfill = 4 * time.Hour
)

func (c Config) withDefaults() Config {
	if c.OTLPEndpoint == "" {
		c.OTLPEndpoint = DefaultOTLPEndpoint
	}
	c.OTLPEndpoint = strings.TrimRight(c.OTLPEndpoint, "/")
	if c.APIBase == "" {
		c.APIBase = DefaultAPIBase
	}
	c.APIBase = strings.TrimRight(c.APIBase, "/")
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Incident names a planted cause of slowness.
type Incident string

// The incidents the model can plant. Each one changes an input of the
// model (traffic, tokens, replicas, a latency outside the model) and lets
// the model produce the consequences.
const (
	// Healthy is the baseline: no incident.
	Healthy Incident = "healthy"
	// KVSaturation is a traffic surge (2×) of long conversations (prompts
	// 3×, answers 2.5×): every sequence holds more KV blocks for longer,
	// the cache fills (≥ 95 %) within a minute, requests wait for blocks
	// and queue time grows for as long as the surge lasts (tens of seconds
	// after two minutes). The deployment is already at its replica
	// ceiling, so no scale-up relieves it.
	KVSaturation Incident = "kv_saturation"
	// ColdStart is a quiet spell in which the vLLM deployment scales to
	// zero, then half the usual traffic, which activates it: requests are
	// held until the new pod is ready (20–45 s).
	ColdStart Incident = "cold_start"
	// LongPrompt multiplies rag-chat prompt tokens by 6 (huge retrieved
	// context): prefill, and with it TTFT, grows with the prompt; requests
	// also wait behind each other's long prefills, but the KV cache keeps
	// room (no saturation).
	LongPrompt Incident = "long_prompt"
	// SlowRetrieval makes the vector search take 1–2 s: pre-inference.
	SlowRetrieval Incident = "slow_retrieval"
	// NetworkDelay adds 800 ms in the gateway between the rag-chat client
	// and vLLM.
	NetworkDelay Incident = "network_delay"
	// MemoryBoundDecode doubles traffic with prompts half as long and
	// answers twice as long: the running batch grows several times over
	// and every decode step slows down (ITL 2–3×, plain to the episode
	// detector, TestBackfillEpisodesArePlanted) without KV pressure or a
	// queue.
	MemoryBoundDecode Incident = "memory_bound_decode"
	// ProviderSlowness multiplies the managed API's TTFT by 4, tokens
	// unchanged.
	ProviderSlowness Incident = "provider_slowness"
	// RateLimits makes the managed API refuse 30 % of the support agent's
	// calls instead of 5 %: 429s, and some 500s; the agent retries each at
	// once. Latency unchanged.
	RateLimits Incident = "rate_limits"
	// BatchSurge is a batch job on doc-summarizer, whose vLLM has tracing
	// off (known by its /metrics only): 2.5× the requests, each summary
	// 1.6× longer, documents unchanged. Its single replica's KV cache
	// fills and requests wait (tens of seconds, ~20–40 waiting); the
	// queue-time histogram, waiting requests and KV usage show it.
	// It plants nothing when the metrics-only service is off.
	BatchSurge Incident = "batch_surge"
)

// Incidents lists the incidents the backfill plants (not Healthy, nor
// RateLimits, which the scenario tests plant), in the order it plants
// them. The order keeps each incident's aftermath out of the next one's
// baseline, where it would hide it: after a cold start one
// pod takes all of rag-chat's traffic until the HPA has scaled back up,
// so the support agent's provider slowness, which does not share the
// GPUs, comes next; KV saturation leaves a queue that takes a minute or
// two to drain, so it comes last (its drain runs into live traffic's
// healthy stretch). The batch surge shares no GPU with rag-chat and comes
// just before KV saturation, so a short backfill, which keeps the last
// kinds, still plants it.
var Incidents = []Incident{ColdStart, ProviderSlowness, LongPrompt, SlowRetrieval, NetworkDelay, MemoryBoundDecode, BatchSurge, KVSaturation}

// LiveIncidents rotate during live traffic: the three causes a TTFT
// diagnosis must tell apart.
var LiveIncidents = []Incident{KVSaturation, ColdStart, LongPrompt}

// Phase plants an incident over [From, To). Time not covered by a phase is
// healthy; where phases overlap, their incidents act together (a mixed
// incident).
type Phase struct {
	Incident Incident
	From, To time.Time
}

// Contains reports whether t lies in [From, To).
func (p Phase) Contains(t time.Time) bool { return !t.Before(p.From) && t.Before(p.To) }

// BackfillPhases plans historical incidents over [from, to): the window is
// cut into one slot per incident kind and each incident fills the last
// quarter of its slot (at most maxIncident), so the rest of it is a clean
// healthy baseline (Tokenpath's default baseline is the preceding 3×
// window).
// Kinds that would get less than minIncident are dropped from the start of
// the list, so KV saturation stays last: live traffic's first incident is
// KV saturation again, a second repeat of the same incident with the
// first still in view (TestBackfillPhases).
func BackfillPhases(from, to time.Time) []Phase {
	kinds := Incidents
	for len(kinds) > 0 && to.Sub(from)/time.Duration(len(kinds))/4 < minIncident {
		kinds = kinds[1:]
	}
	if len(kinds) == 0 {
		return nil
	}
	slot := to.Sub(from) / time.Duration(len(kinds))
	phases := make([]Phase, 0, len(kinds))
	for i, k := range kinds {
		end := from.Add(slot * time.Duration(i+1))
		phases = append(phases, Phase{Incident: k, From: end.Add(-min(slot/4, maxIncident)), To: end})
	}
	return phases
}

// backfillQuiet: the backfill's last incident ends this long before live
// traffic starts, so its aftermath (a 3-minute KV saturation's queue takes
// about as long to drain) is over by then, and the default 15-minute
// window over live traffic's first incident (liveHealthy after the start),
// a repeat of it, holds none of it.
const backfillQuiet = 8 * time.Minute

// PlannedBackfill is the incidents Run plants in a backfill over
// [from, now): BackfillPhases up to backfillQuiet before now.
func PlannedBackfill(from, now time.Time) []Phase {
	return BackfillPhases(from, now.Add(-backfillQuiet))
}

// minIncident is the shortest incident phase the backfill plans: a cold
// start needs its quiet spell (80 s, so the deployment reaches zero), the
// pod start (up to 45 s) and some traffic, all inside the phase, or held
// requests spill into the next incident's baseline.
const minIncident = 2 * time.Minute

// maxIncident caps a backfilled incident at a live one's length: a KV
// saturation's queue grows for as long as the surge lasts (five minutes
// put TTFT p95 over two minutes and took minutes to drain into live
// traffic's healthy stretch), and the backfill's last incident then looks
// like its live repeat.
const maxIncident = liveIncident

// Live rotation: a long healthy stretch, then an incident. Healthy lasts
// four times the incident: one for the previous incident's aftermath to
// clear (a saturated queue takes minutes to drain), then a clean default
// baseline (the preceding 3× window); 3 minutes give a cold start room to
// scale to zero, hold requests and serve them.
const (
	liveHealthy  = 12 * time.Minute
	liveIncident = 3 * time.Minute
)

// LivePhases plans the live rotation from start until at least until:
// liveHealthy of healthy traffic, then one of LiveIncidents for
// liveIncident, in turn, starting with the n-th incident.
func LivePhases(start, until time.Time, n int) []Phase {
	var phases []Phase
	for t := start; t.Before(until); t = t.Add(liveHealthy + liveIncident) {
		k := LiveIncidents[n%len(LiveIncidents)]
		n++
		phases = append(phases, Phase{Incident: k, From: t.Add(liveHealthy), To: t.Add(liveHealthy + liveIncident)})
	}
	return phases
}
