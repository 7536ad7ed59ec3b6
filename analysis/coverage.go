package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// ServiceCoverage says how much of a service's requests Tokenpath could
// split, and why not the rest: which producers sent them, the share with a
// client-side TTFT and with a server split, how client calls and server
// spans were paired, and what to turn on to get more.
type ServiceCoverage struct {
	Service string `json:"service"`
	// Producers are the instrumentations and servers detected on the
	// service's LLM spans in the window (producerRules).
	Producers []string `json:"producers"`
	Requests  int64    `json:"requests"`
	// ClientTTFT counts requests whose TTFT the client measured, ServerSplit
	// those with a queue or prefill figure from an inference server.
	ClientTTFT  int64 `json:"client_ttft"`
	ServerSplit int64 `json:"server_split"`
	// JoinedBy counts requests by how their two sides were paired:
	// "trace", "id", "match".
	JoinedBy map[string]int64 `json:"joined_by"`
	// ClientOnly are calls no server span was found for; UnmatchedServer
	// are server spans no client call was found for (each a request).
	ClientOnly      int64 `json:"client_only"`
	UnmatchedServer int64 `json:"unmatched_server_spans"`
	// Advice is one sentence on what to turn on to cover more.
	Advice string `json:"advice"`
}

// Share is n as a share of the requests (0 without requests).
func (c ServiceCoverage) Share(n int64) float64 {
	if c.Requests <= 0 {
		return 0
	}
	return float64(n) / float64(c.Requests)
}

// Coverage reads the coverage of every service with requests in [from,
// to), or of service alone when it is set, from the live rows (FINAL: the
// join columns are in llm_requests only, not in its samples or rollups).
func (q *Queries) Coverage(ctx context.Context, project uint32, from, to time.Time, service string) ([]ServiceCoverage, error) {
	where, args := "project_id = ? AND start >= ? AND start < ?", []any{project, from, to}
	if service != "" {
		where += " AND service = ?"
		args = append(args, service)
	}
	// A client measured the TTFT where the row's TTFT source is a client
	// key (migration 0023), never where it is the server's; a row without
	// a recorded key counts where it has a client span and its TTFT is not
	// the server's: a client-only row, or a network figure (client TTFT −
	// server TTFT).
	r, err := q.CH.Query(ctx, `SELECT service, toInt64(count()) AS requests,
		toInt64(countIf(ttft_ms IS NOT NULL AND ttft_source != 'server' AND (ttft_source NOT IN ('', 'unrecorded') OR
			service != server_service AND (server_service = '' OR network_ms IS NOT NULL)))) AS client_ttft,
		toInt64(countIf(queue_ms IS NOT NULL OR prefill_ms IS NOT NULL)) AS server_split,
		toInt64(countIf(join_method = 'trace')) AS by_trace, toInt64(countIf(join_method = 'id')) AS by_id,
		toInt64(countIf(join_method = 'match')) AS by_match, toInt64(countIf(server_service = '')) AS client_only,
		toInt64(countIf(server_service != '' AND service = server_service AND join_method = '')) AS unmatched_server
		FROM llm_requests FINAL WHERE `+where+` AND is_deleted = 0
		GROUP BY service ORDER BY requests DESC`+FinalSettings, args...)
	if err != nil {
		return nil, fmt.Errorf("load coverage: %w", err)
	}
	out := make([]ServiceCoverage, 0, r.Len())
	for i := range r.Len() {
		w := r.Row(i)
		c := ServiceCoverage{Service: w.String("service"), Requests: w.Int("requests"), ClientTTFT: w.Int("client_ttft"),
			ServerSplit: w.Int("server_split"), ClientOnly: w.Int("client_only"), UnmatchedServer: w.Int("unmatched_server"),
			JoinedBy: map[string]int64{"trace": w.Int("by_trace"), "id": w.Int("by_id"), "match": w.Int("by_match")}}
		if c.Producers, err = q.producers(ctx, project, c.Service, from, to); err != nil {
			return nil, err
		}
		c.Advice = advice(c)
		out = append(out, c)
	}
	return out, nil
}

// producerSample bounds the LLM spans of a service read to detect its
// producers: the read stops there (no ORDER BY), so a busy service costs
// no more than a quiet one.
const producerSample = 200

// producers names the producers of a service's LLM spans in the window,
// from a bounded sample of them.
func (q *Queries) producers(ctx context.Context, project uint32, service string, from, to time.Time) ([]string, error) {
	r, err := q.CH.Query(ctx, `SELECT name, llm_role, mapKeys(attributes) AS keys, attributes['module'] AS module FROM spans
		PREWHERE project_id = ? AND service = ? AND start >= ? AND start < ? WHERE llm_role != '' LIMIT ?`,
		project, service, from, to, producerSample)
	if err != nil {
		return nil, fmt.Errorf("detect producers: %w", err)
	}
	var out []string
	for i := range r.Len() {
		w := r.Row(i)
		if p := producerOf(w.String("name"), w.String("llm_role"), w.Strings("keys"), w.String("module")); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

// producerRule recognises a producer by its LLM span: a span name, an
// attribute key or key prefix, a module prefix; the first rule that fits
// names it. The marks are those ingest/normalize/conventions.go reads,
// with the producers' sources cited there.
type producerRule struct {
	Producer     string
	Role         string // "client", "server" or "" for either
	Name         string
	Key          string
	KeyPrefix    string
	ModulePrefix string
}

var producerRules = []producerRule{
	{Producer: "SGLang", Role: "server", ModulePrefix: "sglang::"},                      // trace.py trace_req_start
	{Producer: "vLLM", Role: "server", Name: "llm_request"},                             // vllm/v1/engine/output_processor.py do_tracing
	{Producer: "vLLM (journey tracing)", Role: "server", Name: "llm_core"},              // vllm JOURNEY_TRACING.md
	{Producer: "Hugging Face TGI", Role: "server", Name: "generate"},                    // router/src/server.rs
	{Producer: "Hugging Face TGI", Role: "server", Name: "generate_stream"},             // router/src/server.rs
	{Producer: "OpenInference", Key: "openinference.span.kind"},                         // openinference semconv
	{Producer: "Langfuse", Key: "langfuse.observation.type"},                            // langfuse _client/attributes.py
	{Producer: "OpenLLMetry", Key: "llm.request.type"},                                  // semconv_ai LLM_REQUEST_TYPE
	{Producer: "OpenLLMetry", KeyPrefix: "traceloop."},                                  // semconv_ai TRACELOOP_*
	{Producer: "Pydantic Logfire", KeyPrefix: "logfire."},                               // logfire llm_provider.py
	{Producer: "LiteLLM", Name: "litellm_request"},                                      // litellm integrations/opentelemetry.py
	{Producer: "OpenLIT", Key: "gen_ai.server.time_to_first_token"},                     // openlit semcov/__init__.py
	{Producer: "OTel GenAI semantic conventions", Role: "client", KeyPrefix: "gen_ai."}, // gen-ai-spans.md
	{Producer: "inference server (gen_ai.latency.*)", Role: "server", KeyPrefix: "gen_ai.latency."},
}

func producerOf(name, role string, keys []string, module string) string {
	for _, r := range producerRules {
		switch {
		case r.Role != "" && r.Role != role:
		case r.Name != "" && r.Name != name:
		case r.ModulePrefix != "" && !strings.HasPrefix(module, r.ModulePrefix):
		case r.Key != "" && !slices.Contains(keys, r.Key):
		case r.KeyPrefix != "" && !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, r.KeyPrefix) }):
		default:
			return r.Producer
		}
	}
	return ""
}

// advice is the one thing to turn on that would cover most of what c
// misses.
func advice(c ServiceCoverage) string {
	switch {
	case c.UnmatchedServer > 0:
		return fmt.Sprintf("%d server spans arrived with no client call found: propagate trace context from the client (instrument its HTTP client), "+
			"or let the client span record gen_ai.response.id so they join by id.", c.UnmatchedServer)
	case c.ClientOnly > 0 && c.ClientOnly*2 >= c.Requests:
		return "Most calls have no server span: if they go to a self-hosted server, turn on its tracing (vLLM: --otlp-traces-endpoint; " +
			"SGLang: --enable-trace); a managed API bundles queue, prefill and network into its TTFT."
	case c.ClientTTFT < c.Requests-c.UnmatchedServer:
		return "Some calls have no client TTFT: stream them (gen_ai.request.stream) with an instrumentation that records the first chunk " +
			"(gen_ai.response.time_to_first_chunk, or a first-token span event)."
	}
	return "Every request has its client TTFT and, where a server traced it, its server split."
}

// thinShare is the share of requests with a client TTFT or a server split
// below which a diagnosis says its split rests on few requests.
const thinShare = 0.5

// CoverageEvidence appends to d a line saying its split rests on thin
// coverage, when c (the diagnosed service's coverage) has a client TTFT
// or a server split for fewer than half its requests.
func CoverageEvidence(d *diagnose.Diagnosis, c ServiceCoverage) {
	if c.Requests == 0 {
		return
	}
	ttft, split := c.Share(c.ClientTTFT), c.Share(c.ServerSplit)
	if ttft >= thinShare && split >= thinShare {
		return
	}
	text := fmt.Sprintf("Thin coverage: %.0f%% of %s's %d requests have a client TTFT and %.0f%% a server split, so the split above rests on those. %s",
		100*ttft, c.Service, c.Requests, 100*split, c.Advice)
	d.Evidence = append(d.Evidence, diagnose.Evidence{N: len(d.Evidence) + 1, Text: text,
		Figures: map[string]float64{"client_ttft_share": ttft, "server_split_share": split}})
}
