package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Services names every service the demo sends as, so a restarted server
// can find where the demo's stored traffic ends.
var Services = []string{ragService, agentService, vllmService, summaryService, summaryServer}

// The metrics-only service: doc-summarizer calls a single-replica vLLM
// whose tracing is off, as most self-hosted fleets run it. Tokenpath knows
// that server by its /metrics alone and ties the app's calls to it by the
// client spans' server.address:server.port.
const (
	summaryService = "doc-summarizer"
	summaryServer  = "vllm-qwen"
	summaryModel   = "Qwen/Qwen2.5-7B-Instruct"
	// summaryShare: doc-summarizer requests per rag-chat request; 0.4 of
	// the default 2/s is ~48 a minute, above the 20 a minute the episode
	// detector needs (analysis/episode.DefaultConfig.MinRequests).
	summaryShare = 0.4
)

// Scraping the metrics-only server. History cannot be scraped live, so
// the backfill's snapshots of its /metrics are replayed first, one per
// scrape and stamped with their time (as the text format allows), at a
// fast interval; then the target is scraped every liveScrape like any.
// Snapshots are 30 s apart over the last hour and 2 min apart before it,
// so four hours replay in 210 scrapes.
const (
	replayScrape     = time.Second
	liveScrape       = 10 * time.Second
	replayRecent     = time.Hour
	replayRecentStep = 30 * time.Second
	replayOldStep    = 2 * time.Minute
)

// MetricsOnlyServer is the fake vLLM's HTTP side: /metrics on 127.0.0.1
// at an ephemeral port, in vLLM's text exposition.
type MetricsOnlyServer struct {
	Metrics *VLLMMetrics
	ln      net.Listener
	srv     *http.Server

	mu     sync.Mutex
	replay []snapshot
	// replayed is the time of the newest snapshot a scrape has read.
	replayed time.Time
	// live: the history is all in replay; once it is read, scrapes get
	// the current state.
	live bool
}

// snapshot is the server's /metrics page at one instant of the history.
type snapshot struct {
	at   time.Time
	page []byte
}

// StartMetricsOnlyServer listens on 127.0.0.1 at a free port and serves
// the metrics of a vLLM serving model.
func StartMetricsOnlyServer(model string) (*MetricsOnlyServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("metrics-only vLLM: %w", err)
	}
	m := &MetricsOnlyServer{Metrics: NewVLLMMetrics(model), ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", m.serveMetrics)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// URL is the /metrics URL a scraper reads.
func (m *MetricsOnlyServer) URL() string { return "http://" + m.ln.Addr().String() + "/metrics" }

// Addr is the host and port the app's calls name as server.address and
// server.port.
func (m *MetricsOnlyServer) Addr() (string, int) {
	host, port, _ := net.SplitHostPort(m.ln.Addr().String())
	p, _ := strconv.Atoi(port)
	return host, p
}

// Replaying is how many history snapshots wait for a scrape.
func (m *MetricsOnlyServer) Replaying() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.replay)
}

// replayedTo is how far the scrapes have read the history: the newest
// snapshot's time, or the end of the history once all of it was read.
func (m *MetricsOnlyServer) replayedTo(end time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live && len(m.replay) == 0 {
		return end
	}
	return m.replayed
}

// historyDone marks the end of the history: once the replay is read,
// scrapes get the current state.
func (m *MetricsOnlyServer) historyDone() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live = true
}

// Close stops serving.
func (m *MetricsOnlyServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveMetrics answers the next history snapshot, or the current state
// unstamped (the scraper stamps it) once the history is through.
func (m *MetricsOnlyServer) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	var page []byte
	if len(m.replay) > 0 {
		page, m.replayed = m.replay[0].page, m.replay[0].at
		m.replay = m.replay[1:]
	}
	live := m.live
	m.mu.Unlock()
	if page == nil && !live {
		// The backfill is still producing the history; a scrape now must
		// not put the present before it.
		http.Error(w, "history not ready", http.StatusServiceUnavailable)
		return
	}
	if page == nil {
		var err error
		if page, err = m.Metrics.Exposition(time.Time{}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(page)
}

// summarizer is the metrics-only service inside the simulation.
type summarizer struct {
	server  *MetricsOnlyServer
	replica *replica
	pod     *Resource
	host    string
	port    int64
	// replayUntil: snapshots are taken for the replay before this time
	// (the backfill); live traffic is scraped as it happens.
	replayUntil time.Time
	// held are the backfill's doc-summarizer spans, sent as the scrapes
	// reach their time: a call that arrived hours before its server's
	// metrics would be diagnosed without them (as a managed API's).
	held []Span
}

// addSummarizer puts doc-summarizer and its vLLM into the simulation,
// snapshotting the server's /metrics for the replay until replayUntil.
func (s *sim) addSummarizer(srv *MetricsOnlyServer, replayUntil time.Time) {
	host, port := srv.Addr()
	sm := &summarizer{
		server: srv, host: host, port: int64(port), replayUntil: replayUntil,
		replica: &replica{res: &Resource{Service: summaryServer, Instance: net.JoinHostPort(host, strconv.Itoa(port))}, started: s.now, ready: true},
		pod:     appResource(summaryService, fmt.Sprintf("%s-%s-%s", summaryService, s.podHash(9), s.podHash(5))),
	}
	s.summary = sm
	s.at(s.nextArrival(s.now, s.cfg.Rate*summaryShare, s.summaryRate), s.summaryArrival)
	s.at(s.now.Truncate(replayRecentStep).Add(replayRecentStep), s.snapshot)
}

func (s *sim) summaryRate(t time.Time) float64 {
	e, _ := s.effectAt(t)
	return e.summaryRate
}

func (s *sim) summaryArrival() {
	s.startSummary(s.now)
	if next := s.nextArrival(s.now, s.cfg.Rate*summaryShare, s.summaryRate); !s.stopped(next) {
		s.at(next, s.summaryArrival)
	}
}

// startSummary models POST /summarize up to vLLM: reading the document,
// then a call to the server next to it.
func (s *sim) startSummary(t time.Time) {
	e, inc := s.effectAt(t)
	sm := s.summary
	c := &ragCall{
		trace: s.traceID(), rootID: s.spanID(), clientID: s.spanID(),
		pod: sm.pod, tenant: s.tenant(), region: regions[s.rng.IntN(len(regions))],
		incident: inc, requestID: "chatcmpl-" + s.hex(32), maxTokens: 512, rootStart: t,
		metricsOnly: true,
	}
	c.clientStart = t.Add(s.uniform(2*time.Millisecond, 6*time.Millisecond))
	c.input = clampInt(int(s.lognormal(1800, 0.4)), 200, 16000)
	c.output = clampInt(int(s.lognormal(150, 0.4)*e.summaryOutput), 16, c.maxTokens)
	c.netUp = s.uniform(time.Millisecond, 3*time.Millisecond)
	c.netDown = s.uniform(time.Millisecond, 3*time.Millisecond)
	s.at(c.clientStart.Add(c.netUp), func() { s.deliver(sm.replica, c) })
}

// summaryPrefix is the shared system prompt vLLM's prefix cache serves.
const summaryPrefix = 256

// completeSummary turns a served summary into the app's two spans (no
// server span: tracing is off) and the server's metrics, which vLLM
// records when the request finishes.
func (s *sim) completeSummary(c *ragCall) {
	sm := s.summary
	queue := c.scheduled.Sub(c.serverStart)
	prefill := c.firstToken.Sub(c.scheduled)
	decode := c.serverEnd.Sub(c.firstToken)
	sm.server.Metrics.ObserveRequest(RequestPhases{Queue: queue, Prefill: prefill, Decode: decode, OutputTokens: c.output})
	sm.server.Metrics.AddPrefixCache(min(summaryPrefix, c.input), c.input)

	clientFirst := c.firstToken.Add(c.netDown)
	clientEnd := c.serverEnd.Add(c.netDown)
	rootEnd := clientEnd.Add(s.uniform(time.Millisecond, 3*time.Millisecond))
	ttft := clientFirst.Sub(c.clientStart)
	spans := []Span{
		rootSpan(c, "/summarize", rootEnd),
		{
			Resource: c.pod, TraceID: c.trace, SpanID: c.clientID, ParentSpanID: c.rootID,
			Name: "chat " + summaryModel, Kind: KindClient, Start: c.clientStart, End: clientEnd,
			Attrs: []Attr{
				{"gen_ai.operation.name", "chat"},
				{"gen_ai.provider.name", "vllm"},
				{"gen_ai.system", "vllm"},
				{"gen_ai.request.model", summaryModel},
				{"gen_ai.response.model", summaryModel},
				{"gen_ai.request.max_tokens", int64(c.maxTokens)},
				{"gen_ai.response.id", c.requestID},
				{"gen_ai.usage.input_tokens", int64(c.input)},
				{"gen_ai.usage.output_tokens", int64(c.output)},
				{"gen_ai.response.time_to_first_chunk", ttft.Seconds()},
				{"server.address", sm.host},
				{"server.port", sm.port},
				{"tenant", c.tenant},
			},
		},
	}
	req := Request{
		TraceID: c.trace, ClientSpanID: c.clientID, RootSpanID: c.rootID,
		Service: summaryService, Provider: "vllm", Model: summaryModel, MetricsOnly: true,
		Incident: c.incident, Tenant: c.tenant, Route: "/summarize",
		RootStart: c.rootStart, Start: c.clientStart,
		InputTokens: c.input, OutputTokens: c.output,
		PreInference: c.clientStart.Sub(c.rootStart),
		NetworkUp:    c.netUp, NetworkDown: c.netDown,
		Queue: queue, Prefill: prefill, Decode: decode, ServerTTFT: c.firstToken.Sub(c.serverStart),
		TTFT: ttft, E2E: clientEnd.Sub(c.clientStart),
		RunningAtAdmit: c.runningAtAdmit, KVUsageAtArrival: c.kvAtArrival, WaitingAtArrival: c.waitingAtArrival,
	}
	s.at(rootEnd, func() {
		if s.now.Before(sm.replayUntil) {
			sm.held = append(sm.held, spans...)
		} else {
			s.out.Spans = append(s.out.Spans, spans...)
		}
		s.out.Requests = append(s.out.Requests, req)
	})
}

// release hands over the held spans that ended by the time the scrapes
// have read the history to.
func (sm *summarizer) release() []Span {
	to := sm.server.replayedTo(sm.replayUntil)
	n := 0
	for n < len(sm.held) && !sm.held[n].End.After(to) {
		n++
	}
	out := sm.held[:n:n]
	sm.held = sm.held[n:]
	return out
}

// setGauges sets the server's scheduler gauges, as vLLM updates them
// every engine step (sampled here at the simulation's scrape ticks).
func (sm *summarizer) setGauges(e Engine) {
	r := sm.replica
	sm.server.Metrics.SetScheduler(len(r.waiting), len(r.running), r.kvUsage(e))
}

// snapshot keeps the server's /metrics at this instant for the replay.
func (s *sim) snapshot() {
	sm := s.summary
	if !s.now.Before(sm.replayUntil) {
		return
	}
	sm.setGauges(s.eng)
	if page, err := sm.server.Metrics.Exposition(s.now); err == nil {
		sm.server.mu.Lock()
		sm.server.replay = append(sm.server.replay, snapshot{at: s.now, page: page})
		sm.server.mu.Unlock()
	}
	step := replayOldStep
	if sm.replayUntil.Sub(s.now) <= replayRecent {
		step = replayRecentStep
	}
	s.at(s.now.Add(step), s.snapshot)
}

// metricsOnlyRun is the metrics-only service's server and scrape target
// while Run runs.
type metricsOnlyRun struct {
	cfg    Config
	sim    *sim
	server *MetricsOnlyServer
	live   bool // the target is at its live interval
}

// startMetricsOnly starts the fake vLLM, adds doc-summarizer to the
// simulation and registers the server's /metrics for the replay; nil when
// cfg has no ScrapeTarget. A target that cannot be registered leaves the
// service out with a warning: the rest of the demo does not need it.
func startMetricsOnly(ctx context.Context, cfg Config, s *sim, now time.Time) (*metricsOnlyRun, error) {
	if cfg.ScrapeTarget == nil {
		return nil, nil
	}
	srv, err := StartMetricsOnlyServer(summaryModel)
	if err != nil {
		return nil, err
	}
	if err := cfg.ScrapeTarget(ctx, srv.URL(), summaryServer, replayScrape); err != nil {
		_ = srv.Close()
		cfg.Log.Warn("demo: the metrics-only service is off: its scrape target could not be registered", "err", err)
		return nil, nil
	}
	s.addSummarizer(srv, now)
	cfg.Log.Info("demo: "+summaryService+" calls "+summaryServer+", a vLLM with tracing off, known by its /metrics",
		"url", srv.URL(), "replay_scrapes", replayScrapes(s.origin, now))
	return &metricsOnlyRun{cfg: cfg, sim: s, server: srv}, nil
}

// replayScrapes is how many history snapshots a backfill over [from, to)
// leaves for the scraper.
func replayScrapes(from, to time.Time) int {
	n := 0
	for t := from.Truncate(replayRecentStep).Add(replayRecentStep); t.Before(to); n++ {
		if to.Sub(t) <= replayRecent {
			t = t.Add(replayRecentStep)
		} else {
			t = t.Add(replayOldStep)
		}
	}
	return n
}

// replayed returns the held doc-summarizer spans the scrapes have caught
// up with, and moves the target to its live interval once the scraper has
// read the whole history.
func (m *metricsOnlyRun) replayed(ctx context.Context) *Scenario {
	out := &Scenario{Spans: m.sim.summary.release()}
	if m.live || m.server.Replaying() > 0 {
		return out
	}
	if err := m.cfg.ScrapeTarget(ctx, m.server.URL(), summaryServer, liveScrape); err != nil {
		m.cfg.Log.Warn("demo: cannot move the metrics-only scrape target to its live interval", "err", err)
		return out
	}
	m.live = true
	m.cfg.Log.Info("demo: "+summaryServer+"'s history is replayed; scraped every "+liveScrape.String()+" from now on", "url", m.server.URL())
	return out
}

// stop removes the scrape target (the server goes with the demo) and
// stops the server.
func (m *metricsOnlyRun) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.cfg.ScrapeTarget(ctx, "", summaryServer, 0); err != nil {
		m.cfg.Log.Warn("demo: cannot remove the metrics-only scrape target", "err", err)
	}
	_ = m.server.Close()
}
