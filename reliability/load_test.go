package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
)

// TestSustainedMixedLoad runs steady OTLP exports alongside API and page
// reads, then checks that every acknowledged span is stored exactly once,
// that memory stayed bounded, and reports latencies and throughput.
func TestSustainedMixedLoad(t *testing.T) {
	t.Parallel()
	const (
		exporters      = 4
		exportsPerSec  = 25 // per exporter
		spansPerExport = 10
		rssLimit       = 2 << 30
	)
	duration := pick(20*time.Second, 5*time.Minute)
	dataDir := t.TempDir()
	srv := startServer(t, dataDir, databaseURL(t))
	client := &http.Client{Timeout: 30 * time.Second}
	t0 := time.Now().Add(-time.Minute)

	var (
		mu        sync.Mutex
		acked     []uint64
		failures  = map[string]int{}
		latencies = map[string][]time.Duration{}
		maxRSS    int64
	)
	record := func(kind string, d time.Duration, r httpResult) bool {
		mu.Lock()
		defer mu.Unlock()
		latencies[kind] = append(latencies[kind], d)
		if r.err != nil || r.code != http.StatusOK {
			failures[fmt.Sprintf("%s %d %v", kind, r.code, r.err)]++
			return false
		}
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	for e := range exporters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / exportsPerSec)
			defer tick.Stop()
			for i := uint64(0); ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				seed := uint64(e)<<40 | i
				start := time.Now()
				r := exportTraces(client, srv.OTLPHTTP, seed, spansPerExport, t0.Add(time.Duration(i)*time.Millisecond))
				if record("export", time.Since(start), r) {
					mu.Lock()
					acked = append(acked, seed)
					mu.Unlock()
				}
			}
		}()
	}
	reads := []struct{ kind, path string }{
		{"api requests", "/api/v1/requests?last=1h"},
		{"api diagnose", "/api/v1/diagnose?last=1h"},
		{"page login", "/login"},
	}
	for _, rd := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				r := do(client, http.MethodGet, "http://"+srv.UI+rd.path, nil, "")
				record(rd.kind, time.Since(start), r)
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			now := rss(t, srv)
			mu.Lock()
			maxRSS = max(maxRSS, now)
			mu.Unlock()
			time.Sleep(time.Second)
		}
	}()
	wg.Wait()
	srv.Stop(t)

	// Count what reached ClickHouse, on the data dir the server released.
	ackedIDs := make([]string, len(acked))
	for i, s := range acked {
		ackedIDs[i] = otlptest.TraceHex(s)
	}
	lostIDs, wrongIDs := apptest.CheckAcknowledged(apptest.StoredTraces(t, dataDir), ackedIDs, spansPerExport)
	lost, wrong := len(lostIDs), len(wrongIDs)
	if lost > 0 || wrong > 0 {
		t.Errorf("%d of %d acknowledged exports lost, %d stored with the wrong span count", lost, len(acked), wrong)
	}
	if len(acked) < int(duration.Seconds())*exporters*exportsPerSec/2 {
		t.Errorf("only %d exports acknowledged in %v: the load did not run at the intended rate", len(acked), duration)
	}
	if maxRSS > rssLimit {
		t.Errorf("server RSS peaked at %d MiB; want below %d MiB", maxRSS>>20, rssLimit>>20)
	}
	for f, n := range failures {
		t.Errorf("%d× failed: %s", n, f)
	}

	mode := pick("short", "long")
	lines := []string{
		fmt.Sprintf("# make test-reliability: sustained mixed load (%s mode, %v, %d exporters × %d exports/s × %d spans, 3 readers; %s)",
			mode, duration, exporters, exportsPerSec, spansPerExport, time.Now().UTC().Format("2006-01-02")),
		fmt.Sprintf("acknowledged spans: %d (%.0f spans/s), lost: %d", len(acked)*spansPerExport, float64(len(acked)*spansPerExport)/duration.Seconds(), lost),
		fmt.Sprintf("server RSS peak: %d MiB", maxRSS>>20),
	}
	kinds := make([]string, 0, len(latencies))
	for k := range latencies {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		ds := latencies[k]
		slices.Sort(ds)
		lines = append(lines, fmt.Sprintf("%-13s n=%-6d p50=%-9v p99=%v", k, len(ds),
			ds[len(ds)/2].Round(100*time.Microsecond), ds[len(ds)*99/100].Round(100*time.Microsecond)))
	}
	for _, l := range lines {
		t.Log(l)
	}
	// artifacts/ is gitignored: a clean clone does not have it yet.
	if err := os.MkdirAll(filepath.Join("..", "artifacts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "artifacts", "reliability.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Errorf("write artifacts/reliability.txt: %v", err)
	}
}
