package assemble

import (
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// decompose splits one call into its components (DESIGN.md,
// "Decomposition"). Every figure is nil unless the spans state it or it is a
// difference of two stated figures: the split is never invented. earlier
// is the time the trace spent in earlier model calls since the root
// started (earlierCallTime).
func (a *assembler) decompose(c *call, earlier time.Duration) telemetry.LLMRequest {
	client, server := c.client, c.server
	primary := c.primary()
	r := telemetry.LLMRequest{
		ProjectID: primary.ProjectID,
		TraceID:   primary.TraceID,
		SpanID:    primary.SpanID,
		Service:   primary.Service,
		Start:     primary.Start,
		Error:     primary.StatusCode == "error",
	}
	if server != nil {
		r.ServerService = server.Service
		r.Instance = server.Instance
	}
	r.Join = c.join
	if c.across {
		r.ServerTraceID, r.ServerSpanID = server.TraceID, server.SpanID
	}

	// Descriptive fields: a wrapped call counts as its innermost client
	// (the SDK's own span under a framework or OpenLIT wrapper names the
	// model and tokens as the provider returned them), then the outer
	// client, then the server (vLLM V1 names no model). Tokens come from
	// the server first: client libraries estimate or miscount them (e.g.
	// OpenLLMetry JS tokenizes streamed prompts itself).
	for _, s := range [...]*telemetry.Span{c.hop, client, server} {
		if s == nil {
			continue
		}
		if r.Model == "" {
			r.Model = s.LLM.Model
		}
		if r.Provider == "" {
			r.Provider = s.LLM.Provider
		}
	}
	var fromServer, fromClient bool
	for _, s := range [...]*telemetry.Span{server, c.hop, client} {
		if s == nil {
			continue
		}
		took := false
		if r.InputTokens == nil && s.LLM.InputTokens != nil {
			r.InputTokens, took = a.slab.int(*s.LLM.InputTokens), true
		}
		if r.OutputTokens == nil && s.LLM.OutputTokens != nil {
			r.OutputTokens, took = a.slab.int(*s.LLM.OutputTokens), true
		}
		if took && s == server {
			fromServer = true
		} else if took {
			fromClient = true
		}
	}
	switch {
	case fromServer && fromClient:
		r.TokenSource = telemetry.TokensMixed
	case fromServer:
		r.TokenSource = telemetry.TokensFromServer
	case fromClient:
		r.TokenSource = telemetry.TokensFromClient
	}
	// The error class: the call's own span first, then the SDK span it
	// wraps, then the server's.
	for _, s := range [...]*telemetry.Span{primary, c.hop, server} {
		if s != nil && r.ErrorType == "" {
			r.ErrorType = s.LLM.ErrorType
		}
	}
	r.Route = route(c.root)
	r.Tenant = tenant(primary, c.root)

	clientTTFT, ttftSource, haveClientTTFT := c.clientTTFT()
	var serverTTFT time.Duration
	haveServerTTFT := server != nil && server.LLM.ServerTTFT != nil
	if haveServerTTFT {
		serverTTFT = *server.LLM.ServerTTFT
	}

	switch {
	case haveClientTTFT:
		r.TTFT, r.TTFTSource = a.slab.ms(clientTTFT), ttftSource
	case haveServerTTFT:
		r.TTFT, r.TTFTSource = a.slab.ms(serverTTFT), telemetry.TTFTFromServer
	}

	// A call that is itself the root did no app work first; a server span
	// that is the root says nothing about its caller (c.root is nil then).
	// The app's own time excludes earlier model calls of the trace (agent
	// loops): TestTraces "agent loop" and "parallel calls".
	switch {
	case client != nil && c.root == client:
		r.PreInference = a.slab.float(0)
	case c.root != nil:
		r.PreInference = a.slab.skewed(primary.Start.Sub(c.root.Start) - earlier)
	}

	if server != nil {
		if n := server.LLM.Preemptions; n != nil {
			r.Preemptions = a.slab.int(*n)
		}
		if q := server.LLM.QueueTime; q != nil {
			r.Queue = a.slab.ms(*q)
		}
		switch p := server.LLM.PrefillTime; {
		case p != nil:
			r.Prefill = a.slab.ms(*p)
		case haveServerTTFT && server.LLM.QueueTime != nil:
			r.Prefill = a.slab.skewed(serverTTFT - *server.LLM.QueueTime)
		}
	}

	// Cold start: the request was held before the server span started, on
	// an instance that had just come up. The hold is measured across two
	// clocks, so only a gap of at least MinHold counts; the instance check
	// runs only then, which keeps the history lookups off the common path.
	var hold time.Duration
	if client != nil && server != nil {
		hold = server.Start.Sub(client.Start)
		if hold >= a.opt.MinHold && a.recentlyStarted(server) {
			r.ColdStart = true
			r.ColdStartWait = a.slab.ms(hold)
		}
	}

	// network = client TTFT − server TTFT, without the cold-start hold
	// (waiting for a pod is not network). With several server attempts and
	// no cold start, the gap also holds the earlier attempts, which are not
	// network either, so it is left unknown.
	if haveClientTTFT && haveServerTTFT {
		switch {
		case r.ColdStart:
			r.Network = a.slab.skewed(clientTTFT - serverTTFT - hold)
		case c.servers > 1:
		default:
			r.Network = a.slab.skewed(clientTTFT - serverTTFT)
		}
	}

	switch {
	case haveClientTTFT:
		r.Decode = a.slab.skewed(client.Duration() - clientTTFT)
	case server != nil && server.LLM.DecodeTime != nil:
		r.Decode = a.slab.ms(*server.LLM.DecodeTime)
	}

	switch {
	case client != nil:
		r.E2E = a.slab.ms(client.Duration())
	case server.LLM.ServerE2E != nil:
		r.E2E = a.slab.ms(*server.LLM.ServerE2E)
	default:
		r.E2E = a.slab.ms(server.Duration())
	}

	if r.Decode != nil && r.OutputTokens != nil && *r.OutputTokens >= 2 {
		r.ITL = a.slab.float(*r.Decode / float64(*r.OutputTokens-1))
	}
	return r
}

// clientTTFT is the client-observed TTFT measured from the outer client span
// start. When a nested span (wrapper, gateway, the SDK's own span) saw the
// first token, the same instant is measured from the outer start; it is
// taken over the outer span's own figure when that one ranks lower
// (telemetry.TTFTRank: OpenLIT's clock starts after the response headers).
// source is the wire key of the span that saw it.
func (c *call) clientTTFT() (d time.Duration, source string, ok bool) {
	if c.client == nil {
		return 0, "", false
	}
	own := c.client.LLM.ClientTTFT
	if c.hop != nil && c.hop.LLM.ClientTTFT != nil &&
		(own == nil || telemetry.TTFTRank(c.hop.LLM.TTFTSource) > telemetry.TTFTRank(c.client.LLM.TTFTSource)) {
		d := c.hop.Start.Add(*c.hop.LLM.ClientTTFT).Sub(c.client.Start)
		if d >= 0 {
			return d, c.hop.LLM.TTFTSource, true
		}
	}
	if own != nil {
		return *own, c.client.LLM.TTFTSource, true
	}
	return 0, "", false
}

func route(root *telemetry.Span) string {
	if root == nil {
		return ""
	}
	if r := root.Attributes[telemetry.RouteAttribute]; r != "" {
		return r
	}
	return root.Name
}

// tenant prefers the LLM span (most specific) over the root span.
func tenant(primary, root *telemetry.Span) string {
	for _, s := range [...]*telemetry.Span{primary, root} {
		if s == nil {
			continue
		}
		if v := telemetry.SpanTenant(s.Attributes); v != "" {
			return v
		}
	}
	return ""
}

// slab hands out the optional figures of many requests from a few shared
// arrays instead of one allocation per pointer. Values are written once and
// never changed, so a pointer into an old chunk stays valid after a new
// chunk is started.
type slab struct {
	chunk  int
	floats []float64
	ints   []int64
}

// perCall bounds the optional float figures of one request.
const perCall = 9

// reserve makes room for n more requests in the current chunk (3 counts
// each: tokens in and out, preemptions).
func (s *slab) reserve(n int) {
	if cap(s.floats)-len(s.floats) < perCall*n {
		s.floats = make([]float64, 0, max(perCall*n, s.chunk))
	}
	if cap(s.ints)-len(s.ints) < 3*n {
		s.ints = make([]int64, 0, max(3*n, s.chunk/4))
	}
}

func (s *slab) float(v float64) *float64 {
	if len(s.floats) == cap(s.floats) {
		s.floats = make([]float64, 0, max(s.chunk, 1))
	}
	s.floats = append(s.floats, v)
	return &s.floats[len(s.floats)-1]
}

func (s *slab) int(v int64) *int64 {
	if len(s.ints) == cap(s.ints) {
		s.ints = make([]int64, 0, max(s.chunk/4, 1))
	}
	s.ints = append(s.ints, v)
	return &s.ints[len(s.ints)-1]
}

func (s *slab) ms(d time.Duration) *float64 { return s.float(millis(d)) }

// skewed converts a difference of timestamps from two clocks: a tiny negative
// value is skew and reads as 0, a larger one leaves the figure unknown.
func (s *slab) skewed(d time.Duration) *float64 {
	switch {
	case d >= 0:
		return s.ms(d)
	case d > -skewTolerance:
		return s.float(0)
	}
	return nil
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
