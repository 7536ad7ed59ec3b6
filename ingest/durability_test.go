package ingest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/ingest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

// serverProcess is tokenpath-server running as a child process.
type serverProcess struct {
	cmd      *exec.Cmd
	otlpHTTP string
	done     chan error
	log      *bytes.Buffer
	logMu    *sync.Mutex
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startServerProcess runs bin on dataDir with every listener on a port the
// kernel picks, and returns once it logged "tokenpath ready".
func startServerProcess(t *testing.T, bin, dataDir, dbURL string) *serverProcess {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"TOKENPATH_DATA_DIR="+dataDir, "TOKENPATH_DATABASE_URL="+dbURL, "TOKENPATH_BOOTSTRAP_KEY="+apptest.Key,
		"TOKENPATH_HTTP_ADDR=127.0.0.1:0", "TOKENPATH_OTLP_HTTP_ADDR=127.0.0.1:0", "TOKENPATH_OTLP_GRPC_ADDR=127.0.0.1:0",
		"TOKENPATH_LOG_FORMAT=json", "TOKENPATH_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sp := &serverProcess{cmd: cmd, done: make(chan error, 1), log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = lockedWriter{sp.logMu, sp.log}.Write(append(line, '\n'))
			var rec struct {
				Msg      string `json:"msg"`
				OTLPHTTP string `json:"otlp_http"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "tokenpath ready" {
				ready <- rec.OTLPHTTP
			}
		}
		sp.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-sp.done
		}
	})
	select {
	case sp.otlpHTTP = <-ready:
		return sp
	case err := <-sp.done:
		t.Fatalf("server exited before ready (%v):\n%s", err, sp.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("server not ready after 60s:\n%s", sp.logText())
	}
	return nil
}

func (sp *serverProcess) logText() string {
	sp.logMu.Lock()
	defer sp.logMu.Unlock()
	return sp.log.String()
}

func (sp *serverProcess) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := sp.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sp.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not exit after %v:\n%s", sig, sp.logText())
	}
}

// TestSIGKILLKeepsAcknowledgedExports: every export the server answered 200
// survives a SIGKILL in the middle of the load and is stored exactly once
// after a restart on the same data dir.
func TestSIGKILLKeepsAcknowledgedExports(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tokenpath-server")
	build := exec.Command("go", "build", "-o", bin, "./cmd/server")
	build.Dir = ".." // the module root; the test runs in ingest/
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/server: %v\n%s", err, out)
	}
	dataDir, dbURL := t.TempDir(), pgtest.URL(t)
	const spansPerExport = 5
	t0 := time.Now().Add(-time.Minute)

	first := startServerProcess(t, bin, dataDir, dbURL)
	var (
		mu     sync.Mutex
		acked  []uint64
		seed   atomic.Uint64
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	stop := make(chan struct{})
	client := &http.Client{Timeout: 5 * time.Second}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := seed.Add(1)
				body, _ := proto.Marshal(ingest.SampleTraces(s, spansPerExport, t0))
				req, _ := http.NewRequest(http.MethodPost, "http://"+first.otlpHTTP+"/v1/traces", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/x-protobuf")
				req.Header.Set("Authorization", "Bearer "+apptest.Key)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					acked = append(acked, s)
					mu.Unlock()
				}
			}
		}()
	}
	// Let several flushes happen (every 500 ms) so the kill lands with
	// segments in every state: written and deleted, being written, open.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 300 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Duration(time.Now().UnixNano()%400) * time.Millisecond) // land anywhere in a flush cycle
	first.stop(t, syscall.SIGKILL)
	close(stop)
	wg.Wait()
	mu.Lock()
	ackedSeeds := append([]uint64(nil), acked...)
	mu.Unlock()
	if len(ackedSeeds) < 20 {
		t.Fatalf("only %d exports acknowledged before the kill; the load did not run:\n%s", len(ackedSeeds), first.logText())
	}
	t.Logf("%d exports acknowledged, %d attempted, %d failed at the kill", len(ackedSeeds), seed.Load(), failed.Load())

	// Restart on the same data dir: the log is replayed; a clean stop then
	// flushes and releases the engine so the test can open it.
	second := startServerProcess(t, bin, dataDir, dbURL)
	time.Sleep(time.Second) // one flush interval and more
	second.stop(t, syscall.SIGTERM)
	if !strings.Contains(second.logText(), "replaying write-ahead log segment") {
		t.Logf("no segment replayed: every acknowledged export was already written before the kill")
	}

	ctx := context.Background()
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: filepath.Join(dataDir, "clickhouse")}, ingest.QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	r, err := ch.Query(ctx, "SELECT trace_id, count() AS n, uniqExact(span_id) AS u FROM spans FINAL GROUP BY trace_id")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string][2]int64{}
	for i := range r.Rows {
		stored[r.Row(i).String("trace_id")] = [2]int64{r.Row(i).Int("n"), r.Row(i).Int("u")}
	}
	var missing []uint64
	for _, s := range ackedSeeds {
		got := stored[ingest.SampleTraceHex(s)]
		if got[0] == 0 {
			missing = append(missing, s)
			continue
		}
		if got[0] != spansPerExport || got[1] != spansPerExport {
			t.Errorf("trace %d: %d rows, %d distinct spans; want %d of each", s, got[0], got[1], spansPerExport)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged exports lost after SIGKILL, e.g. seeds %v\nfirst server:\n%s\nsecond server:\n%s",
			len(missing), len(ackedSeeds), missing[:min(len(missing), 10)], tail(first.logText(), 3000), tail(second.logText(), 3000))
	}
	// Exports answered with an error may or may not be stored, but never
	// anything that was not sent.
	if len(stored) > int(seed.Load()) {
		t.Errorf("%d traces stored, only %d sent", len(stored), seed.Load())
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
