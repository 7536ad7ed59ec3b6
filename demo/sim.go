package demo

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Names of the simulated world.
const (
	vllmService  = "vllm-llama"
	vllmModel    = "meta-llama/Llama-3.1-8B-Instruct"
	ragService   = "rag-chat"
	agentService = "support-agent"
	agentModel   = "gpt-4o-mini"
	namespace    = "llm"
)

// Metric names the demo exports, as vLLM and kube-state-metrics name them.
const (
	MetricKVCacheUsage    = "vllm:kv_cache_usage_perc"
	MetricRequestsWaiting = "vllm:num_requests_waiting"
	MetricRequestsRunning = "vllm:num_requests_running"
	MetricReplicas        = "kube_deployment_spec_replicas"
)

// Autoscaling of the vLLM deployment: KEDA scales to and from zero, the
// HPA it drives scales between 1 and the replica ceiling on load. Windows
// are far shorter than Kubernetes' defaults so an incident fits in minutes.
const (
	autoscalePoll = 5 * time.Second
	// The HPA scales up when the load (running + waiting requests of the
	// ready pods, averaged over hpaWindow) exceeds hpaTargetLoad per
	// replica, and down only when it would fit below hpaScaleDownLoad per
	// replica for hpaDownStabilization: the gap and the delay keep it from
	// flapping. A deployment idle for hpaIdlePolls goes to one replica at
	// once, so KEDA's scale to zero that follows is a 1→0.
	hpaTargetLoad        = 3
	hpaScaleDownLoad     = 1.5
	hpaWindow            = 12 // polls: one minute
	hpaDownStabilization = time.Minute
	hpaIdlePolls         = 3
	// kedaCooldown: no request for this long scales the deployment to 0.
	kedaCooldown = 45 * time.Second
	// A pod is ready 20–45 s after it is created (image cached on the
	// node; loading 16 GB of weights and CUDA graphs dominates).
	podStartMin, podStartMax = 20 * time.Second, 45 * time.Second
	scrapeInterval           = 10 * time.Second
)

// Traffic shape.
const (
	// perReplicaRate is the rag-chat load one replica is sized for; the
	// deployment gets Rate/perReplicaRate replicas (at least 1). It leaves
	// headroom: an 8× prompt must not turn into a queue.
	perReplicaRate = 2.0 / 3
	// agentShare: support-agent tasks per rag-chat request.
	agentShare = 0.15
	// maxRateMult bounds every incident's traffic multiplier (the
	// arrival process thins from it).
	maxRateMult = 3.0
	// coldStartLowTraffic is the traffic, relative to normal, that wakes
	// the deployment after the quiet spell of a cold_start phase: low, yet
	// enough that a 2-minute phase holds a few dozen requests.
	coldStartLowTraffic = 0.5
)

// effect is what an incident does to the model's inputs at one instant.
type effect struct {
	ragRate    float64 // traffic multiplier
	inputMult  float64
	outputMult float64
	maxTokens  int
	topK       int64
	// retrieval is the vector search latency range.
	retrievalMin, retrievalMax time.Duration
	gatewayDelay               time.Duration
	providerTTFTMult           float64
	// providerErrorChance is the share of the managed API's calls that
	// fail (and are retried by the task).
	providerErrorChance float64
	// summary scales doc-summarizer's traffic and summary length (the
	// metrics-only service).
	summaryRate, summaryOutput float64
}

func healthyEffect() effect {
	return effect{
		ragRate: 1, inputMult: 1, outputMult: 1, maxTokens: 1024, topK: 8,
		retrievalMin: 30 * time.Millisecond, retrievalMax: 80 * time.Millisecond,
		providerTTFTMult: 1, providerErrorChance: providerRetryChance, summaryRate: 1, summaryOutput: 1,
	}
}

// coldQuiet is how long a cold_start phase keeps rag-chat silent before
// the low traffic that activates the deployment: long enough for the HPA
// to go to one replica and KEDA's cooldown to take it to zero even when
// the last requests of the phase's start take half a minute to finish
// (45 s cooldown after the last activity, polled every 5 s).
func coldQuiet(p Phase) time.Duration {
	return min(max(p.To.Sub(p.From)/2, 80*time.Second), 3*time.Minute)
}

// effectAt applies every phase that contains t, in order, to the healthy
// inputs; the incident reported is the first of them.
func (s *sim) effectAt(t time.Time) (effect, Incident) {
	e := healthyEffect()
	inc := Healthy
	for _, ph := range s.phases {
		if !ph.Contains(t) || ph.Incident == Healthy {
			continue
		}
		if inc == Healthy {
			inc = ph.Incident
		}
		switch ph.Incident {
		case KVSaturation:
			// Twice the traffic, each sequence holding 3× the prompt and
			// 2.5× the answer in KV for longer: a replica fits ~30 such
			// sequences, fewer than the load keeps in flight, so the queue
			// is the model's, not a number we add.
			e.ragRate, e.inputMult, e.outputMult, e.maxTokens = 2*e.ragRate, 3*e.inputMult, 2.5*e.outputMult, 2048
		case ColdStart:
			e.ragRate *= coldStartLowTraffic
			if t.Sub(ph.From) < coldQuiet(ph) {
				e.ragRate = 0
			}
		case LongPrompt:
			e.inputMult, e.topK = 6*e.inputMult, 48
		case SlowRetrieval:
			e.retrievalMin, e.retrievalMax = time.Second, 2*time.Second
		case NetworkDelay:
			e.gatewayDelay += 800 * time.Millisecond
		case MemoryBoundDecode:
			// Four times the tokens decoded per second: the batch grows
			// until the ITL is 2–3× (DecodeStep), plain against a
			// minute's noise (TestITLGrowsWithBatch). Three times the
			// traffic runs away into a full KV cache: a queue, not decode.
			e.ragRate, e.inputMult, e.outputMult = 2*e.ragRate, 0.5*e.inputMult, 2*e.outputMult
		case ProviderSlowness:
			e.providerTTFTMult *= 4
		case RateLimits:
			e.providerErrorChance = 6 * providerRetryChance
		case BatchSurge:
			e.summaryRate, e.summaryOutput = 2.5*e.summaryRate, 1.6*e.summaryOutput
		}
	}
	e.ragRate = min(e.ragRate, maxRateMult) // the arrival process thins from it
	return e, inc
}

// diurnal is a slow ±10 % swell of traffic so healthy hours do not look
// flat. Its phase counts from the start of the simulation, not the wall
// clock, so a scenario shifted in time is the same scenario.
func (s *sim) diurnal(t time.Time) float64 {
	return 1 + 0.1*math.Sin(2*math.Pi*float64(t.Sub(s.origin)%diurnalPeriod)/float64(diurnalPeriod))
}

// diurnalPeriod is the period of the traffic swell.
const diurnalPeriod = 45 * time.Minute

// event is a scheduled action; seq breaks ties so runs are reproducible.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if c := q[i].at.Compare(q[j].at); c != 0 {
		return c < 0
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// sim is the discrete-event simulation of the whole world: apps, gateway,
// vLLM replicas and the autoscaler. All randomness comes from one seeded
// generator consumed in event order, so a run is reproducible.
type sim struct {
	cfg    Config
	eng    Engine
	rng    *rand.Rand
	origin time.Time // where the simulation started
	now    time.Time
	stopAt time.Time // arrivals, scrapes and autoscaling stop here; zero: never
	queue  eventQueue
	seq    uint64
	phases []Phase
	out    Scenario

	maxReplicas  int
	replicas     []*replica
	held         []*ragCall // at the gateway, waiting for a ready pod
	lastActivity time.Time
	downSince    time.Time
	loads        []int  // the last hpaWindow polls' load
	rsHash       string // the Deployment's ReplicaSet hash in pod names

	ragPods  []*Resource
	agentPod *Resource
	// summary is the metrics-only service; nil when it is off.
	summary *summarizer
}

func newSim(cfg Config, from time.Time, phases []Phase) *sim {
	cfg = cfg.withDefaults()
	s := &sim{
		cfg:    cfg,
		eng:    DefaultEngine,
		rng:    rand.New(rand.NewPCG(uint64(cfg.Seed), 0x70b3_9a7d_c0ff_ee11)),
		origin: from,
		now:    from,
		phases: append([]Phase(nil), phases...),
	}
	s.maxReplicas = max(1, int(math.Round(cfg.Rate/perReplicaRate)))
	s.rsHash = s.podHash(10)
	s.ragPods = []*Resource{
		appResource(ragService, fmt.Sprintf("%s-%s-%s", ragService, s.podHash(9), s.podHash(5))),
		appResource(ragService, fmt.Sprintf("%s-%s-%s", ragService, s.podHash(9), s.podHash(5))),
	}
	s.agentPod = appResource(agentService, fmt.Sprintf("%s-%s-%s", agentService, s.podHash(9), s.podHash(5)))
	for range s.maxReplicas {
		r := s.newReplica()
		r.ready = true
	}
	s.lastActivity = from
	s.at(s.nextArrival(from, s.cfg.Rate, s.ragRate), s.ragArrival)
	s.at(s.nextArrival(from, s.cfg.Rate*agentShare, func(time.Time) float64 { return 1 }), s.agentArrival)
	s.at(from.Truncate(scrapeInterval).Add(scrapeInterval), s.scrape)
	s.at(from.Add(autoscalePoll), s.autoscale)
	return s
}

// at schedules fn at t (never before now).
func (s *sim) at(t time.Time, fn func()) {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	heap.Push(&s.queue, &event{at: t, seq: s.seq, fn: fn})
}

// advance runs every event due at or before until.
func (s *sim) advance(until time.Time) {
	for len(s.queue) > 0 && !s.queue[0].at.After(until) {
		e := heap.Pop(&s.queue).(*event)
		s.now = e.at
		e.fn()
	}
	if until.After(s.now) {
		s.now = until
	}
}

// drain runs every remaining event: in-flight requests finish, nothing
// new starts (stopAt must be set).
func (s *sim) drain() {
	for len(s.queue) > 0 {
		e := heap.Pop(&s.queue).(*event)
		s.now = e.at
		e.fn()
	}
}

func (s *sim) stopped(t time.Time) bool { return !s.stopAt.IsZero() && !t.Before(s.stopAt) }

// take hands over what was produced since the last take.
func (s *sim) take() *Scenario {
	out := s.out
	s.out = Scenario{}
	return &out
}

// --- randomness helpers (all durations rounded to the microsecond) ---

func us(ms float64) time.Duration {
	return time.Duration(math.Round(ms*1000)) * time.Microsecond
}

func (s *sim) uniform(lo, hi time.Duration) time.Duration {
	return us((float64(lo) + s.rng.Float64()*float64(hi-lo)) / float64(time.Millisecond))
}

// lognormal draws with the given median and log-space sigma.
func (s *sim) lognormal(median, sigma float64) float64 {
	return median * math.Exp(sigma*s.rng.NormFloat64())
}

func (s *sim) chance(p float64) bool { return s.rng.Float64() < p }

func (s *sim) traceID() TraceID {
	var id TraceID
	for i := range id {
		id[i] = byte(s.rng.Uint32())
	}
	return id
}

func (s *sim) spanID() SpanID {
	var id SpanID
	for i := range id {
		id[i] = byte(s.rng.Uint32())
	}
	if id.IsZero() {
		id[7] = 1
	}
	return id
}

func (s *sim) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[s.rng.IntN(16)]
	}
	return string(b)
}

// podHash is a Kubernetes-style name suffix.
func (s *sim) podHash(n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[s.rng.IntN(len(alphabet))]
	}
	return string(b)
}

// nextArrival draws the next arrival after t of a Poisson process whose
// rate is base × diurnal × mult(t), by thinning a process of the maximum
// rate. It gives up at stopAt.
func (s *sim) nextArrival(t time.Time, base float64, mult func(time.Time) float64) time.Time {
	peak := base * maxRateMult * 1.1
	for {
		t = t.Add(us(s.rng.ExpFloat64() / peak * 1000))
		if s.stopped(t) {
			return t
		}
		if s.rng.Float64()*peak < base*s.diurnal(t)*mult(t) {
			return t
		}
	}
}

func (s *sim) ragRate(t time.Time) float64 {
	e, _ := s.effectAt(t)
	return e.ragRate
}

// --- the vLLM deployment ---

// gatewayArrive routes a request that reached the cluster gateway, or holds
// it while no pod is ready, activating a deployment scaled to zero.
func (s *sim) gatewayArrive(c *ragCall) {
	s.lastActivity = s.now
	c.atGateway = s.now
	if r := s.pickReplica(); r != nil {
		s.deliver(r, c)
		return
	}
	c.held = true
	s.held = append(s.held, c)
	if len(s.active()) == 0 {
		s.scale(0, 1, "KEDAScaleTargetActivated", "keda")
	}
}

// deliver hands a request to a replica: the vLLM server span starts now.
func (s *sim) deliver(r *replica, c *ragCall) {
	c.replica = r
	c.serverStart = s.now
	c.kvAtArrival = r.kvUsage(s.eng)
	c.waitingAtArrival = len(r.waiting)
	q := &seq{call: c, arrive: s.now, prompt: c.input, output: c.output, kvNeed: c.input + c.output}
	r.waiting = append(r.waiting, q)
	s.kick(r)
}

// kick starts the next engine step of an idle replica that has work.
func (s *sim) kick(r *replica) {
	if r.busy || !r.ready || r.gone {
		return
	}
	admitted, end := r.admit(s.eng, s.now)
	if len(admitted) > 0 {
		for i, q := range admitted {
			q.call.runningAtAdmit = len(r.running) + i
		}
		r.busy = true
		s.at(end, func() {
			r.busy = false
			for _, q := range admitted {
				if q.generated >= q.output {
					s.finish(r, q, q.first)
				} else {
					r.running = append(r.running, q)
				}
			}
			s.kick(r)
			s.maybeGone(r)
		})
		return
	}
	if len(r.running) == 0 {
		return
	}
	r.busy = true
	s.at(s.now.Add(s.eng.DecodeStep(len(r.running))), func() {
		r.busy = false
		keep := r.running[:0]
		for _, q := range r.running {
			q.generated++
			if q.generated >= q.output {
				s.finish(r, q, s.now)
			} else {
				keep = append(keep, q)
			}
		}
		clear(r.running[len(keep):])
		r.running = keep
		s.kick(r)
		s.maybeGone(r)
	})
}

// finish completes a request on the server at t (its last token).
func (s *sim) finish(r *replica, q *seq, t time.Time) {
	r.release(q)
	c := q.call
	c.scheduled, c.firstToken, c.serverEnd = q.scheduled, q.first, t
	if c.metricsOnly {
		s.completeSummary(c)
		return
	}
	s.completeRag(c)
}
