package web

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/request_json.golden from the current encoder")

// requestJSONCases are requests whose public JSON testdata/
// request_json.golden holds: every field set, none set, errored and not,
// each TTFT and token source, and values that test the encoding itself
// (HTML characters, invalid UTF-8, floats that encoding/json writes with
// an exponent).
func requestJSONCases() []struct {
	name string
	req  telemetry.LLMRequest
} {
	start := time.Date(2026, 12, 5, 9, 17, 36, 779520000, time.UTC)
	full := telemetry.LLMRequest{ProjectID: 7, TraceID: "5aba5e71e356dd3fd001c92b7912f396", SpanID: "750af7c30eaf939d",
		Service: "rag-chat", ServerService: "vllm-llama", Model: "meta-llama/Llama-3.1-8B-Instruct", Provider: "vllm",
		Instance: "vllm-llama-7dgldhbzsm-gdwnw", Start: start, TTFT: telemetry.Ptr(48782.124),
		PreInference: telemetry.Ptr(73.58), Queue: telemetry.Ptr(48624.366), Prefill: telemetry.Ptr(131.96),
		Network: telemetry.Ptr(25.798), Decode: telemetry.Ptr(35370.08), E2E: telemetry.Ptr(84152.204),
		ITL: telemetry.Ptr(41.858), ColdStartWait: telemetry.Ptr(0.0), InputTokens: telemetry.Ptr(int64(1462)),
		OutputTokens: telemetry.Ptr(int64(846)), ColdStart: true, Error: true, ErrorType: "429", CallIndex: 2,
		Route: "/chat", Tenant: "acme", Join: telemetry.JoinID, ServerTraceID: "0123456789abcdef0123456789abcdef",
		ServerSpanID: "fedcba9876543210", TTFTSource: "gen_ai.response.time_to_first_chunk",
		TokenSource: telemetry.TokensMixed, Preemptions: telemetry.Ptr(int64(3))}
	ok := full
	ok.Error, ok.ErrorType = false, "timeout" // a type without the flag is not written
	unnamed := full
	unnamed.ErrorType = ""
	server := full
	server.TTFTSource, server.TokenSource, server.ServerService, server.Join = telemetry.TTFTFromServer, telemetry.TokensFromServer, "", ""
	event := full
	event.TTFTSource, event.TokenSource = "event:First Token Stream Event", telemetry.TokensFromClient
	afterHeaders := full
	afterHeaders.TTFTSource = "gen_ai.server.time_to_first_token" + telemetry.TTFTAfterHeaders
	unrecorded := full
	unrecorded.TTFTSource, unrecorded.TokenSource = "", ""
	unrecordedMark := full
	unrecordedMark.TTFTSource, unrecordedMark.TokenSource = telemetry.SourceUnrecorded, telemetry.SourceUnrecorded
	noFigures := full
	noFigures.TTFT, noFigures.InputTokens, noFigures.OutputTokens = nil, nil, nil
	oneCount := noFigures
	oneCount.OutputTokens, oneCount.TokenSource = telemetry.Ptr(int64(0)), ""
	odd := full
	odd.Service, odd.Route, odd.Tenant = "<script>&\"x\"</script>", "/a\u2028b\tc", "bad\xffutf8\x01"
	odd.ErrorType = "RateLimitError <429>"
	odd.TTFT, odd.Queue, odd.Prefill, odd.Network = telemetry.Ptr(1e-7), telemetry.Ptr(1e21), telemetry.Ptr(-0.5), telemetry.Ptr(123456789.125)
	odd.Decode, odd.E2E = telemetry.Ptr(0.000001), telemetry.Ptr(9.99e20)
	odd.InputTokens, odd.Preemptions = telemetry.Ptr(int64(-1)), telemetry.Ptr(int64(1)<<62)
	odd.Start = time.Date(1999, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	return []struct {
		name string
		req  telemetry.LLMRequest
	}{
		{"full", full}, {"none", telemetry.LLMRequest{}}, {"not-errored", ok}, {"errored-unnamed", unnamed},
		{"server-ttft", server}, {"event-ttft", event}, {"after-headers", afterHeaders},
		{"unrecorded", unrecorded}, {"unrecorded-mark", unrecordedMark}, {"no-figures", noFigures},
		{"one-count", oneCount}, {"odd-values", odd},
	}
}

const requestJSONGolden = "testdata/request_json.golden"

// TestRequestJSONGolden: the public JSON of each requestJSONCases request
// is byte for byte the golden one (keys, values, order, nulls and left-out
// keys): the /api/v1 request shape does not change unnoticed.
func TestRequestJSONGolden(t *testing.T) {
	var got bytes.Buffer
	for _, c := range requestJSONCases() {
		b, err := json.Marshal(toRequestJSON(c.req))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got.WriteString(c.name + " " + string(b) + "\n")
	}
	if *updateGolden {
		if err := os.WriteFile(requestJSONGolden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(requestJSONGolden)
	if err != nil {
		t.Fatal(err)
	}
	gotLines, wantLines := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	if len(gotLines) != len(wantLines) {
		t.Fatalf("%d cases, golden has %d", len(gotLines), len(wantLines))
	}
	for i := range gotLines {
		if gotLines[i] != wantLines[i] {
			t.Errorf("case %d:\n got %s\nwant %s", i, gotLines[i], wantLines[i])
		}
	}
}

// goldenKeys are the keys of the golden "full" request, in order.
func goldenKeys(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(requestJSONGolden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, body, _ := strings.Cut(sc.Text(), " "); name == "full" {
			return objectKeys(t, []byte(body))
		}
	}
	t.Fatal("no full request in the golden file")
	return nil
}

// objectKeys lists a JSON object's keys in order.
func objectKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestRequestJSONDocumented: the field table of GET /api/v1/requests in
// docs/api.md names exactly the keys a request with every field set has,
// and the example there lists its keys in the order the API writes them.
func TestRequestJSONDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## GET /api/v1/requests\n")
	if !ok {
		t.Fatal("docs/api.md has no GET /api/v1/requests section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, example, ok := strings.Cut(section, "```json\n")
	if !ok {
		t.Fatal("no JSON example in the requests section")
	}
	example, _, _ = strings.Cut(example, "```")
	var body struct{ Requests []json.RawMessage }
	if err := json.Unmarshal([]byte(example), &body); err != nil || len(body.Requests) == 0 {
		t.Fatalf("the example does not parse as a list of requests: %v", err)
	}
	_, table, ok := strings.Cut(section, "| field | meaning |\n| --- | --- |\n")
	if !ok {
		t.Fatal("no field table in the requests section")
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, key := range strings.Split(cell, ", ") {
			documented[strings.Trim(key, "`")] = true
		}
	}
	want := goldenKeys(t)
	full, err := json.Marshal(toRequestJSON(requestJSONCases()[0].req))
	if err != nil {
		t.Fatal(err)
	}
	produced := objectKeys(t, full)
	if strings.Join(produced, ",") != strings.Join(want, ",") {
		t.Fatalf("a request with every field set has keys\n%v\nthe golden one\n%v", produced, want)
	}
	for _, k := range produced {
		if !documented[k] {
			t.Errorf("key %s is not in docs/api.md's field table", k)
		}
		delete(documented, k)
	}
	for k := range documented {
		t.Errorf("docs/api.md documents %s, which a request does not have", k)
	}
	// The example leaves out keys a request may omit; those it shows come
	// in the API's order.
	at := 0
	for _, k := range objectKeys(t, body.Requests[0]) {
		for at < len(produced) && produced[at] != k {
			at++
		}
		if at == len(produced) {
			t.Errorf("the example's key %s is out of the API's order %v", k, produced)
			break
		}
	}
}

// TestRequestDerivedNamePublicColumns: each key the API derives stands in
// a public column's place; one naming no column would never be written.
func TestRequestDerivedNamePublicColumns(t *testing.T) {
	public := map[string]bool{}
	for _, f := range clickhouse.RequestFields {
		public[f.Column] = true
	}
	for column := range requestDerived {
		if !public[column] {
			t.Errorf("requestDerived writes in place of %s, which is not a public llm_requests column", column)
		}
	}
}
