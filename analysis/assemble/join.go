package assemble

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// A server span that arrives without trace context (the client did not
// propagate it, a gateway dropped it) sits in a trace of its own, and its
// client call in another: each is a Half. Halves pair across traces by id
// (gen_ai.request.id ↔ gen_ai.response.id), else by a unique match on
// input tokens, model, server address and time (DESIGN.md, "Wire
// conventions"). A paired call is one request with the full split, keyed
// by its client span; the server half yields no row of its own.

// CallKey names a span: a client call by its outermost client span, a
// server half by its server span.
type CallKey struct {
	Project uint32
	Trace   string
	Span    string
}

// KeyOf is the CallKey of s.
func KeyOf(s *telemetry.Span) CallKey { return CallKey{s.ProjectID, s.TraceID, s.SpanID} }

// Half is one side of an LLM call that its own trace left unpaired: a
// client call with no server span below it, or a server span with no
// client span above it.
type Half struct {
	Key    CallKey
	Server bool
	Start  time.Time
	End    time.Time
	// ID is the id the client received (gen_ai.response.id) or the one
	// the server logged (gen_ai.request.id).
	ID          string
	Model       string
	InputTokens *int64
	// Address is the endpoint the client called (server.address); for a
	// server half, Service and Instance are the names it may be called by.
	Address  string
	Service  string
	Instance string
	// Span is a copy of the server span (server halves only), to be
	// attached to its client call's trace.
	Span *telemetry.Span
}

// Partner is what a client call takes from other traces: its server spans
// and how they were paired (telemetry.JoinID or JoinMatch).
type Partner struct {
	Method string
	Spans  []*telemetry.Span
}

// Joins carries pairings across traces into assembly: a client call with
// a Partner is decomposed with its server spans, and a server span in
// Taken yields no request of its own.
type Joins struct {
	Servers map[CallKey]Partner
	Taken   map[CallKey]bool
}

// TracesJoined assembles spans as Traces does, with the pairings of joins
// applied (nil: none), and returns the halves its traces leave unpaired.
func TracesJoined(spans []telemetry.Span, hist *InstanceHistory, opt Options, joins *Joins) ([]telemetry.LLMRequest, []Half) {
	var halves []Half
	reqs := traces(spans, hist, opt, joins, &halves)
	return reqs, halves
}

// half describes the unpaired side of call c, or says it has none.
func (c *call) half() (Half, bool) {
	switch {
	case c.client != nil && c.server == nil:
		h := Half{Key: KeyOf(c.client), Start: c.client.Start, End: c.client.End}
		// A wrapped call counts as its innermost client (decompose): the
		// SDK's own span names the id, model, tokens and address as the
		// provider returned them.
		for _, s := range [...]*telemetry.Span{c.hop, c.client} {
			if s == nil {
				continue
			}
			h.ID = cmpOr(h.ID, s.LLM.ResponseID)
			h.Model = cmpOr(h.Model, s.LLM.Model)
			h.Address = cmpOr(h.Address, s.LLM.ServerAddress)
			if h.InputTokens == nil && s.LLM.InputTokens != nil {
				h.InputTokens = telemetry.Ptr(*s.LLM.InputTokens)
			}
		}
		return h, true
	case c.client == nil && c.server != nil:
		s := c.server
		h := Half{Key: KeyOf(s), Server: true, Start: s.Start, End: s.End, ID: s.LLM.ResponseID, Model: s.LLM.Model,
			Service: s.Service, Instance: s.Instance, Span: detach(s)}
		if s.LLM.InputTokens != nil {
			h.InputTokens = telemetry.Ptr(*s.LLM.InputTokens)
		}
		return h, true
	}
	return Half{}, false
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// detach copies s with its optional figures, which may point into memory
// a batched read reuses.
func detach(s *telemetry.Span) *telemetry.Span {
	c := *s
	c.Attributes, c.Resource, c.EventNames, c.EventTimes = nil, nil, nil, nil
	for _, p := range [...]**int64{&c.LLM.InputTokens, &c.LLM.OutputTokens, &c.LLM.Preemptions} {
		if *p != nil {
			*p = telemetry.Ptr(**p)
		}
	}
	for _, p := range [...]**time.Duration{&c.LLM.ClientTTFT, &c.LLM.QueueTime, &c.LLM.PrefillTime, &c.LLM.ServerTTFT,
		&c.LLM.DecodeTime, &c.LLM.ServerE2E} {
		if *p != nil {
			*p = telemetry.Ptr(**p)
		}
	}
	return &c
}

// vLLM's OpenAI server names a request "chatcmpl-<id>" (or "cmpl-<id>")
// and sends that id to the client; its llm_request span logs
// gen_ai.request.id = the same external id (vllm-project/vllm
// vllm/v1/engine/output_processor.py, do_tracing: req_state.external_req_id;
// vllm/entrypoints/openai/chat_completion/serving.py: request_id). Forms
// of it the server may log instead:
//   - "<id>-<8 hex>": the engine's internal id, which adds 8 random
//     characters (vllm/v1/engine/input_processor.py, assign_request_id);
//   - "<id>_<n>" / "<id>-<n>": one of several prompts of one API request
//     (chat_completion/serving.py sub_request_id; completion's "-{i}");
//   - "<n>_<id>": one of n parallel samples (vllm/v1/engine/
//     parallel_sampling.py, get_child_info).
var (
	sampleIndexPrefix = regexp.MustCompile(`^[0-9]+_`)
	internalSuffix    = regexp.MustCompile(`-[0-9a-f]{8}$`)
	promptIndexSuffix = regexp.MustCompile(`[-_][0-9]+$`)
)

// RequestIDForms lists what a client may have received for a server's
// request id: the id itself, then with each of vLLM's additions taken off
// in turn (sample index, internal suffix, prompt index).
func RequestIDForms(serverID string) []string {
	if serverID == "" {
		return nil
	}
	forms := []string{serverID}
	add := func(s string) string {
		if s != "" && !slices.Contains(forms, s) {
			forms = append(forms, s)
		}
		return s
	}
	s := add(sampleIndexPrefix.ReplaceAllString(serverID, ""))
	s = add(internalSuffix.ReplaceAllString(s, ""))
	add(promptIndexSuffix.ReplaceAllString(s, ""))
	return forms
}

// RequestIDFormsSQL is RequestIDForms as a ClickHouse array expression
// over the column col (forms may repeat there).
func RequestIDFormsSQL(col string) string {
	s1 := "replaceRegexpOne(" + col + ", '" + sampleIndexPrefix.String() + "', '')"
	s2 := "replaceRegexpOne(" + s1 + ", '" + internalSuffix.String() + "', '')"
	s3 := "replaceRegexpOne(" + s2 + ", '" + promptIndexSuffix.String() + "', '')"
	return "[" + col + ", " + s1 + ", " + s2 + ", " + s3 + "]"
}

// Join tolerances. IDSlack bounds how far apart an id pair's spans may
// start: an id is unique, so this only guards against a reused id much
// later (a held request, clock skew). MatchTolerance is how far a
// matched server span may stick out of its client span, across two hosts'
// clocks.
const (
	IDSlack        = 2 * time.Minute
	MatchTolerance = time.Second
)

// byID reports whether client half c and server half s name the same call.
func byID(c, s *Half) bool {
	if c.ID == "" || s.ID == "" || !slices.Contains(RequestIDForms(s.ID), c.ID) {
		return false
	}
	return !s.Start.Before(c.Start.Add(-IDSlack)) && !s.Start.After(c.End.Add(IDSlack))
}

// matches reports whether c and s could be one call by what both state:
// the same input tokens (required), the server span within the client
// span, the same model and a compatible address where both sides name
// one. Two ids that differ rule a match out.
func matches(c, s *Half) bool {
	if c.ID != "" && s.ID != "" {
		return false
	}
	if c.InputTokens == nil || s.InputTokens == nil || *c.InputTokens != *s.InputTokens {
		return false
	}
	if s.Start.Before(c.Start.Add(-MatchTolerance)) || s.End.After(c.End.Add(MatchTolerance)) {
		return false
	}
	if c.Model != "" && s.Model != "" && !strings.EqualFold(c.Model, s.Model) {
		return false
	}
	return addressFits(c.Address, s.Service, s.Instance)
}

// addressFits reports whether a client that called address may have
// reached the server named service (service.name) on instance: the
// address's first DNS label is the service (a Kubernetes Service name
// "vllm-llama.inference.svc.cluster.local"), or the instance is it or
// starts with it (a pod of that deployment). An IP address or no address
// says nothing either way.
func addressFits(address, service, instance string) bool {
	host := strings.ToLower(address)
	if host == "" {
		return true
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return true
	}
	label, _, _ := strings.Cut(host, ".")
	service, instance = strings.ToLower(service), strings.ToLower(instance)
	return label == service || host == instance || strings.HasPrefix(instance, label)
}

// Claim is a stored match pairing: the client call's row names its server
// span. A claim stands while both halves stay unpaired otherwise, so a
// later candidate never reopens a pairing already counted.
type Claim struct {
	Client, Server CallKey
}

// Pair decides which halves join. halves are every unpaired half known;
// fresh says which of them belong to traces that received spans now (a new
// match must involve one: any other pair had its chance when its later
// half arrived); claims are the stored match pairings. A server pairs by id
// with the one client whose id it names; then stored claims stand; then a
// client and a server that are each other's only remaining match pair.
// Halves of complete candidate sets only should be passed as fresh or as
// their candidates (see assembler.Assembler's join).
func Pair(halves []Half, fresh func(CallKey) bool, claims []Claim) *Joins {
	var clients, servers []int
	byKey := make(map[CallKey]int, len(halves))
	for i := range halves {
		byKey[halves[i].Key] = i
		if halves[i].Server {
			servers = append(servers, i)
		} else {
			clients = append(clients, i)
		}
	}
	j := &Joins{Servers: map[CallKey]Partner{}, Taken: map[CallKey]bool{}}
	paired := make([]bool, len(halves))
	attach := func(c, s int, method string) {
		p := j.Servers[halves[c].Key]
		p.Method = method
		p.Spans = append(p.Spans, halves[s].Span)
		j.Servers[halves[c].Key] = p
		j.Taken[halves[s].Key] = true
		paired[c], paired[s] = true, true
	}

	// By id: clients by the id they received.
	withID := map[string][]int{}
	for _, c := range clients {
		if id := halves[c].ID; id != "" {
			withID[id] = append(withID[id], c)
		}
	}
	for _, s := range servers {
		var found []int
		for _, form := range RequestIDForms(halves[s].ID) {
			for _, c := range withID[form] {
				if byID(&halves[c], &halves[s]) {
					found = append(found, c)
				}
			}
			if len(found) > 0 {
				break // the most exact form that names a client wins
			}
		}
		if len(found) == 1 {
			attach(found[0], s, telemetry.JoinID)
		}
	}

	// Stored match claims that still hold.
	for _, cl := range claims {
		c, okc := byKey[cl.Client]
		s, oks := byKey[cl.Server]
		if !okc || !oks || halves[c].Server || !halves[s].Server || paired[s] {
			continue
		}
		if p, ok := j.Servers[halves[c].Key]; ok && p.Method == telemetry.JoinID {
			continue
		}
		if matches(&halves[c], &halves[s]) {
			attach(c, s, telemetry.JoinMatch)
		}
	}

	// New unique matches among the rest, one side fresh.
	cands := func(i int, others []int) []int {
		var out []int
		for _, o := range others {
			if paired[o] {
				continue
			}
			c, s := i, o
			if halves[i].Server {
				c, s = o, i
			}
			if matches(&halves[c], &halves[s]) {
				out = append(out, o)
			}
		}
		return out
	}
	type pair struct{ c, s int }
	var found []pair
	for _, c := range clients {
		if paired[c] {
			continue
		}
		cs := cands(c, servers)
		if len(cs) != 1 {
			continue
		}
		s := cs[0]
		if !fresh(halves[c].Key) && !fresh(halves[s].Key) {
			continue
		}
		if back := cands(s, clients); len(back) == 1 && back[0] == c {
			found = append(found, pair{c, s})
		}
	}
	for _, p := range found {
		attach(p.c, p.s, telemetry.JoinMatch)
	}
	return j
}
