package ingest_test

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/telemetry"
)

// The JS producer suite: the real npm LLM instrumentations
// (testdata/producers/js/package.json, pinned) call a fake OpenAI/Anthropic
// API with a known schedule and export to a real Tokenpath server; every
// model call must come out as exactly one request with the right model,
// tokens, TTFT and decode. TestJSProducersLive runs node; with
// -record-js-producers it rewrites the fixtures that TestJSProducersReplay
// sends through the receiver without node.

var recordJSProducers = flag.Bool("record-js-producers", false, "rewrite testdata/producers/js/<library>/ from the live run")

// tokenWant is what a request's token count must be.
type tokenWant uint8

const (
	tokensSent tokenWant = iota // the fake API's usage, as it sent it
	tokensNone                  // null: the library reports none
)

// ttftWant is what a request's client TTFT must be.
type ttftWant uint8

const (
	// ttftNone: null, the library measures no first token (never invented).
	ttftNone ttftWant = iota
	// ttftFirstToken: from the call's start to the first token, the fake's
	// FIRST_TOKEN_MS (+ slack for a loaded machine).
	ttftFirstToken
	// ttftAfterHeaders: OpenLIT's clock starts when the app starts reading
	// the stream, after the response headers: FIRST_TOKEN_MS − HEADER_MS.
	ttftAfterHeaders
)

// callWant is the request one call must become.
type callWant struct {
	Provider string // "" when the library names none
	In, Out  tokenWant
	TTFT     ttftWant
	// Source, ID and Server are facts of the span the request names (for a
	// wrapped call, the library's outer span; its TTFT may come from the
	// nested one). Source: the wire key of that span's client TTFT
	// (ttft_source), "" for none.
	Source string
	// ID: the span keeps the fake API's response id, by which a server
	// span without trace context is joined.
	ID bool
	// Server is the endpoint the span names: "fake" (127.0.0.1 and the
	// fake API's port), "" for none, else "host:port" as the library sent it.
	Server string
}

// The TTFT keys the JS libraries send (ingest/normalize/conventions.go).
const (
	firstChunkKey     = "gen_ai.response.time_to_first_chunk"
	completionStart   = "langfuse.observation.completion_start_time"
	openlitAfterHeads = "gen_ai.server.time_to_first_token" + telemetry.TTFTAfterHeaders
)

// libraryWant is what Tokenpath must report for every call of a library,
// by call kind ("openai.chat", "openai.chat stream", "anthropic.messages"…).
// PreInference: the app's root span arrives, so pre-inference is known.
type libraryWant struct {
	PreInference bool
	Calls        map[string]callWant
}

var jsWant = map[string]libraryWant{
	// @opentelemetry/instrumentation-openai build/src/instrumentation.js:
	// gen_ai.system, tokens from the usage chunk, no first-token time.
	"otel-openai": {PreInference: true, Calls: map[string]callWant{
		"openai.chat":        {Provider: "openai", ID: true, Server: "fake"},
		"openai.chat stream": {Provider: "openai", ID: true, Server: "fake"},
	}},
	// @traceloop/instrumentation-openai dist/index.js: no usage on streams
	// (the tokenizer estimate is off without the SDK's enrichTokens), no
	// first-token time. The Anthropic calls are also traced by the SDK's own
	// span inside Traceloop's: one request, with the SDK's TTFT (Traceloop's
	// Anthropic span names no server and no response id).
	"openllmetry": {PreInference: true, Calls: map[string]callWant{
		"openai.chat":               {Provider: "openai", ID: true},
		"openai.chat stream":        {Provider: "openai", In: tokensNone, Out: tokensNone, ID: true},
		"anthropic.messages":        {Provider: "anthropic"},
		"anthropic.messages stream": {Provider: "anthropic", TTFT: ttftFirstToken},
	}},
	// @arizeai/openinference-instrumentation-openai dist/src/instrumentation.js:
	// llm.system, no usage on streams, no first-token time.
	"openinference": {PreInference: true, Calls: map[string]callWant{
		"openai.chat":        {Provider: "openai"},
		"openai.chat stream": {Provider: "openai", In: tokensNone, Out: tokensNone},
	}},
	// openlit dist/instrumentation/openai/wrapper.js: gen_ai.server.
	// time_to_first_token on streams (gen_ai.request.is_stream), timed from
	// the first read of the stream. Its Anthropic span wraps the SDK's own;
	// the SDK's span is the innermost client: its TTFT and its output
	// tokens (OpenLIT's Anthropic wrapper adds one) make the request. Its
	// spans name api.openai.com:443 / api.anthropic.com:443 whatever the
	// client's baseURL.
	"openlit": {PreInference: true, Calls: map[string]callWant{
		"openai.chat":               {Provider: "openai", ID: true, Server: "api.openai.com:443"},
		"openai.chat stream":        {Provider: "openai", TTFT: ttftAfterHeaders, Source: openlitAfterHeads, ID: true, Server: "api.openai.com:443"},
		"anthropic.messages":        {Provider: "anthropic", ID: true, Server: "api.anthropic.com:443"},
		"anthropic.messages stream": {Provider: "anthropic", TTFT: ttftFirstToken, Source: openlitAfterHeads, ID: true, Server: "api.anthropic.com:443"},
	}},
	// @langfuse/openai dist/index.cjs: a generation with usage_details and
	// completion_start_time; no provider attribute. parseUsageDetails
	// subtracts OpenAI's prompt_tokens_details from "input" and sends them
	// as input_cached_tokens etc.: the prompt is their sum.
	// LangfuseSpanProcessor exports only Langfuse and gen_ai spans by
	// default, so the app's root never arrives and pre-inference is unknown.
	"langfuse": {PreInference: false, Calls: map[string]callWant{
		"openai.chat":        {},
		"openai.chat stream": {TTFT: ttftFirstToken, Source: completionStart},
	}},
	// @anthropic-ai/sdk internal/tracing.js: the SDK's own spans,
	// gen_ai.response.time_to_first_chunk on streams.
	"anthropic-sdk": {PreInference: true, Calls: map[string]callWant{
		"anthropic.messages":        {Provider: "anthropic", ID: true, Server: "fake"},
		"anthropic.messages stream": {Provider: "anthropic", TTFT: ttftFirstToken, Source: firstChunkKey, ID: true, Server: "fake"},
	}},
}

// pendingOnMain lists the facts above that ingest does not yet get right:
// the value main reports instead, and why. The assertion checks that value,
// so once the rule lands the row fails and must be deleted.
var pendingOnMain = []struct {
	Library, Call, Field string
	OnMain               any // nil = null
	Why                  string
}{}

func callKind(c jsCall) string {
	if c.Stream {
		return c.API + " stream"
	}
	return c.API
}

// ttftSlack bounds how much later than the fake's schedule a loaded 2-core
// machine may see a token; it stays below the fake's decode time
// (5 gaps of 200 ms), so a TTFT that is really the whole call cannot pass.
const ttftSlack = 800 * time.Millisecond

// checkRequests asserts the library's requests, read from the API, against
// jsWant and pendingOnMain.
func checkRequests(t *testing.T, srv *apptest.Server, prov jsProvenance, rows []map[string]any) {
	t.Helper()
	want, ok := jsWant[prov.Library]
	if !ok {
		t.Fatalf("library %s has no row in jsWant", prov.Library)
	}
	if len(rows) != len(prov.Calls) {
		t.Fatalf("%s: %d model calls became %d requests, want one each:\n%v", prov.Library, len(prov.Calls), len(rows), rows)
	}
	tm := prov.Timing
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	first := time.Duration(tm.FirstTokenMS) * time.Millisecond
	decode := time.Duration((tm.Tokens-1)*tm.GapMS) * time.Millisecond
	for i, c := range prov.Calls {
		kind := callKind(c)
		cw, ok := want.Calls[kind]
		if !ok {
			t.Errorf("%s: no expectation for a %s call", prov.Library, kind)
			continue
		}
		row := withSpanFacts(t, srv, rows[i])
		name := fmt.Sprintf("%s call %d (%s)", prov.Library, i, kind)
		field := func(f string, correct any, check func(any) error) {
			t.Helper()
			for _, p := range pendingOnMain {
				if p.Library == prov.Library && p.Call == kind && p.Field == f {
					if fmt.Sprint(row[f]) != fmt.Sprint(p.OnMain) {
						t.Errorf("%s: %s = %v; pendingOnMain says main reports %v (%s): if the rule has landed, delete that row (correct: %v)",
							name, f, row[f], p.OnMain, p.Why, correct)
					}
					return
				}
			}
			if err := check(row[f]); err != nil {
				t.Errorf("%s: %s = %v, want %v: %v", name, f, row[f], correct, err)
			}
		}
		equal := func(v any) func(any) error {
			return func(got any) error {
				if fmt.Sprint(got) != fmt.Sprint(v) {
					return fmt.Errorf("differs")
				}
				return nil
			}
		}
		between := func(lo, hi float64) func(any) error {
			return func(got any) error {
				f, ok := got.(float64)
				if !ok || f < lo || f > hi {
					return fmt.Errorf("outside [%.0f, %.0f]", lo, hi)
				}
				return nil
			}
		}
		isNull := func(got any) error {
			if got != nil {
				return fmt.Errorf("not null")
			}
			return nil
		}
		field("service", prov.Service, equal(prov.Service))
		field("model", c.Model, equal(c.Model))
		field("provider", cw.Provider, equal(cw.Provider))
		tokens := func(f string, w tokenWant, sent int) {
			switch w {
			case tokensNone:
				field(f, nil, isNull)
			default:
				field(f, float64(sent), equal(float64(sent)))
			}
		}
		tokens("input_tokens", cw.In, tm.InputTokens)
		tokens("output_tokens", cw.Out, tm.Tokens)
		// No server span here: the counts, when sent, are the client's.
		if cw.In == tokensNone && cw.Out == tokensNone {
			field("token_source", "none", equal("none"))
		} else {
			field("token_source", "client", equal("client"))
		}
		// A client TTFT says where it came from; none is never the server's.
		if cw.TTFT == ttftNone {
			field("ttft_source", "none", equal("none"))
		} else {
			field("ttft_source", "a client key", func(got any) error {
				if got != "client_attribute" && got != "chunk_event" {
					return fmt.Errorf("not a client source")
				}
				return nil
			})
		}
		// The fake's last byte leaves FIRST_TOKEN_MS + decode after the
		// request arrived: no call can be shorter.
		field("e2e_ms", fmt.Sprintf("≥ %v", first+decode), between(ms(first+decode)-2, math.Inf(1)))
		if want.PreInference {
			field("pre_inference_ms", fmt.Sprintf("≥ %d ms", prov.PreInferenceMS), between(float64(prov.PreInferenceMS)-2, math.Inf(1)))
		} else {
			field("pre_inference_ms", nil, isNull)
		}
		field("span.ttft_source", cw.Source, equal(cw.Source))
		server := cw.Server
		if server == "fake" {
			server = fmt.Sprintf("127.0.0.1:%d", prov.FakePort)
		}
		field("span.server", server, equal(server))
		field("span.response_id", "the fake API's id", func(got any) error {
			id, _ := got.(string)
			if fake := strings.HasPrefix(id, "chatcmpl-conf") || strings.HasPrefix(id, "msg_conf"); fake != cw.ID {
				return fmt.Errorf("carries the fake's id: %v, want %v", fake, cw.ID)
			}
			return nil
		})
		switch cw.TTFT {
		case ttftNone:
			field("ttft_ms", nil, isNull)
			field("decode_ms", nil, isNull)
		case ttftFirstToken:
			field("ttft_ms", first, between(ms(first)-2, ms(first+ttftSlack)))
			// e2e ≥ first + decode, so decode is at least decode − slack.
			field("decode_ms", decode, between(ms(decode-ttftSlack), ms(decode+ttftSlack)))
		case ttftAfterHeaders:
			after := first - time.Duration(tm.HeaderMS)*time.Millisecond
			field("ttft_ms", after, between(ms(after)/2, ms(after+ttftSlack)))
			// The headers' wait lands in decode: client end − that TTFT.
			field("decode_ms", "e2e − ttft", func(got any) error {
				e2e, _ := row["e2e_ms"].(float64)
				ttft, _ := row["ttft_ms"].(float64)
				if f, ok := got.(float64); !ok || math.Abs(f-(e2e-ttft)) > 1 {
					return fmt.Errorf("not e2e − ttft")
				}
				return nil
			})
		}
	}
}

func TestJSProducersLive(t *testing.T) {
	node := needJSProducers(t)
	fake, timing := startFakeLLM(t, node)
	fakePort, err := strconv.Atoi(fake[strings.LastIndex(fake, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	srv := apptest.Start(t, apptest.Options{})
	// Every library runs at once (they mostly wait on the fake's schedule);
	// each asserts in its own subtest.
	type result struct {
		prov    jsProvenance
		exports [][]byte
		err     error
		t0      time.Time
	}
	libs := sortedLibraries()
	results := make([]result, len(libs))
	var wg sync.WaitGroup
	for i, lib := range libs {
		rec, proxy := startRecorder(t, srv.OTLPHTTPAddr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.t0 = time.Now()
			r.prov, r.err = runJSLibrary(node, lib, fake, proxy)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			r.exports, r.prov.Encoding = rec.exports, rec.encoding
			if r.err == nil {
				r.err = rec.err
			}
		}()
	}
	wg.Wait()
	for i, lib := range libs {
		t.Run(lib, func(t *testing.T) {
			r := results[i]
			if r.err != nil {
				t.Fatal(r.err)
			}
			prov := r.prov
			prov.Timing = timing
			prov.FakePort = fakePort
			prov.Recorder = "go test ./ingest -run TestJSProducersLive -record-js-producers"
			n, _, _ := exportSpans(t, r.exports)
			waitAssembled(t, srv, prov.Service, n)
			checkRequests(t, srv, prov, apiRequests(t, srv, prov.Service, r.t0.Add(-time.Minute), time.Now().Add(time.Minute)))
			if *recordJSProducers {
				writeFixture(t, prov, r.exports)
			}
		})
	}
}

// TestJSProducersReplay sends every recorded library's exports, exactly as
// recorded, through the OTLP/HTTP receiver and asserts the same table: the
// rules stay covered where node is not run.
func TestJSProducersReplay(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(jsDir, "*", "provenance.json"))
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, d := range dirs {
		recorded = append(recorded, filepath.Base(filepath.Dir(d)))
	}
	sort.Strings(recorded)
	if got, want := strings.Join(recorded, ","), strings.Join(sortedLibraries(), ","); got != want {
		t.Fatalf("recorded libraries %s, want one fixture per jsWant row %s (record with -record-js-producers)", got, want)
	}
	// The fixtures keep their recorded times; retention must not drop them.
	srv := apptest.Start(t, apptest.Options{Configure: func(c *config.Config) { c.RetentionDays = 3650 }})
	// All exports first, then one wait: the pipeline and the assembler
	// take them in the same passes.
	type fixture struct {
		prov        jsProvenance
		spans       int
		first, last time.Time
	}
	fixtures := map[string]fixture{}
	for _, lib := range recorded {
		prov, exports := readFixture(t, lib)
		for _, e := range exports {
			postOTLPJSON(t, srv, e)
		}
		f := fixture{prov: prov}
		f.spans, f.first, f.last = exportSpans(t, exports)
		fixtures[lib] = f
	}
	for _, lib := range recorded {
		t.Run(lib, func(t *testing.T) {
			f := fixtures[lib]
			waitAssembled(t, srv, f.prov.Service, f.spans)
			checkRequests(t, srv, f.prov, apiRequests(t, srv, f.prov.Service, f.first.Add(-time.Minute), f.last.Add(time.Minute)))
		})
	}
}

func sortedLibraries() []string {
	libs := make([]string, 0, len(jsWant))
	for l := range jsWant {
		libs = append(libs, l)
	}
	sort.Strings(libs)
	return libs
}

// TestJSProducerFixturesProvenance: every fixture names the packages and
// versions that produced it, and they are the versions package.json pins.
func TestJSProducerFixturesProvenance(t *testing.T) {
	pkg, err := os.ReadFile(filepath.Join(jsDir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range sortedLibraries() {
		prov, _ := readFixture(t, lib)
		if prov.Library != lib || len(prov.Packages) == 0 || prov.Source == "" || prov.Encoding == "" || len(prov.Calls) == 0 || prov.FakePort == 0 {
			t.Errorf("%s: incomplete provenance %+v", lib, prov)
		}
		for name, v := range prov.Packages {
			pin := fmt.Sprintf("%q: %q", name, v)
			alias := fmt.Sprintf("%q: \"npm:", name)
			if !strings.Contains(string(pkg), pin) && !(strings.Contains(string(pkg), alias) && strings.Contains(string(pkg), "@"+v+"\"")) {
				t.Errorf("%s was recorded with %s %s, which package.json does not pin: re-record with -record-js-producers", lib, name, v)
			}
		}
	}
}
