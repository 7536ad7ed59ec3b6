package assemble

import (
	"slices"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// call is one LLM call of a trace before decomposition: the spans that
// describe it, from the caller down to the inference server.
type call struct {
	// client is the outermost LLM client span; nil for a server span that
	// has no client span above it.
	client *telemetry.Span
	// hop is the last-finished LLM client span nested under client: a
	// framework wrapper (LangChain over the OpenAI SDK) or an LLM gateway
	// (LiteLLM) that records the same call again.
	hop *telemetry.Span
	// server is the last-finished server span under client.
	server  *telemetry.Span
	servers int
	// root is the trace root above the call, nil when it has not arrived.
	root *telemetry.Span
	// join says how client and server were paired (telemetry.JoinTrace
	// …); across says the server span came from another trace.
	join   string
	across bool
}

// climbed is what walking up the parent chain of an LLM span found.
type climbed struct {
	span *telemetry.Span
	top  *telemetry.Span // outermost LLM client span on the chain, span included
	root *telemetry.Span // parentless span the chain ends at; nil if broken
	// host is the outermost server span on the chain below top, span
	// included; a server span with another server span above it is that
	// server's engine record (vLLM journey tracing's llm_core under
	// llm_request), not a call or an attempt of its own.
	host *telemetry.Span
}

// assembler carries the options, the lazily built cold-start index and
// scratch space across the traces of one Traces call.
type assembler struct {
	opt   Options
	hist  *InstanceHistory
	index *startIndex
	slab  slab

	climbed []climbed
	calls   []call
	// scratch for earlierCallTime
	extents, busy []Interval
	earlier       []time.Duration

	// joins pairs calls across traces (nil: none); halves, when set,
	// collects what each trace leaves unpaired.
	joins  *Joins
	halves *[]Half
}

func newAssembler(hist *InstanceHistory, opt Options, spans int) *assembler {
	return &assembler{
		opt:  opt.WithDefaults(),
		hist: hist,
		// Roughly one call per 2–4 spans and 9 optional figures per call.
		slab: slab{chunk: min(max(3*spans, 16), 2048)},
	}
}

// trace assembles the spans of one trace, sorted by SpanID without
// duplicates, and appends its requests to out in call order.
func (a *assembler) trace(spans []*telemetry.Span, out []telemetry.LLMRequest) []telemetry.LLMRequest {
	t := traceView{spans: spans}
	fallbackRoot := t.earliestRoot()

	a.climbed = a.climbed[:0]
	for _, s := range spans {
		if s.LLM.Role == telemetry.NotLLM {
			continue
		}
		top, root, host := t.climb(s)
		if root == nil {
			// An intermediate span is missing but the trace root is here:
			// the root does not change when the gap fills in.
			root = fallbackRoot
		}
		a.climbed = append(a.climbed, climbed{span: s, top: top, root: root, host: host})
	}

	// Outermost client spans are the calls. They come out in SpanID order,
	// which the binary search below relies on.
	calls := a.calls[:0]
	for _, c := range a.climbed {
		if c.span.LLM.Role == telemetry.LLMClient && c.top == c.span {
			calls = append(calls, call{client: c.span, root: c.root})
		}
	}
	clients := len(calls)
	engines := 0
	for _, c := range a.climbed {
		switch {
		case c.span.LLM.Role == telemetry.LLMServer && c.host != c.span:
			engines++ // folded into its host below
		case c.span.LLM.Role == telemetry.LLMClient && c.top != c.span:
			k, ok := findCall(calls[:clients], c.top.SpanID)
			if !ok {
				continue // cannot happen: the outermost client is its own call
			}
			if calls[k].hop == nil || finishedLater(c.span, calls[k].hop) {
				calls[k].hop = c.span
			}
		case c.span.LLM.Role == telemetry.LLMServer && c.top != nil:
			// Several server spans under one call are attempts (the
			// gateway retried, or the request was re-run); the one that
			// finished last produced the answer the client saw.
			k, ok := findCall(calls[:clients], c.top.SpanID)
			if !ok {
				continue // cannot happen: the outermost client is its own call
			}
			calls[k].servers++
			if calls[k].server == nil || finishedLater(c.span, calls[k].server) {
				calls[k].server = c.span
			}
		case c.span.LLM.Role == telemetry.LLMServer:
			// No client span above (yet): the server span stands alone.
			root := c.root
			if root == c.span {
				root = nil
			}
			calls = append(calls, call{server: c.span, servers: 1, root: root})
		}
	}
	a.calls = calls
	if engines > 0 {
		a.foldEngines(calls)
	}

	first := len(out)
	a.slab.reserve(len(calls))
	kept := calls[:0]
	for i := range calls {
		c := &calls[i]
		if c.client != nil && c.server != nil {
			c.join = telemetry.JoinTrace
		}
		if a.joins != nil && !a.pairAcross(c) {
			continue // a server span counted in its client's request
		}
		if a.halves != nil && c.join == "" {
			if h, ok := c.half(); ok {
				*a.halves = append(*a.halves, h)
			}
		}
		kept = append(kept, *c)
	}
	earlier := a.earlierCallTime(kept)
	for i := range kept {
		out = append(out, a.decompose(&kept[i], earlier[i]))
	}
	rows := out[first:]
	slices.SortFunc(rows, func(x, y telemetry.LLMRequest) int {
		if c := x.Start.Compare(y.Start); c != 0 {
			return c
		}
		return strings.Compare(x.SpanID, y.SpanID)
	})
	for i := range rows {
		rows[i].CallIndex = i
	}
	return out
}

// foldEngines folds each engine record (a server span under another server
// span) into its call's server: the host's own figures first, the
// engine's where the host has none (vLLM journey tracing: the API span
// names the id and tokens, the engine span the queue, first token and
// preemptions). The call keeps one server, so network stays known.
func (a *assembler) foldEngines(calls []call) {
	for _, c := range a.climbed {
		if c.span.LLM.Role != telemetry.LLMServer || c.host == c.span || c.host == nil {
			continue
		}
		for k := range calls {
			if h := calls[k].server; h != nil && (h == c.host || h.SpanID == c.host.SpanID && h.TraceID == c.host.TraceID) {
				calls[k].server = withEngine(h, c.span)
				break
			}
		}
	}
}

// withEngine is a copy of host with the figures it lacks taken from engine.
// The engine's prefill is its TTFT less its queue (both engine-side): the
// host's TTFT, from arrival at the API server, also holds the hand-off.
func withEngine(host, engine *telemetry.Span) *telemetry.Span {
	m := *host
	h, e := &m.LLM, &engine.LLM
	if e.PrefillTime == nil && e.ServerTTFT != nil && e.QueueTime != nil && *e.ServerTTFT >= *e.QueueTime {
		p := *e.ServerTTFT - *e.QueueTime
		if h.PrefillTime == nil {
			h.PrefillTime = &p
		}
	}
	for _, f := range [...][2]**time.Duration{{&h.QueueTime, &e.QueueTime}, {&h.PrefillTime, &e.PrefillTime},
		{&h.ServerTTFT, &e.ServerTTFT}, {&h.DecodeTime, &e.DecodeTime}, {&h.ServerE2E, &e.ServerE2E}} {
		if *f[0] == nil {
			*f[0] = *f[1]
		}
	}
	for _, f := range [...][2]**int64{{&h.InputTokens, &e.InputTokens}, {&h.OutputTokens, &e.OutputTokens}, {&h.Preemptions, &e.Preemptions}} {
		if *f[0] == nil {
			*f[0] = *f[1]
		}
	}
	h.Model = cmpOr(h.Model, e.Model)
	h.ResponseID = cmpOr(h.ResponseID, e.ResponseID)
	return &m
}

// pairAcross applies the joins to an unpaired call: a client call takes
// its server spans from other traces; a server span taken by a client call
// of another trace yields no request (false).
func (a *assembler) pairAcross(c *call) bool {
	switch {
	case c.client != nil && c.server == nil:
		p, ok := a.joins.Servers[KeyOf(c.client)]
		if !ok {
			return true
		}
		c.join, c.across, c.servers = p.Method, true, len(p.Spans)
		for _, s := range p.Spans {
			if c.server == nil || finishedLater(s, c.server) {
				c.server = s
			}
		}
	case c.client == nil:
		return !a.joins.Taken[KeyOf(c.server)]
	}
	return true
}

func findCall(calls []call, spanID string) (int, bool) {
	return slices.BinarySearchFunc(calls, spanID, func(c call, id string) int {
		return strings.Compare(c.client.SpanID, id)
	})
}

// finishedLater reports whether a ended after b; Start and SpanID break ties
// so the choice never depends on input order.
func finishedLater(a, b *telemetry.Span) bool {
	if c := a.End.Compare(b.End); c != 0 {
		return c > 0
	}
	if c := a.Start.Compare(b.Start); c != 0 {
		return c > 0
	}
	return a.SpanID > b.SpanID
}

// traceView looks spans of one trace up by id; spans are sorted by SpanID.
type traceView struct {
	spans []*telemetry.Span
}

func (t traceView) find(id string) *telemetry.Span {
	k, ok := slices.BinarySearchFunc(t.spans, id, func(s *telemetry.Span, id string) int {
		return strings.Compare(s.SpanID, id)
	})
	if !ok {
		return nil
	}
	return t.spans[k]
}

// climb walks from s up the parent chain. It returns the outermost LLM client
// span met (s included), the parentless span the chain ends at, or nil
// when a parent has not arrived, and the outermost server span below that
// client (s included; nil when s is a client). A chain that loops
// (malformed data) counts as broken right at s, so every span on or below
// a loop stands alone.
func (t traceView) climb(s *telemetry.Span) (top, root, host *telemetry.Span) {
	cur := s
	for range len(t.spans) + 1 {
		switch cur.LLM.Role {
		case telemetry.LLMClient:
			top = cur
		case telemetry.LLMServer:
			if top == nil {
				host = cur
			}
		}
		if cur.ParentSpanID == "" {
			return top, cur, host
		}
		if cur = t.find(cur.ParentSpanID); cur == nil {
			return top, nil, host
		}
	}
	switch s.LLM.Role {
	case telemetry.LLMClient:
		return s, nil, nil
	case telemetry.LLMServer:
		return nil, nil, s
	}
	return nil, nil, nil
}

// earliestRoot is the trace root when a chain is broken: the earliest
// parentless span (a well-formed trace has exactly one), nil if none arrived.
func (t traceView) earliestRoot() *telemetry.Span {
	var root *telemetry.Span
	for _, s := range t.spans {
		if s.ParentSpanID != "" {
			continue
		}
		if root == nil || s.Start.Before(root.Start) {
			root = s // spans are in SpanID order, so ties keep the lowest id
		}
	}
	return root
}
