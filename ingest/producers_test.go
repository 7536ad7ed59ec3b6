package ingest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
)

// producersDir holds fixtures written from the source of producers that
// cannot be installed here (Python instrumentations, vLLM, SGLang, TGI):
// <producer>/<case>.json is one OTLP/JSON export, provenance.json names the
// source files and commits it follows. The JavaScript ones are recorded
// from the real packages under js/ (jsproducers_test.go).
const producersDir = "../testdata/producers"

// null marks a figure the request must leave unknown; unchecked one the
// test does not look at.
var null, unchecked = math.NaN(), math.Inf(1)

// reqWant is one expected request in the API's shape; figures in ms.
// ttftFrom ("event" for any chunk event, else the API's ttft_source),
// tokensFrom, join ("none": one side only) and preemptions are checked
// when set.
type reqWant struct {
	model                                            string
	in, out                                          int64
	ttft, queue, prefill, network, decode, e2e, preI float64
	ttftFrom, tokensFrom, join                       string
	preemptions                                      int64
}

// producerWant lists, per fixture case and calling service, the requests
// in start order. A model call is one request however many spans wrap it;
// agents, tools, retrieval and embeddings are none.
var producerWant = map[string]map[string][]reqWant{
	"python-openllmetry/openai-stream": {"py-openllmetry": {
		// TTFT from the first gen_ai.content.completion.chunk event.
		{model: "gpt-4o-mini-2024-07-18", in: 146, out: 6, ttft: 700, queue: null, prefill: null, network: null, decode: 600, e2e: 1300, preI: 50},
	}},
	"python-openllmetry/openai-stream-dropped-chunks": {"py-openllmetry-dropped": {
		// 172 chunk events dropped: the first one kept is not the first chunk.
		{model: "gpt-4o-mini-2024-07-18", in: 20, out: 300, ttft: null, queue: null, prefill: null, network: null, decode: null, e2e: 14000, preI: 0},
	}},
	"python-openllmetry/langchain-agent": {"py-langchain": {
		// Workflow, retrieval, task, tool and agent spans are not calls;
		// ChatOpenAI.chat over the openai-v2 span counts once.
		{model: "gpt-4o-2024-08-06", in: 900, out: 40, ttft: null, queue: null, prefill: null, network: null, decode: null, e2e: 1190, preI: 310},
		// Pre-inference of a later call is not checked here: the
		// assembler does not yet subtract earlier calls (DESIGN.md).
		{model: "gpt-4o-2024-08-06", in: 1200, out: 75, ttft: null, queue: null, prefill: null, network: null, decode: null, e2e: 1260, preI: unchecked},
	}},
	"python-openinference/openai-stream": {"py-openinference": {
		{model: "gpt-4o-mini-2024-07-18", in: 210, out: 9, ttft: 500, queue: null, prefill: null, network: null, decode: 1280, e2e: 1780, preI: 120},
	}},
	"python-openlit/openai-stream-and-not": {"py-openlit": {
		{model: "gpt-4o-mini", in: 37, out: 6, ttft: 400, queue: null, prefill: null, network: null, decode: 1100, e2e: 1500, preI: 0},
		// Not streamed: OpenLIT's TTFT key holds the duration, not a TTFT.
		{model: "gpt-4o-mini", in: 37, out: 6, ttft: null, queue: null, prefill: null, network: null, decode: null, e2e: 1100, preI: 0},
	}},
	"python-langfuse/openai-generation": {"py-langfuse": {
		{model: "gpt-4o", in: 320, out: 48, ttft: 800, queue: null, prefill: null, network: null, decode: 1500, e2e: 2300, preI: 100,
			ttftFrom: "client_attribute", tokensFrom: "client", join: "none"},
	}},
	"python-logfire/openai-stream": {"py-logfire": {
		// The zero-length "streaming response from …" log is not a second call.
		{model: "gpt-4o", ttft: null, queue: null, prefill: null, network: null, decode: null, e2e: 200, preI: 0, in: -1, out: -1},
	}},
	"python-litellm/completion": {"py-litellm": {
		{model: "gpt-4o-mini-2024-07-18", in: 55, out: 12, ttft: null, queue: null, prefill: null, network: null, decode: null, e2e: 1300, preI: 0},
	}},
	"python-otel-openai-v2/chat-stream": {"py-openai-v2": {
		{model: "gpt-4o-2024-08-06", in: 80, out: 22, ttft: null, queue: null, prefill: null, network: null, decode: null, e2e: 1600, preI: 0},
	}},
	"vllm-v1/llm-request-under-client": {"rag-app": {
		// The server's tokens win over the client's (12 in: an estimate);
		// the model comes from the client, vLLM V1 names none.
		{model: "meta-llama/Llama-3.1-8B-Instruct", in: 512, out: 32, ttft: 900, queue: 300, prefill: 550, network: 50, decode: 1100, e2e: 2000, preI: 0,
			tokensFrom: "server", join: "trace"},
	}},
	"vllm-journey/preempted-request": {"journey-app": {
		// llm_request and its llm_core are one server record: queue =
		// QUEUED→SCHEDULED (400) + PREEMPTED→SCHEDULED (200); prefill = the
		// engine's QUEUED→FIRST_TOKEN (1460) − 600; network = client TTFT −
		// the API's ARRIVED→FIRST_RESPONSE_FROM_CORE (1470).
		{model: "Qwen/Qwen2.5-7B-Instruct", in: 2048, out: 16, ttft: 1500, queue: 600, prefill: 860, network: 30, decode: 1500, e2e: 3000, preI: 0,
			ttftFrom: "event", tokensFrom: "server", join: "trace", preemptions: 1},
	}},
	"vllm-journey/server-only": {
		// The pair without a client, both spans named by
		// OTEL_SERVICE_NAME (JOURNEY_TRACING.md "OTEL Exporter Options"):
		// one server-only request, not one per span.
		"vllm-production": {{model: "", in: 2048, out: 16, ttft: 1470, queue: 600, prefill: 860, network: null, decode: 1505, e2e: 2980, preI: null,
			ttftFrom: "server_span", tokensFrom: "server", join: "none", preemptions: 1}},
	},
	"sglang/request-under-client": {"sglang-app": {
		// SGLang's prefill includes the queue wait: queue and prefill stay
		// unknown (bundled), network = client TTFT − server TTFT.
		{model: "Qwen/Qwen2.5-7B-Instruct", in: 300, out: 20, ttft: 700, queue: null, prefill: null, network: 80, decode: 1100, e2e: 1800, preI: 0, join: "trace"},
	}},
	"tgi/generate-stream-under-client": {"tgi-app": {
		// queue_time "120.5ms"; TGI sends no TTFT, so network is unknown.
		{model: "meta-llama/Llama-3.1-8B-Instruct", in: 64, out: 24, ttft: 450, queue: 120.5, prefill: null, network: null, decode: 1050, e2e: 1500, preI: 0, join: "trace"},
	}},
}

// TestProducerFixtures sends every fixture through the real OTLP/HTTP
// receiver into the embedded engine and checks the requests the API
// returns: count, model, tokens, TTFT and split.
func TestProducerFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(producersDir, "*", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, f := range files {
		if filepath.Base(f) == "provenance.json" || filepath.Base(filepath.Dir(f)) == "js" {
			continue
		}
		cases = append(cases, filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f[:len(f)-len(".json")]))
	}
	sort.Strings(cases)
	if len(cases) != len(producerWant) {
		t.Fatalf("%d fixtures %v, %d cases in producerWant: every fixture needs its expectations", len(cases), cases, len(producerWant))
	}
	srv := apptest.Start(t, apptest.Options{Configure: func(c *config.Config) { c.RetentionDays = 3650 }})
	type sent struct {
		spans       map[string]int
		first, last time.Time
	}
	all := map[string]sent{}
	for _, c := range cases {
		if _, ok := producerWant[c]; !ok {
			t.Fatalf("fixture %s has no row in producerWant", c)
		}
		if _, err := os.Stat(filepath.Join(producersDir, filepath.Dir(c), "provenance.json")); err != nil {
			t.Fatalf("fixture %s: %v (every producer names its source)", c, err)
		}
		body, err := os.ReadFile(filepath.Join(producersDir, c+".json"))
		if err != nil {
			t.Fatal(err)
		}
		postOTLPJSON(t, srv, compactJSON(t, body))
		n, first, last := exportSpans(t, [][]byte{body})
		all[c] = sent{spans: spansByService(t, body, n), first: first, last: last}
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			s := all[c]
			for svc, n := range s.spans {
				waitAssembled(t, srv, svc, n)
			}
			for svc, want := range producerWant[c] {
				rows := apiRequests(t, srv, svc, s.first.Add(-time.Minute), s.last.Add(time.Minute))
				if len(rows) != len(want) {
					t.Fatalf("%s: %d requests, want %d:\n%v", svc, len(rows), len(want), rows)
				}
				for i, w := range want {
					checkRequest(t, fmt.Sprintf("%s request %d", svc, i), rows[i], w)
				}
			}
		})
	}
}

func checkRequest(t *testing.T, name string, row map[string]any, w reqWant) {
	t.Helper()
	if row["model"] != w.model {
		t.Errorf("%s: model %v, want %q", name, row["model"], w.model)
	}
	for f, want := range map[string]int64{"input_tokens": w.in, "output_tokens": w.out} {
		if want < 0 {
			if row[f] != nil {
				t.Errorf("%s: %s = %v, want null", name, f, row[f])
			}
			continue
		}
		if got, ok := row[f].(float64); !ok || int64(got) != want {
			t.Errorf("%s: %s = %v, want %d", name, f, row[f], want)
		}
	}
	if w.ttftFrom == "event" {
		w.ttftFrom = "chunk_event"
	}
	for f, want := range map[string]string{"ttft_source": w.ttftFrom, "token_source": w.tokensFrom} {
		if want != "" && row[f] != want {
			t.Errorf("%s: %s = %v, want %q", name, f, row[f], want)
		}
	}
	switch {
	case w.join == "none" && row["join"] != nil:
		t.Errorf("%s: join = %v, want none (one side only)", name, row["join"])
	case w.join != "" && w.join != "none" && row["join"] != w.join:
		t.Errorf("%s: join = %v, want %q", name, row["join"], w.join)
	}
	if w.preemptions > 0 {
		if got, ok := row["preemptions"].(float64); !ok || int64(got) != w.preemptions {
			t.Errorf("%s: preemptions = %v, want %d", name, row["preemptions"], w.preemptions)
		}
	}
	for f, want := range map[string]float64{"ttft_ms": w.ttft, "queue_ms": w.queue, "prefill_ms": w.prefill,
		"network_ms": w.network, "decode_ms": w.decode, "e2e_ms": w.e2e, "pre_inference_ms": w.preI} {
		got, ok := row[f].(float64)
		switch {
		case math.IsInf(want, 1):
		case math.IsNaN(want) && row[f] != nil:
			t.Errorf("%s: %s = %v, want null (never invented)", name, f, row[f])
		case !math.IsNaN(want) && (!ok || math.Abs(got-want) > 0.5):
			t.Errorf("%s: %s = %v, want %v", name, f, row[f], want)
		}
	}
}

// spansByService counts an export's spans per service.name.
func spansByService(t *testing.T, body []byte, total int) map[string]int {
	t.Helper()
	var doc struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []struct {
					Key   string `json:"key"`
					Value struct {
						S string `json:"stringValue"`
					} `json:"value"`
				} `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Spans []json.RawMessage `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	out, n := map[string]int{}, 0
	for _, rs := range doc.ResourceSpans {
		svc := ""
		for _, a := range rs.Resource.Attributes {
			if a.Key == "service.name" {
				svc = a.Value.S
			}
		}
		for _, ss := range rs.ScopeSpans {
			out[svc] += len(ss.Spans)
			n += len(ss.Spans)
		}
	}
	if n != total {
		t.Fatalf("counted %d spans by service, %d in all", n, total)
	}
	return out
}

func compactJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
