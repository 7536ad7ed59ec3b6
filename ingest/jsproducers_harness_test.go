package ingest_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/analysis/assembler"
	"github.com/tokenpath/tokenpath/app/apptest"
)

// jsDir holds the suite's own package.json (the real npm instrumentations,
// pinned), the fake LLM API, the runner and the recorded fixtures.
const jsDir = "../testdata/producers/js"

// jsTiming is the fake API's schedule (fake-llm.cjs prints it): headers,
// first token and the gap between tokens, in ms after the request arrives.
type jsTiming struct {
	HeaderMS     int `json:"HEADER_MS"`
	FirstTokenMS int `json:"FIRST_TOKEN_MS"`
	GapMS        int `json:"GAP_MS"`
	Tokens       int `json:"TOKENS"`
	InputTokens  int `json:"INPUT_TOKENS"`
	CachedTokens int `json:"CACHED_TOKENS"`
}

// jsCall is one model call run.cjs made, in order, each in its own trace.
type jsCall struct {
	API    string `json:"api"` // openai.chat or anthropic.messages
	Stream bool   `json:"stream"`
	Model  string `json:"model"`
}

// jsProvenance says where a fixture came from: run.cjs's summary (library,
// the npm packages and versions that ran, the source file of its spans,
// the calls) plus the wire encoding and the fake API's timing.
type jsProvenance struct {
	Library        string            `json:"library"`
	Service        string            `json:"service"`
	Packages       map[string]string `json:"packages"`
	Source         string            `json:"source"`
	PreInferenceMS int               `json:"pre_inference_ms"`
	Calls          []jsCall          `json:"calls"`
	Encoding       string            `json:"encoding,omitempty"`
	Timing         jsTiming          `json:"timing"`
	FakePort       int               `json:"fake_port"`
	Recorder       string            `json:"recorded_by,omitempty"`
}

// needJSProducers fails (never skips) when node or the suite's packages are
// missing: `make test` installs them.
func needJSProducers(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: the JS producer suite runs the real npm instrumentations (install Node.js >= 20.6)")
	}
	if _, err := os.Stat(filepath.Join(jsDir, "node_modules", ".package-lock.json")); err != nil {
		t.Fatalf("the JS producer packages are not installed: run `make test`, or `npm ci --prefix testdata/producers/js` (%v)", err)
	}
	return node
}

// startFakeLLM runs fake-llm.cjs; it exits when its stdin closes at cleanup.
func startFakeLLM(t *testing.T, node string) (baseURL string, timing jsTiming) {
	t.Helper()
	cmd := exec.Command(node, "fake-llm.cjs")
	cmd.Dir = jsDir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fake LLM API: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var port int
	var spec string
	if err == nil {
		_, err = fmt.Sscanf(line, "listening %d %s", &port, &spec)
	}
	if err == nil {
		err = json.Unmarshal([]byte(spec), &timing)
	}
	if err != nil {
		t.Fatalf("fake LLM API did not start: %v (%q)", err, line)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port), timing
}

// otlpRecorder forwards a library's exports to Tokenpath unchanged and keeps
// each trace export as OTLP/JSON, so the fixtures are what the library sent.
type otlpRecorder struct {
	mu       sync.Mutex
	exports  [][]byte // OTLP/JSON, one export each
	encoding string
	err      error
}

func startRecorder(t *testing.T, target string) (*otlpRecorder, string) {
	rec := &otlpRecorder{}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/v1/traces") {
			rec.add(body, r.Header)
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+target+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(proxy.Close)
	return rec, proxy.URL
}

func (rec *otlpRecorder) add(body []byte, h http.Header) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	js, enc, err := otlpJSON(body, h)
	if err != nil {
		rec.err = fmt.Errorf("record export: %w", err)
		return
	}
	if rec.encoding != "" && rec.encoding != enc {
		enc = "mixed"
	}
	rec.encoding = enc
	rec.exports = append(rec.exports, js)
}

// otlpJSON turns one export body into canonical OTLP/JSON: ids in hex as the
// OTLP/JSON spec writes them, object keys sorted, numbers as sent.
func otlpJSON(body []byte, h http.Header) ([]byte, string, error) {
	if h.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, "", err
		}
		if body, err = io.ReadAll(zr); err != nil {
			return nil, "", err
		}
	}
	enc := "json"
	if strings.Contains(h.Get("Content-Type"), "protobuf") {
		enc = "protobuf"
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &msg); err != nil {
			return nil, "", err
		}
		var err error
		if body, err = protojson.Marshal(&msg); err != nil {
			return nil, "", err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, "", err
	}
	if enc == "protobuf" {
		hexIDs(v)
	}
	out, err := json.Marshal(v)
	return out, enc, err
}

// hexIDs rewrites protojson's base64 ids as hex.
func hexIDs(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && (k == "traceId" || k == "spanId" || k == "parentSpanId") {
				if b, err := base64.StdEncoding.DecodeString(s); err == nil {
					x[k] = hex.EncodeToString(b)
				}
				continue
			}
			hexIDs(val)
		}
	case []any:
		for _, e := range x {
			hexIDs(e)
		}
	}
}

// runJSLibrary runs one library's calls through run.cjs, exporting to otlp.
func runJSLibrary(node, lib, fakeURL, otlp string) (jsProvenance, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "run.cjs", lib)
	cmd.Dir = jsDir
	cmd.Env = append(os.Environ(), "FAKE_LLM_URL="+fakeURL, "OTLP_URL="+otlp, "OTLP_KEY="+apptest.Key,
		// No library may look for a collector of its own.
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return jsProvenance{}, fmt.Errorf("node run.cjs %s: %w\n%s", lib, err, stderr.String())
	}
	var prov jsProvenance
	if err := json.Unmarshal(lastLine(out), &prov); err != nil {
		return jsProvenance{}, fmt.Errorf("run.cjs %s summary: %w\n%s", lib, err, out)
	}
	return prov, nil
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

// fixtureDir is testdata/producers/js/<library>.
func fixtureDir(lib string) string { return filepath.Join(jsDir, lib) }

// writeFixture records a library's exports (traces.jsonl, one OTLP/JSON
// export a line) and its provenance.json.
func writeFixture(t *testing.T, prov jsProvenance, exports [][]byte) {
	t.Helper()
	dir := fixtureDir(prov.Library)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, e := range exports {
		buf.Write(e)
		buf.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "traces.jsonl"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := json.MarshalIndent(prov, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "provenance.json"), append(p, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readFixture loads a recorded library: its provenance and exports.
func readFixture(t *testing.T, lib string) (jsProvenance, [][]byte) {
	t.Helper()
	var prov jsProvenance
	p, err := os.ReadFile(filepath.Join(fixtureDir(lib), "provenance.json"))
	if err == nil {
		err = json.Unmarshal(p, &prov)
	}
	if err != nil {
		t.Fatalf("fixture %s: %v", lib, err)
	}
	raw, err := os.ReadFile(filepath.Join(fixtureDir(lib), "traces.jsonl"))
	if err != nil {
		t.Fatalf("fixture %s: %v", lib, err)
	}
	var exports [][]byte
	for _, l := range bytes.Split(raw, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			exports = append(exports, l)
		}
	}
	return prov, exports
}

// postOTLPJSON sends one OTLP/JSON trace export to the real receiver.
func postOTLPJSON(t *testing.T, srv *apptest.Server, export []byte) {
	t.Helper()
	postOTLP(t, srv, export, "application/json")
}

// postOTLP sends one trace export of the content type to the real receiver.
func postOTLP(t *testing.T, srv *apptest.Server, export []byte, contentType string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+srv.OTLPHTTPAddr+"/v1/traces", bytes.NewReader(export))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || bytes.Contains(body, []byte("rejected")) {
		t.Fatalf("export (%s): %d %s", contentType, resp.StatusCode, body)
	}
}

// exportSpans counts the spans and finds the time range of exports.
func exportSpans(t *testing.T, exports [][]byte) (n int, first, last time.Time) {
	t.Helper()
	for _, e := range exports {
		var doc struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []struct {
						Start json.Number `json:"startTimeUnixNano"`
						End   json.Number `json:"endTimeUnixNano"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(e, &doc); err != nil {
			t.Fatalf("fixture export: %v", err)
		}
		for _, rs := range doc.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					n++
					s, _ := sp.Start.Int64()
					en, _ := sp.End.Int64()
					if first.IsZero() || time.Unix(0, s).Before(first) {
						first = time.Unix(0, s)
					}
					if time.Unix(0, en).After(last) {
						last = time.Unix(0, en)
					}
				}
			}
		}
	}
	return n, first.UTC(), last.UTC()
}

// waitAssembled waits until the service's spans are all stored and the
// assembler's watermark has passed their insert: from then on its
// llm_requests rows are final, so a count read later cannot grow.
func waitAssembled(t *testing.T, srv *apptest.Server, service string, spans int) {
	t.Helper()
	ctx := context.Background()
	asm := &assembler.Assembler{CH: srv.CH, PG: srv.PG}
	var stored int64
	var inserted time.Time
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		r, err := srv.CH.Query(ctx, "SELECT count() AS n, toUnixTimestamp64Nano(max(inserted_at)) AS ins FROM spans FINAL WHERE service = ?", service)
		if err != nil {
			t.Fatal(err)
		}
		stored = r.Row(0).Int("n")
		if stored >= int64(spans) {
			inserted = time.Unix(0, r.Row(0).Int("ins")).UTC()
			break
		}
	}
	if stored != int64(spans) {
		t.Fatalf("%s: %d spans stored, want the %d exported", service, stored, spans)
	}
	for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		wm, ok, err := asm.Watermark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok && !wm.Before(inserted) {
			return
		}
	}
	t.Fatalf("%s: the assembler never passed the spans' insert at %s", service, inserted)
}

// apiRequests reads the service's requests from GET /api/v1/requests in
// [from, to], oldest first.
func apiRequests(t *testing.T, srv *apptest.Server, service string, from, to time.Time) []map[string]any {
	t.Helper()
	q := url.Values{"service": {service}, "from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "limit": {"100"}}
	req, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr+"/api/v1/requests?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+apptest.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Requests []map[string]any `json:"requests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/requests: %d %v", resp.StatusCode, err)
	}
	start := func(i int) time.Time {
		s, _ := body.Requests[i]["start"].(string)
		ts, _ := time.Parse(time.RFC3339Nano, s)
		return ts
	}
	sort.SliceStable(body.Requests, func(i, j int) bool { return start(i).Before(start(j)) })
	return body.Requests
}

// withSpanFacts adds to a request row what the stored span of its call
// keeps for joining and for saying where TTFT came from: span.response_id,
// span.server (address:port) and span.ttft_source.
func withSpanFacts(t *testing.T, srv *apptest.Server, row map[string]any) map[string]any {
	t.Helper()
	r, err := srv.CH.Query(context.Background(), `SELECT response_id, server_address, server_port, ttft_source
		FROM spans FINAL WHERE trace_id = ? AND span_id = ?`, row["trace_id"], row["span_id"])
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 1 {
		t.Fatalf("request %v/%v: %d spans stored", row["trace_id"], row["span_id"], r.Len())
	}
	out := make(map[string]any, len(row)+3)
	for k, v := range row {
		out[k] = v
	}
	sp := r.Row(0)
	out["span.response_id"] = sp.String("response_id")
	out["span.server"] = ""
	if a := sp.String("server_address"); a != "" {
		out["span.server"] = fmt.Sprintf("%s:%d", a, sp.Int("server_port"))
	}
	out["span.ttft_source"] = sp.String("ttft_source")
	return out
}
