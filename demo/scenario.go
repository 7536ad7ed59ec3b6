package demo

import (
	"encoding/hex"
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TraceID is a W3C trace id.
type TraceID [16]byte

// String is the 32-char lowercase hex form used on the wire and in the API.
func (id TraceID) String() string { return hex.EncodeToString(id[:]) }

// SpanID is a W3C span id.
type SpanID [8]byte

// String is the 16-char lowercase hex form.
func (id SpanID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports an unset id (a root span's parent).
func (id SpanID) IsZero() bool { return id == SpanID{} }

// Attr is one span or resource attribute. Value is a string, int64,
// float64 or bool.
type Attr struct {
	Key   string
	Value any
}

// Resource is the emitting process: one per (service, instance), shared by
// all its spans and metric points.
type Resource struct {
	Service  string
	Instance string
	Attrs    []Attr
}

// SpanKind mirrors OTLP's span kind.
type SpanKind string

// Span kinds the demo emits.
const (
	KindInternal SpanKind = "internal"
	KindServer   SpanKind = "server"
	KindClient   SpanKind = "client"
)

// Span is one span exactly as it will be exported.
type Span struct {
	Resource      *Resource
	TraceID       TraceID
	SpanID        SpanID
	ParentSpanID  SpanID
	Name          string
	Kind          SpanKind
	Start, End    time.Time
	Attrs         []Attr
	Error         bool
	StatusMessage string
}

// Duration is End − Start.
func (s *Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// Attr returns the value of the attribute named key.
func (s *Span) Attr(key string) (any, bool) {
	for _, a := range s.Attrs {
		if a.Key == key {
			return a.Value, true
		}
	}
	return nil, false
}

// Request is the model's ground truth for one LLM call. Durations are what
// the model produced, rounded to the microsecond, so every figure a
// decomposition derives from the spans is exact to the millisecond.
type Request struct {
	TraceID      TraceID
	ClientSpanID SpanID
	ServerSpanID SpanID // zero for managed API calls
	RootSpanID   SpanID
	Service      string // the calling app
	Provider     string // vllm or openai
	Model        string
	Instance     string // vLLM instance that served it; empty for managed calls
	Incident     Incident
	Tenant       string
	Route        string
	// RootStart and Start are the root span's and the LLM client span's
	// start.
	RootStart, Start time.Time
	CallIndex        int
	InputTokens      int
	OutputTokens     int
	// Managed: a managed API call; queue, prefill and network are bundled
	// into its TTFT and no server span exists.
	Managed bool
	// Error: the call failed (rate limited, or a server error) and was
	// retried by the next call of the trace; it has no TTFT or tokens.
	// ErrorType is its error.type: "429" or "500".
	Error     bool
	ErrorType string
	// MetricsOnly: served by a vLLM with tracing off; its queue, prefill
	// and decode are in the server's histograms, not in any span.
	MetricsOnly bool

	// PreInference is the app's own time before the call: LLM client
	// start − root start, minus the task's earlier model calls.
	PreInference time.Duration
	// NetworkUp is client → vLLM (gateway included); NetworkDown the way
	// back for the first token.
	NetworkUp, NetworkDown time.Duration
	// Hold is how long the gateway held the request because no vLLM pod
	// was ready (cold start); 0 otherwise.
	Hold    time.Duration
	Queue   time.Duration // vLLM time_in_queue
	Prefill time.Duration // vLLM time_in_model_prefill
	// Decode is first token → last token (vLLM time_in_model_decode, and
	// the same on the client).
	Decode     time.Duration
	ServerTTFT time.Duration // queue + prefill
	// TTFT is the client-observed time to first token.
	TTFT time.Duration
	// E2E is the LLM client span's duration.
	E2E time.Duration
	// ColdStart: the request was held for a pod started by a scale-up.
	ColdStart bool
	// RunningAtAdmit is the vLLM batch size (running sequences) the
	// request joined; KVUsageAtArrival the replica's KV usage when it
	// arrived.
	RunningAtAdmit   int
	KVUsageAtArrival float64
	// WaitingAtArrival is how many requests were queued ahead of it.
	WaitingAtArrival int
}

// ITL is the mean inter-token latency the client saw.
func (r *Request) ITL() time.Duration {
	if r.OutputTokens < 2 {
		return 0
	}
	return r.Decode / time.Duration(r.OutputTokens-1)
}

// Want is the row a correct decomposition (DESIGN.md, "Decomposition")
// must derive from this call's spans. Figures the spans cannot state are
// nil: managed and metrics-only calls have no queue/prefill/network,
// failed calls no TTFT.
// For a cold start the measured hold (client start → server span start)
// also covers the outbound network leg, so Network is the return leg only.
func (r *Request) Want() telemetry.LLMRequest {
	ms := func(d time.Duration) *float64 { v := float64(d) / float64(time.Millisecond); return &v }
	w := telemetry.LLMRequest{
		TraceID:      r.TraceID.String(),
		SpanID:       r.ClientSpanID.String(),
		Service:      r.Service,
		Model:        r.Model,
		Provider:     r.Provider,
		Instance:     r.Instance,
		Start:        r.Start,
		PreInference: ms(r.PreInference),
		E2E:          ms(r.E2E),
		ColdStart:    r.ColdStart,
		Error:        r.Error,
		ErrorType:    r.ErrorType,
		CallIndex:    r.CallIndex,
		Route:        r.Route,
		Tenant:       r.Tenant,
	}
	if !r.Managed && !r.MetricsOnly {
		w.ServerService = vllmService
		w.Queue, w.Prefill = ms(r.Queue), ms(r.Prefill)
		network := r.NetworkUp + r.NetworkDown
		if r.ColdStart {
			w.ColdStartWait = ms(r.NetworkUp + r.Hold)
			network = r.NetworkDown
		}
		w.Network = ms(network)
	}
	if r.Error {
		return w
	}
	w.TTFT, w.Decode = ms(r.TTFT), ms(r.Decode)
	in, out := int64(r.InputTokens), int64(r.OutputTokens)
	w.InputTokens, w.OutputTokens = &in, &out
	if r.OutputTokens >= 2 {
		itl := *w.Decode / float64(r.OutputTokens-1)
		w.ITL = &itl
	}
	return w
}

// Scenario is everything a simulation would send, in the order it became
// available, plus the ground truth.
type Scenario struct {
	From, To time.Time
	Phases   []Phase
	Spans    []Span
	Metrics  []telemetry.MetricPoint
	// Events are scale events, posted to /api/v1/events.
	Events []telemetry.Event
	// Requests holds one entry per LLM call, in completion order.
	Requests []Request
}

// Trace returns the ground truth of the LLM calls of one trace (32-char
// hex id), in call order.
func (s *Scenario) Trace(traceID string) []Request {
	var out []Request
	for _, r := range s.Requests {
		if r.TraceID.String() == traceID {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Request) int { return a.CallIndex - b.CallIndex })
	return out
}

// ByTrace indexes the ground truth by trace id (32-char hex).
func (s *Scenario) ByTrace() map[string][]Request {
	m := make(map[string][]Request)
	for _, r := range s.Requests {
		k := r.TraceID.String()
		m[k] = append(m[k], r)
	}
	for _, rs := range m {
		slices.SortFunc(rs, func(a, b Request) int { return a.CallIndex - b.CallIndex })
	}
	return m
}

// IncidentAt is the incident planted at t (Healthy outside every phase).
func IncidentAt(phases []Phase, t time.Time) Incident {
	for _, p := range phases {
		if p.Contains(t) {
			return p.Incident
		}
	}
	return Healthy
}

func (s *Scenario) empty() bool {
	return len(s.Spans) == 0 && len(s.Metrics) == 0 && len(s.Events) == 0
}
