package reliability_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// key is the bootstrap API key of every server these tests start.
const key = "tp_reliability_key_0123456789abcdef"

// long reports whether the long mode (make test-reliability) was asked for.
func long() bool { return os.Getenv("TOKENPATH_RELIABILITY_LONG") != "" }

// pick returns the short-mode or the long-mode value.
func pick[T any](short, longValue T) T {
	if long() {
		return longValue
	}
	return short
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// serverBinary builds ./cmd/server once per package run.
func serverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tokenpath-reliability-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "tokenpath-server")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/server")
		cmd.Dir = ".." // the module root; tests run in reliability/
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/server: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// TestMain removes the built binary once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// server is tokenpath-server running as a child process in its own process
// group, on ports the kernel picked.
type server struct {
	cmd                    *exec.Cmd
	dataDir                string
	ui, otlpHTTP, otlpGRPC string
	done                   chan struct{}
	exitErr                error
	logMu                  sync.Mutex
	log                    bytes.Buffer
}

// startServer runs the server on dataDir against the PostgreSQL at dbURL and
// returns once it logged "tokenpath ready". The process group is killed at
// cleanup if the test did not stop it.
func startServer(t *testing.T, dataDir, dbURL string, env ...string) *server {
	t.Helper()
	cmd := exec.Command(serverBinary(t))
	cmd.Env = append(os.Environ(),
		"TOKENPATH_DATA_DIR="+dataDir, "TOKENPATH_DATABASE_URL="+dbURL, "TOKENPATH_BOOTSTRAP_KEY="+key,
		"TOKENPATH_HTTP_ADDR=127.0.0.1:0", "TOKENPATH_OTLP_HTTP_ADDR=127.0.0.1:0", "TOKENPATH_OTLP_GRPC_ADDR=127.0.0.1:0",
		"TOKENPATH_LOG_FORMAT=json", "TOKENPATH_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, dataDir: dataDir, done: make(chan struct{})}
	ready := make(chan struct{ ui, otlpHTTP, otlpGRPC string }, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			s.logMu.Lock()
			if s.log.Len() < 8<<20 {
				s.log.Write(line)
				s.log.WriteByte('\n')
			}
			s.logMu.Unlock()
			var rec struct {
				Msg      string `json:"msg"`
				UI       string `json:"ui"`
				OTLPHTTP string `json:"otlp_http"`
				OTLPGRPC string `json:"otlp_grpc"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "tokenpath ready" {
				ready <- struct{ ui, otlpHTTP, otlpGRPC string }{rec.UI, rec.OTLPHTTP, rec.OTLPGRPC}
			}
		}
		s.exitErr = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		if t.Failed() {
			t.Logf("server log (tail):\n%s", tail(s.logText(), 4000))
		}
	})
	select {
	case a := <-ready:
		s.ui, s.otlpHTTP, s.otlpGRPC = a.ui, a.otlpHTTP, a.otlpGRPC
		return s
	case <-s.done:
		t.Fatalf("server exited before ready (%v):\n%s", s.exitErr, tail(s.logText(), 4000))
	case <-time.After(90 * time.Second):
		t.Fatalf("server not ready after 90s:\n%s", tail(s.logText(), 4000))
	}
	return nil
}

func (s *server) logText() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// alive reports whether the process is still running.
func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits for a clean exit (the pipeline flushes).
func (s *server) stop(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.exitErr != nil {
			t.Errorf("server exited with %v after SIGTERM", s.exitErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not exit within 60s of SIGTERM:\n%s", tail(s.logText(), 4000))
	}
}

// rssBytes reads the server's resident set size from /proc.
func (s *server) rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatalf("read server status: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}

// goroutines reads go_goroutines from the server's /metrics.
func (s *server) goroutines(t *testing.T) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.ui + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("parse go_goroutines %q: %v", v, err)
			}
			return int(f)
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}

// httpResult is a finished request: status and body.
type httpResult struct {
	code int
	body string
	err  error
}

// do sends one request with the API key and reads the whole answer.
func do(client *http.Client, method, url string, body []byte, contentType string) httpResult {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return httpResult{err: err}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return httpResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return httpResult{code: resp.StatusCode, body: string(b), err: err}
}

// exportTraces posts one OTLP/HTTP protobuf export of spansPer spans of
// trace seed.
func exportTraces(client *http.Client, otlpHTTP string, seed uint64, spansPer int, t0 time.Time) httpResult {
	body, err := proto.Marshal(sampleTraces(seed, spansPer, t0))
	if err != nil {
		return httpResult{err: err}
	}
	return do(client, http.MethodPost, "http://"+otlpHTTP+"/v1/traces", body, "application/x-protobuf")
}

// traceID is a distinct valid trace id for seed.
func traceID(seed uint64) []byte {
	id := make([]byte, 16)
	id[0] = 0xcd
	binary.BigEndian.PutUint64(id[8:], seed)
	return id
}

func traceHex(seed uint64) string { return hex.EncodeToString(traceID(seed)) }

// sampleTraces is an export of n spans of trace seed: a client LLM span
// (with TTFT and tokens) and its vLLM server child, then plain work spans.
func sampleTraces(seed uint64, n int, t0 time.Time) *coltracepb.ExportTraceServiceRequest {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	num := func(k string, v float64) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
	}
	spans := make([]*tracepb.Span, n)
	for i := range spans {
		sid := make([]byte, 8)
		binary.BigEndian.PutUint64(sid, uint64(i)+1)
		start := t0.Add(time.Duration(i) * time.Millisecond)
		sp := &tracepb.Span{TraceId: traceID(seed), SpanId: sid, Name: "work", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
			StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(start.Add(300 * time.Millisecond).UnixNano())}
		switch i {
		case 0:
			sp.Name, sp.Kind = "llm_request", tracepb.Span_SPAN_KIND_SERVER
			sp.Attributes = []*commonpb.KeyValue{str("gen_ai.request.model", "llama"),
				num("gen_ai.latency.time_in_queue", 0.02+float64(seed%50)/1000), num("gen_ai.latency.time_in_model_prefill", 0.05),
				num("gen_ai.latency.time_to_first_token", 0.08), num("gen_ai.latency.e2e", 0.3)}
		}
		spans[i] = sp
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "vllm"), str("service.instance.id", "vllm-0")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
