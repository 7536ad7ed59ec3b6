package apptest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// ServerBinary builds ./cmd/server once per test binary and returns its
// path. Call RemoveServerBinary from TestMain to delete it afterwards.
func ServerBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tokenpath-test-server-")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = BuildServer(context.Background(), dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RemoveServerBinary deletes what ServerBinary built, if anything.
func RemoveServerBinary() {
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
}

// ProcessOptions adjust a server started as a child process.
type ProcessOptions struct {
	// DataDir is TOKENPATH_DATA_DIR; empty = a fresh temp dir.
	DataDir string
	// DatabaseURL is TOKENPATH_DATABASE_URL; empty = a fresh test schema.
	DatabaseURL string
	// Env adds or overrides TOKENPATH_* variables.
	Env []string
	// Dir is the working directory; empty = this process's.
	Dir string
}

// Process is tokenpath-server running as a child process in its own
// process group, every listener on a 127.0.0.1 port the kernel picked, and
// Key as the bootstrap API key. It dies with the test.
type Process struct {
	Cmd                    *exec.Cmd
	DataDir, DatabaseURL   string
	UI, OTLPHTTP, OTLPGRPC string // host:port of each listener

	done    chan struct{}
	exitErr error
	logMu   sync.Mutex
	log     bytes.Buffer
}

// StartProcess runs the binary bin (see ServerBinary) and returns once it
// logged "tokenpath ready" (Launch). The process group is killed at cleanup
// if the test did not stop it, and the log tail is printed if the test
// failed.
func StartProcess(t testing.TB, bin string, opt ProcessOptions) *Process {
	t.Helper()
	if opt.DataDir == "" {
		opt.DataDir = t.TempDir()
	}
	if opt.DatabaseURL == "" {
		opt.DatabaseURL = pgtest.URL(t)
	}
	p, err := Launch(context.Background(), bin, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("server log (tail):\n%s", p.LogTail(4000))
		}
	})
	return p
}

// Pid is the server's process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Log is everything the server logged so far (the first 8 MiB).
func (p *Process) Log() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.log.String()
}

// LogTail is the last n bytes of Log.
func (p *Process) LogTail(n int) string { return Tail(p.Log(), n) }

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and fails the test unless the server exits cleanly
// (after its pipeline's final flush) within a minute.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	if p.exitErr != nil {
		t.Errorf("server exited with %v after SIGTERM", p.exitErr)
	}
}

// Signal sends sig and waits up to a minute for the process to exit,
// whatever its exit status (SIGKILL is an unclean exit by design).
func (p *Process) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil && p.Alive() {
		t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not exit within 60s of %v:\n%s", sig, p.LogTail(4000))
	}
}

// Memory reads the server's resident set size now (VmRSS) and its peak so
// far (VmHWM) from /proc, in bytes.
func (p *Process) Memory(t testing.TB) (rss, peak int64) {
	t.Helper()
	m, err := ReadMemory(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	return m.RSS, m.Peak
}

// Metric sums every series of the named metric on the server's /metrics
// whose labels contain all of labels (e.g. `outcome="error"`).
func (p *Process) Metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + p.UI + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(series, l)
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("parse %s %q: %v", series, value, err)
		}
		sum, found = sum+f, true
	}
	if !found && len(labels) == 0 {
		t.Fatalf("no %s in /metrics", name)
	}
	return sum
}

// TraceCount is what ClickHouse holds of one trace: span rows and
// distinct span ids, after FINAL folds retried exports.
type TraceCount struct{ Rows, Spans int64 }

// StoredTraces opens the embedded ClickHouse in dataDir — the server must
// have exited and released it — and counts the spans of every trace.
func StoredTraces(t testing.TB, dataDir string) map[string]TraceCount {
	t.Helper()
	ctx := context.Background()
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: filepath.Join(dataDir, "clickhouse")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	res, err := ch.Query(ctx, "SELECT trace_id, count() AS n, uniqExact(span_id) AS u FROM spans FINAL GROUP BY trace_id")
	if err != nil {
		t.Fatal(err)
	}
	stored := make(map[string]TraceCount, len(res.Rows))
	for i := range res.Rows {
		stored[res.Row(i).String("trace_id")] = TraceCount{res.Row(i).Int("n"), res.Row(i).Int("u")}
	}
	return stored
}

// CheckAcknowledged compares acknowledged traces (hex ids, each exported
// once with spansPer spans) with stored: lost ones are absent, wrong ones
// are present with another row or distinct-span count (a duplicate or a
// partial trace).
func CheckAcknowledged(stored map[string]TraceCount, acked []string, spansPer int) (lost, wrong []string) {
	for _, id := range acked {
		switch got := stored[id]; {
		case got.Rows == 0:
			lost = append(lost, id)
		case got.Rows != int64(spansPer) || got.Spans != int64(spansPer):
			wrong = append(wrong, fmt.Sprintf("%s: %d rows, %d distinct spans", id, got.Rows, got.Spans))
		}
	}
	return lost, wrong
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
