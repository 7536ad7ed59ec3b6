package demo

import (
	"net/http"
	"time"
)

// Resources of the simulated processes.

func appResource(service, instance string) *Resource {
	return &Resource{Service: service, Instance: instance, Attrs: []Attr{
		{"service.name", service},
		{"service.instance.id", instance},
		{"service.version", "1.4.2"},
		{"deployment.environment.name", "demo"},
		{"k8s.namespace.name", "apps"},
		{"k8s.pod.name", instance},
		{"telemetry.sdk.language", "python"},
	}}
}

func vllmResource(instance string) *Resource {
	return &Resource{Service: vllmService, Instance: instance, Attrs: []Attr{
		{"service.name", vllmService},
		{"service.instance.id", instance},
		{"service.version", "0.10.1"},
		{"deployment.environment.name", "demo"},
		{"k8s.namespace.name", namespace},
		{"k8s.deployment.name", vllmService},
		{"k8s.pod.name", instance},
		{"host.name", instance},
	}}
}

// metricResource is the resource a metric point is exported under.
func metricResource(service, instance string) *Resource {
	if instance == "" {
		return &Resource{Service: service, Attrs: []Attr{
			{"service.name", service},
			{"k8s.namespace.name", namespace},
			{"k8s.deployment.name", service},
		}}
	}
	return vllmResource(instance)
}

var (
	tenants = []struct {
		name   string
		weight float64
	}{{"acme", 0.5}, {"globex", 0.3}, {"initech", 0.2}}
	regions = []string{"us-east-1", "us-east-1", "eu-west-1"}
)

func (s *sim) tenant() string {
	x := s.rng.Float64()
	for _, t := range tenants {
		if x < t.weight {
			return t.name
		}
		x -= t.weight
	}
	return tenants[0].name
}

// --- rag-chat: POST /chat → retrieval → vLLM ---

// ragCall is one rag-chat request while it is in flight.
type ragCall struct {
	trace                        TraceID
	rootID, retrievalID          SpanID
	clientID, serverID           SpanID
	pod                          *Resource
	tenant, region               string
	incident                     Incident
	requestID                    string
	input, output, maxTokens     int
	topK                         int64
	rootStart                    time.Time
	retrievalStart, retrievalEnd time.Time
	clientStart                  time.Time
	netUp, netDown               time.Duration
	atGateway                    time.Time
	held                         bool
	replica                      *replica
	serverStart, scheduled       time.Time
	firstToken, serverEnd        time.Time
	// metricsOnly: a doc-summarizer call, served by the vLLM that has
	// tracing off.
	metricsOnly      bool
	runningAtAdmit   int
	waitingAtArrival int
	kvAtArrival      float64
}

func (s *sim) ragArrival() {
	s.startRag(s.now)
	if next := s.nextArrival(s.now, s.cfg.Rate, s.ragRate); !s.stopped(next) {
		s.at(next, s.ragArrival)
	}
}

// startRag models the app side up to the gateway: handler, vector search,
// prompt building, the outbound network leg.
func (s *sim) startRag(t time.Time) {
	e, inc := s.effectAt(t)
	c := &ragCall{
		trace: s.traceID(), rootID: s.spanID(), retrievalID: s.spanID(),
		clientID: s.spanID(), serverID: s.spanID(),
		pod:    s.ragPods[s.rng.IntN(len(s.ragPods))],
		tenant: s.tenant(), region: regions[s.rng.IntN(len(regions))],
		incident: inc, requestID: "chatcmpl-" + s.hex(32),
		maxTokens: e.maxTokens, topK: e.topK, rootStart: t,
	}
	c.retrievalStart = t.Add(s.uniform(time.Millisecond, 3*time.Millisecond))
	c.retrievalEnd = c.retrievalStart.Add(s.uniform(e.retrievalMin, e.retrievalMax))
	c.clientStart = c.retrievalEnd.Add(s.uniform(time.Millisecond, 2*time.Millisecond))
	// Prompt: system + question + top-k chunks; answer length: chatty.
	c.input = clampInt(int(s.lognormal(500, 0.5)*e.inputMult), 64, 24000)
	c.output = clampInt(int(s.lognormal(180, 0.6)*e.outputMult), 2, c.maxTokens)
	c.netUp = s.uniform(5*time.Millisecond, 15*time.Millisecond) + e.gatewayDelay
	c.netDown = s.uniform(5*time.Millisecond, 15*time.Millisecond)
	s.at(c.clientStart.Add(c.netUp), func() { s.gatewayArrive(c) })
}

func clampInt(v, lo, hi int) int { return min(max(v, lo), hi) }

// completeRag turns a served request into its four spans and its ground
// truth, released when the root span ends.
func (s *sim) completeRag(c *ragCall) {
	clientFirst := c.firstToken.Add(c.netDown)
	clientEnd := c.serverEnd.Add(c.netDown)
	rootEnd := clientEnd.Add(s.uniform(time.Millisecond, 4*time.Millisecond))
	queue := c.scheduled.Sub(c.serverStart)
	prefill := c.firstToken.Sub(c.scheduled)
	decode := c.serverEnd.Sub(c.firstToken)
	serverTTFT := c.firstToken.Sub(c.serverStart)
	ttft := clientFirst.Sub(c.clientStart)
	hold := time.Duration(0)
	if c.held {
		hold = c.serverStart.Sub(c.atGateway)
	}
	model := []Attr{
		{"gen_ai.request.model", vllmModel},
		{"gen_ai.response.model", vllmModel},
	}
	spans := []Span{
		rootSpan(c, "/chat", rootEnd),
		{
			Resource: c.pod, TraceID: c.trace, SpanID: c.retrievalID, ParentSpanID: c.rootID,
			Name: "retrieval", Kind: KindInternal, Start: c.retrievalStart, End: c.retrievalEnd,
			Attrs: []Attr{
				{"db.system.name", "qdrant"},
				{"db.operation.name", "search"},
				{"db.collection.name", "support-docs"},
				{"retrieval.top_k", c.topK},
			},
		},
		{
			Resource: c.pod, TraceID: c.trace, SpanID: c.clientID, ParentSpanID: c.rootID,
			Name: "chat " + vllmModel, Kind: KindClient, Start: c.clientStart, End: clientEnd,
			Attrs: append(append([]Attr{
				{"gen_ai.operation.name", "chat"},
				{"gen_ai.provider.name", "vllm"},
				{"gen_ai.system", "vllm"},
			}, model...),
				Attr{"gen_ai.request.max_tokens", int64(c.maxTokens)},
				Attr{"gen_ai.response.id", c.requestID},
				Attr{"gen_ai.usage.input_tokens", int64(c.input)},
				Attr{"gen_ai.usage.output_tokens", int64(c.output)},
				Attr{"gen_ai.response.time_to_first_chunk", ttft.Seconds()},
				Attr{"server.address", vllmService + "." + namespace + ".svc.cluster.local"},
				Attr{"server.port", int64(8000)},
				Attr{"tenant", c.tenant},
			),
		},
		{
			Resource: c.replica.res, TraceID: c.trace, SpanID: c.serverID, ParentSpanID: c.clientID,
			Name: "llm_request", Kind: KindServer, Start: c.serverStart, End: c.serverEnd,
			Attrs: append(model,
				Attr{"gen_ai.request.id", c.requestID},
				Attr{"gen_ai.request.max_tokens", int64(c.maxTokens)},
				Attr{"gen_ai.request.temperature", 0.2},
				Attr{"gen_ai.request.top_p", 1.0},
				Attr{"gen_ai.request.n", int64(1)},
				Attr{"gen_ai.usage.prompt_tokens", int64(c.input)},
				Attr{"gen_ai.usage.completion_tokens", int64(c.output)},
				Attr{"gen_ai.latency.time_in_queue", queue.Seconds()},
				Attr{"gen_ai.latency.time_in_model_prefill", prefill.Seconds()},
				Attr{"gen_ai.latency.time_to_first_token", serverTTFT.Seconds()},
				Attr{"gen_ai.latency.time_in_model_decode", decode.Seconds()},
				Attr{"gen_ai.latency.e2e", c.serverEnd.Sub(c.serverStart).Seconds()},
			),
		},
	}
	req := Request{
		TraceID: c.trace, ClientSpanID: c.clientID, ServerSpanID: c.serverID, RootSpanID: c.rootID,
		Service: ragService, Provider: "vllm", Model: vllmModel, Instance: c.replica.res.Instance,
		Incident: c.incident, Tenant: c.tenant, Route: "/chat",
		RootStart: c.rootStart, Start: c.clientStart,
		InputTokens: c.input, OutputTokens: c.output,
		PreInference: c.clientStart.Sub(c.rootStart),
		NetworkUp:    c.netUp, NetworkDown: c.netDown, Hold: hold,
		Queue: queue, Prefill: prefill, Decode: decode, ServerTTFT: serverTTFT,
		TTFT: ttft, E2E: clientEnd.Sub(c.clientStart), ColdStart: c.held,
		RunningAtAdmit: c.runningAtAdmit, KVUsageAtArrival: c.kvAtArrival,
		WaitingAtArrival: c.waitingAtArrival,
	}
	s.at(rootEnd, func() {
		s.out.Spans = append(s.out.Spans, spans...)
		s.out.Requests = append(s.out.Requests, req)
	})
}

// rootSpan is an app's HTTP handler span for POST route, the root of the
// call's trace.
func rootSpan(c *ragCall, route string, end time.Time) Span {
	return Span{
		Resource: c.pod, TraceID: c.trace, SpanID: c.rootID,
		Name: "POST " + route, Kind: KindServer, Start: c.rootStart, End: end,
		Attrs: []Attr{
			{"http.request.method", http.MethodPost},
			{"http.route", route},
			{"url.path", route},
			{"http.response.status_code", int64(http.StatusOK)},
			{"tenant", c.tenant},
			{"region", c.region},
		},
	}
}

// --- support-agent: agent.run → (LLM call, tool.search)× → managed API ---

// Managed API latency model: TTFT bundles the provider's queue, prefill
// and network, lognormal around a median, plus a small prompt term.
const (
	providerTTFTMedianMs = 520
	providerTTFTSigma    = 0.18
	providerPerInputMs   = 0.04
	providerITLMedianMs  = 9
	providerRetryChance  = 0.05
	// providerServerErrors is the share of a rate_limits incident's
	// failures that are server errors (500) rather than 429s.
	providerServerErrors = 0.15
)

func (s *sim) agentArrival() {
	s.startAgent(s.now)
	next := s.nextArrival(s.now, s.cfg.Rate*agentShare, func(time.Time) float64 { return 1 })
	if !s.stopped(next) {
		s.at(next, s.agentArrival)
	}
}

// startAgent models a whole agent task at once (the managed API has no
// state the task could wait on) and releases it when its root span ends.
func (s *sim) startAgent(t time.Time) {
	trace, rootID := s.traceID(), s.spanID()
	tenant := s.tenant()
	steps := 1 + s.weighted([]float64{0.3, 0.35, 0.2, 0.15})
	var (
		spans []Span
		reqs  []Request
	)
	cursor := t.Add(s.uniform(2*time.Millisecond, 10*time.Millisecond))
	call := 0
	var inCalls time.Duration // the task's time in model calls so far (they run one after another)
	llm := func(input, output int, failure string) {
		e, inc := s.effectAt(cursor)
		id := s.spanID()
		start := cursor
		attrs := []Attr{
			{"gen_ai.operation.name", "chat"},
			{"gen_ai.provider.name", "openai"},
			{"gen_ai.system", "openai"},
			{"gen_ai.request.model", agentModel},
			{"server.address", "api.openai.com"},
			{"server.port", int64(443)},
			{"tenant", tenant},
		}
		r := Request{
			TraceID: trace, ClientSpanID: id, RootSpanID: rootID,
			Service: agentService, Provider: "openai", Model: agentModel,
			Incident: inc, Tenant: tenant, Route: "agent.run",
			RootStart: t, Start: start, CallIndex: call, Managed: true,
			PreInference: start.Sub(t) - inCalls,
		}
		sp := Span{
			Resource: s.agentPod, TraceID: trace, SpanID: id, ParentSpanID: rootID,
			Name: "chat " + agentModel, Kind: KindClient, Start: start,
		}
		if failure != "" {
			sp.End = start.Add(s.uniform(150*time.Millisecond, 600*time.Millisecond))
			sp.Error, sp.StatusMessage = true, "Error code: 429 - Rate limit reached for gpt-4o-mini"
			if failure == "500" {
				sp.StatusMessage = "Error code: 500 - The server had an error while processing your request."
			}
			attrs = append(attrs, Attr{"error.type", failure})
			r.Error, r.ErrorType = true, failure
		} else {
			ttft := us(s.lognormal(providerTTFTMedianMs, providerTTFTSigma)*e.providerTTFTMult + providerPerInputMs*float64(input))
			itl := s.lognormal(providerITLMedianMs, 0.15)
			decode := us(itl * float64(output-1))
			sp.End = start.Add(ttft + decode)
			attrs = append(attrs,
				Attr{"gen_ai.response.model", agentModel},
				Attr{"gen_ai.response.id", "chatcmpl-" + s.hex(29)},
				Attr{"gen_ai.usage.input_tokens", int64(input)},
				Attr{"gen_ai.usage.output_tokens", int64(output)},
				Attr{"gen_ai.response.time_to_first_chunk", ttft.Seconds()},
			)
			r.InputTokens, r.OutputTokens = input, output
			r.TTFT, r.Decode = ttft, decode
		}
		sp.Attrs = attrs
		r.E2E = sp.End.Sub(start)
		inCalls += r.E2E
		spans = append(spans, sp)
		reqs = append(reqs, r)
		call++
		cursor = sp.End
	}
	for step := range steps {
		// The conversation grows with every step: tool results are fed
		// back into the prompt.
		input := 900 + 450*step + int(s.lognormal(300, 0.4))
		output := clampInt(int(s.lognormal(120, 0.5)), 2, 800)
		if e, _ := s.effectAt(cursor); s.chance(e.providerErrorChance) {
			failure := "429"
			if e.providerErrorChance > providerRetryChance && s.chance(providerServerErrors) {
				failure = "500"
			}
			llm(input, output, failure)
			cursor = cursor.Add(s.uniform(500*time.Millisecond, 1500*time.Millisecond))
		}
		llm(input, output, "")
		cursor = cursor.Add(s.uniform(time.Millisecond, 5*time.Millisecond))
		if step == steps-1 {
			break
		}
		toolStart := cursor
		cursor = cursor.Add(s.uniform(80*time.Millisecond, 400*time.Millisecond))
		spans = append(spans, Span{
			Resource: s.agentPod, TraceID: trace, SpanID: s.spanID(), ParentSpanID: rootID,
			Name: "tool.search", Kind: KindInternal, Start: toolStart, End: cursor,
			Attrs: []Attr{
				{"gen_ai.operation.name", "execute_tool"},
				{"gen_ai.tool.name", "search"},
			},
		})
		cursor = cursor.Add(s.uniform(time.Millisecond, 5*time.Millisecond))
	}
	end := cursor.Add(s.uniform(time.Millisecond, 3*time.Millisecond))
	spans = append([]Span{{
		Resource: s.agentPod, TraceID: trace, SpanID: rootID,
		Name: "agent.run", Kind: KindInternal, Start: t, End: end,
		Attrs: []Attr{
			{"gen_ai.agent.name", agentService},
			{"agent.steps", int64(steps)},
			{"tenant", tenant},
			{"region", regions[s.rng.IntN(len(regions))]},
		},
	}}, spans...)
	s.at(end, func() {
		s.out.Spans = append(s.out.Spans, spans...)
		s.out.Requests = append(s.out.Requests, reqs...)
	})
}

// weighted draws an index with the given probabilities.
func (s *sim) weighted(p []float64) int {
	x := s.rng.Float64()
	for i, w := range p {
		if x < w {
			return i
		}
		x -= w
	}
	return len(p) - 1
}
