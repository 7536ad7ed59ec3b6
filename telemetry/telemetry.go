// Package telemetry holds the domain rows that flow through Tokenpath: raw
// spans as ingest normalizes them, the decomposed LLM requests analysis
// builds from them, metric points and scaling events. It has no behaviour
// beyond small helpers, so every stage can share it without import cycles.
package telemetry

import (
	"strings"
	"time"
)

// LLMRole says which side of an LLM call a span records.
type LLMRole uint8

const (
	// NotLLM marks app spans (retrieval, tools, HTTP handlers).
	NotLLM LLMRole = iota
	// LLMClient is the caller's span: SDK or gateway; it sees client TTFT.
	LLMClient
	// LLMServer is the inference server's span (vLLM, SGLang): it carries
	// the queue/prefill/decode split.
	LLMServer
)

// String names the role as stored in ClickHouse.
func (r LLMRole) String() string {
	switch r {
	case LLMClient:
		return "client"
	case LLMServer:
		return "server"
	}
	return ""
}

// ParseLLMRole is the inverse of String.
func ParseLLMRole(s string) LLMRole {
	switch s {
	case "client":
		return LLMClient
	case "server":
		return LLMServer
	}
	return NotLLM
}

// Span is one stored span: identity, timing, the canonical LLM fields the
// normalizer found, and every raw attribute.
type Span struct {
	ProjectID     uint32
	TraceID       string // 32 lowercase hex chars
	SpanID        string // 16 lowercase hex chars
	ParentSpanID  string // empty for a root span
	Service       string
	Instance      string
	Name          string
	Kind          string // server, client, internal, producer, consumer
	Start         time.Time
	End           time.Time
	StatusCode    string // unset, ok, error
	StatusMessage string
	LLM           LLMCall
	Attributes    map[string]string
	Resource      map[string]string
	// ResourceHash keys Resource in the resources table (ResourceHash);
	// 0 when the span row keeps its resource inline (rows stored before
	// the resources table, or an empty resource).
	ResourceHash uint64
	EventNames   []string
	EventTimes   []time.Time
}

// Duration is End − Start.
func (s *Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// LLMCall holds the canonical fields of an LLM span. Unknown values are nil:
// the analysis must never invent a figure the spans did not state.
type LLMCall struct {
	Role         LLMRole
	Provider     string // gen_ai.provider.name / gen_ai.system: openai, anthropic, vllm …
	Model        string
	Operation    string // chat, text_completion, embeddings …
	InputTokens  *int64
	OutputTokens *int64
	// ClientTTFT is the time from span start to the first streamed token as
	// the client saw it.
	ClientTTFT *time.Duration
	// TTFTSource names where ClientTTFT came from: the wire attribute, or
	// "event:" and the event's name; a TTFTAfterHeaders suffix marks a
	// clock that starts after the response headers (ranked lowest).
	TTFTSource string
	// ResponseID identifies the call across traces, for joining a server
	// span that arrived without trace context to its client call: on a
	// client span the id it received (gen_ai.response.id, e.g.
	// "chatcmpl-…"), on a server span the id it logged for the request
	// (vLLM's and SGLang's gen_ai.request.id), which is the same id.
	ResponseID string
	// ServerAddress and ServerPort are the endpoint the client called
	// (server.address, server.port); ServerPort is 0 when unknown.
	ServerAddress string
	ServerPort    uint16
	// Server split (vLLM/SGLang gen_ai.latency.*).
	QueueTime   *time.Duration
	PrefillTime *time.Duration
	ServerTTFT  *time.Duration
	DecodeTime  *time.Duration
	ServerE2E   *time.Duration
	// Preemptions counts how often the server paused the request to free
	// KV cache (vLLM journey events); nil when the server does not say.
	Preemptions *int64
	// ErrorType is the class of error the call ended with as the span
	// states it (error.type, else an HTTP status of 400 or more): "429",
	// "RateLimitError", "timeout"; "" when the span names none.
	ErrorType string
}

// TTFTAfterHeaders ends a TTFTSource whose clock starts only once the
// response headers arrived (OpenLIT): it misses the wait for the headers, so
// any other client TTFT of the same call ranks above it.
const TTFTAfterHeaders = " (after headers)"

// TTFTRank orders client TTFT sources: higher is closer to the request's
// true start. An empty source (no TTFT) ranks below every other.
func TTFTRank(source string) int {
	switch {
	case source == "":
		return 0
	case strings.HasSuffix(source, TTFTAfterHeaders):
		return 1
	}
	return 2
}

// IsLLM reports whether the span records an LLM call.
func (c *LLMCall) IsLLM() bool { return c.Role != NotLLM }

// LLMRequest is one decomposed LLM call: the unit every page reads. All
// durations are milliseconds; nil means the data cannot say.
type LLMRequest struct {
	ProjectID     uint32
	TraceID       string
	SpanID        string // the client span, or the server span when there is no client span
	Service       string // the calling service (client side)
	ServerService string // the inference server's service, when a server span was seen
	Model         string
	Provider      string
	Instance      string // the inference instance that served it
	Start         time.Time
	TTFT          *float64
	PreInference  *float64
	Queue         *float64
	Prefill       *float64
	Network       *float64
	Decode        *float64
	E2E           *float64
	ITL           *float64
	ColdStartWait *float64 // hold before the server span started on a new instance
	InputTokens   *int64
	OutputTokens  *int64
	ColdStart     bool
	Error         bool
	// ErrorType is the failed call's error class as its spans named it
	// (LLMCall.ErrorType); "" when they named none.
	ErrorType string
	// CallIndex numbers the LLM calls of one trace in start order (agent
	// loops, retries), so cost per task can count them.
	CallIndex int
	Route     string
	Tenant    string
	// Join says how the client call and the server span were paired: by
	// trace context (JoinTrace), or across traces by id (JoinID) or by a
	// unique match (JoinMatch); "" when the request has only one side.
	Join string
	// ServerTraceID and ServerSpanID name the server span of the request
	// when it came from another trace (JoinID, JoinMatch).
	ServerTraceID string
	ServerSpanID  string
	// TTFTSource says where TTFT came from: the client wire key
	// (LLMCall.TTFTSource: an attribute, or "event:<name>" for a chunk
	// event), TTFTFromServer, or "" when there is no TTFT.
	TTFTSource string
	// TokenSource says which side the token counts came from
	// (TokensFromServer, TokensFromClient, TokensMixed), "" without counts.
	TokenSource string
	// Preemptions counts how often the server paused the request (vLLM
	// journey events); nil when the server does not say.
	Preemptions *int64
}

// Where a request's figures came from (LLMRequest.TTFTSource, TokenSource).
const (
	TTFTFromServer   = "server"
	TokensFromServer = "server"
	TokensFromClient = "client"
	TokensMixed      = "mixed"
	// SourceUnrecorded marks a figure stored before its source was.
	SourceUnrecorded = "unrecorded"
)

// How a request's client call and server span were paired (LLMRequest.Join).
const (
	JoinTrace = "trace"
	JoinID    = "id"
	JoinMatch = "match"
)

// Equal reports whether two requests hold the same values (pointers
// compared by what they point to, starts as instants): the assembler leaves
// a request it re-derives unchanged as it is stored.
func (r *LLMRequest) Equal(o *LLMRequest) bool {
	return r.ProjectID == o.ProjectID && r.TraceID == o.TraceID && r.SpanID == o.SpanID &&
		r.Service == o.Service && r.ServerService == o.ServerService && r.Model == o.Model &&
		r.Provider == o.Provider && r.Instance == o.Instance && r.Start.Equal(o.Start) &&
		samePtr(r.TTFT, o.TTFT) && samePtr(r.PreInference, o.PreInference) && samePtr(r.Queue, o.Queue) &&
		samePtr(r.Prefill, o.Prefill) && samePtr(r.Network, o.Network) && samePtr(r.Decode, o.Decode) &&
		samePtr(r.E2E, o.E2E) && samePtr(r.ITL, o.ITL) && samePtr(r.ColdStartWait, o.ColdStartWait) &&
		samePtr(r.InputTokens, o.InputTokens) && samePtr(r.OutputTokens, o.OutputTokens) &&
		r.ColdStart == o.ColdStart && r.Error == o.Error && r.ErrorType == o.ErrorType && r.CallIndex == o.CallIndex &&
		r.Route == o.Route && r.Tenant == o.Tenant && r.Join == o.Join &&
		r.ServerTraceID == o.ServerTraceID && r.ServerSpanID == o.ServerSpanID &&
		r.TTFTSource == o.TTFTSource && r.TokenSource == o.TokenSource && samePtr(r.Preemptions, o.Preemptions)
}

func samePtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// MetricPoint is one sample of a gauge or counter (Prometheus scrape or OTLP
// metric), with vLLM/SGLang names normalized (see ingest).
type MetricPoint struct {
	ProjectID uint32
	Time      time.Time
	Service   string
	Instance  string
	Name      string
	Labels    map[string]string
	Value     float64
}

// Event kinds.
const (
	EventScale           = "scale"
	EventInstanceStarted = "instance_started"
	EventK8s             = "k8s"
)

// Event is a scaling or cluster event that can explain a TTFT spike.
type Event struct {
	ProjectID    uint32
	Time         time.Time
	Kind         string
	Service      string
	Instance     string
	FromReplicas *int32
	ToReplicas   *int32
	Reason       string
	Source       string
	Attributes   map[string]string
}

// Ptr returns a pointer to v; handy for the optional fields above.
func Ptr[T any](v T) *T { return &v }

// MinTime returns the earlier of a and b.
func MinTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// MaxTime returns the later of a and b.
func MaxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// The request context assembly takes from span attributes: the route (on
// the root span) and the tenant. The store keeps both as columns of spans
// (route, tenant), so assembly reads them without the attribute map.
const RouteAttribute = "http.route"

// TenantAttributes name a span's tenant; the first one set wins.
var TenantAttributes = [...]string{"tenant", "tenant.id", "user.id", "enduser.id", "langfuse.user.id"}

// SpanTenant is the tenant attrs name: the value of the first
// TenantAttributes key with a non-empty value, or "".
func SpanTenant(attrs map[string]string) string {
	for _, k := range TenantAttributes {
		if v := attrs[k]; v != "" {
			return v
		}
	}
	return ""
}
