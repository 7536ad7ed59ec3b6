package ingest_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
	"github.com/tokenpath/tokenpath/store/postgres/pgtest"
)

// TestMain removes the server binary the durability test built.
func TestMain(m *testing.M) {
	code := m.Run()
	apptest.RemoveServerBinary()
	os.Exit(code)
}

// TestSIGKILLKeepsAcknowledgedExports: every export the server answered 200
// survives a SIGKILL in the middle of the load and is stored exactly once
// after a restart on the same data dir.
func TestSIGKILLKeepsAcknowledgedExports(t *testing.T) {
	bin := apptest.ServerBinary(t)
	dataDir, dbURL := t.TempDir(), pgtest.URL(t)
	const spansPerExport = 5
	t0 := time.Now().Add(-time.Minute)

	first := apptest.StartProcess(t, bin, apptest.ProcessOptions{DataDir: dataDir, DatabaseURL: dbURL})
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
				body, _ := proto.Marshal(otlptest.Traces(s, spansPerExport, t0))
				req, _ := http.NewRequest(http.MethodPost, "http://"+first.OTLPHTTP+"/v1/traces", bytes.NewReader(body))
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
	first.Signal(t, syscall.SIGKILL)
	close(stop)
	wg.Wait()
	mu.Lock()
	ackedSeeds := append([]uint64(nil), acked...)
	mu.Unlock()
	if len(ackedSeeds) < 20 {
		t.Fatalf("only %d exports acknowledged before the kill; the load did not run:\n%s", len(ackedSeeds), first.Log())
	}
	t.Logf("%d exports acknowledged, %d attempted, %d failed at the kill", len(ackedSeeds), seed.Load(), failed.Load())

	// Restart on the same data dir: the log is replayed; a clean stop then
	// flushes and releases the engine so the test can open it.
	second := apptest.StartProcess(t, bin, apptest.ProcessOptions{DataDir: dataDir, DatabaseURL: dbURL})
	time.Sleep(time.Second) // one flush interval and more
	second.Stop(t)
	if !strings.Contains(second.Log(), "replaying write-ahead log segment") {
		t.Logf("no segment replayed: every acknowledged export was already written before the kill")
	}

	stored := apptest.StoredTraces(t, dataDir)
	ackedIDs := make([]string, len(ackedSeeds))
	for i, s := range ackedSeeds {
		ackedIDs[i] = otlptest.TraceHex(s)
	}
	missing, wrong := apptest.CheckAcknowledged(stored, ackedIDs, spansPerExport)
	for _, w := range wrong {
		t.Errorf("trace %s; want %d of each", w, spansPerExport)
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged exports lost after SIGKILL, e.g. traces %v\nfirst server:\n%s\nsecond server:\n%s",
			len(missing), len(ackedSeeds), missing[:min(len(missing), 10)], first.LogTail(3000), second.LogTail(3000))
	}
	// Exports answered with an error may or may not be stored, but never
	// anything that was not sent.
	if len(stored) > int(seed.Load()) {
		t.Errorf("%d traces stored, only %d sent", len(stored), seed.Load())
	}
}
