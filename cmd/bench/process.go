package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tokenpath/tokenpath/app/apptest"
)

// defaultDatabaseURL is the dev/CI machine's PostgreSQL (trust auth, db test).
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// benchKey is the API key of project "default" in every bench server.
const benchKey = "tp_bench_key_0123456789abcdef"

// databaseURL is TOKENPATH_BENCH_DATABASE_URL or the machine's test server.
func databaseURL() string {
	if u := os.Getenv("TOKENPATH_BENCH_DATABASE_URL"); u != "" {
		return u
	}
	return defaultDatabaseURL
}

// freshSchema creates an empty schema on the PostgreSQL at base and returns
// a URL whose search_path is it, plus a function that drops it.
func freshSchema(ctx context.Context, base string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL %s (set TOKENPATH_BENCH_DATABASE_URL): %w", redact(base), err)
	}
	defer conn.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "tp_bench_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		drop()
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparseable URL)"
	}
	return p.Redacted()
}

// memStatus is a process's resident memory (apptest.ReadMemory).
type memStatus = apptest.Memory

// readMem reads pid's memory; zero when it cannot (the process is gone).
func readMem(pid int) memStatus {
	m, _ := apptest.ReadMemory(pid)
	return m
}

// resetPeak restarts VmHWM at the current RSS (clear_refs 5), so each
// phase reports its own peak. Needs to own the process (or root).
func resetPeak(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// cpuTime is the user+system CPU a process has used so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesized command name; utime and stime are
	// fields 14 and 15 (1-based), in clock ticks of 1/100 s on Linux.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// serverMetrics reads a few of the server's own /metrics figures.
type serverMetrics struct {
	QueueRows   float64 // acknowledged, not yet in ClickHouse
	WrittenRows float64
	Writes      float64 // segments written (write latency histogram count)
	WriteSecs   float64
	HeapInuse   float64
	SpansParts  float64 // active parts of spans (merges behind inserts)
	// Merges of spans running, and the parts they read.
	SpansMerges, SpansMerging float64
	Engine                    float64 // the engine's tracked memory, bytes
	// The engine's allocator: resident pages, and of them the dirty ones
	// (freed, kept for reuse), bytes.
	AllocResident, AllocDirty float64
	// The engine's memory by use (statements, merges, caches…), bytes.
	EngineUses map[string]float64
	// Cumulative histograms: the server's time to acknowledge a traces
	// export (both transports) and the write-ahead log's group commits.
	ExportSecs, WALSyncSecs histogram
	// The assembler's time by pass stage, seconds.
	AssemblerSecs map[string]float64
}

// histogram is a Prometheus histogram's cumulative bucket counts by upper
// bound (+Inf included).
type histogram map[float64]float64

// since is h minus an earlier reading of the same histogram.
func (h histogram) since(before histogram) histogram {
	d := histogram{}
	for le, n := range h {
		d[le] = n - before[le]
	}
	return d
}

// quantile is the upper bound of the bucket holding the q-quantile, and
// how many observations exceeded over.
func (h histogram) quantile(q, over float64) (bound float64, count, above float64) {
	les := make([]float64, 0, len(h))
	for le := range h {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return 0, 0, 0
	}
	count = h[les[len(les)-1]]
	bound = math.Inf(1)
	for _, le := range les {
		if h[le] >= q*count && math.IsInf(bound, 1) {
			bound = le
		}
		if le <= over {
			above = count - h[le]
		}
	}
	return bound, count, above
}

// add adds a bucket line's count (name{...,le="x"} n) to h.
func (h histogram) add(labels string, v float64) {
	i := strings.Index(labels, `le="`)
	if i < 0 {
		return
	}
	le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(labels[i+4:], "}"), `"`), 64)
	if err == nil {
		h[le] += v
	}
}

func scrapeMetrics(ctx context.Context, webAddr string) (serverMetrics, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+webAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return serverMetrics{}, err
	}
	defer resp.Body.Close()
	m := serverMetrics{ExportSecs: histogram{}, WALSyncSecs: histogram{}, AssemblerSecs: map[string]float64{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "tokenpath_ingest_queue_rows":
			m.QueueRows = v
		case "tokenpath_ingest_written_rows_total":
			m.WrittenRows = v
		case "tokenpath_ingest_write_seconds_count":
			m.Writes = v
		case "tokenpath_ingest_write_seconds_sum":
			m.WriteSecs = v
		case "go_memstats_heap_inuse_bytes":
			m.HeapInuse = v
		case `tokenpath_clickhouse_active_parts{table="spans"}`:
			m.SpansParts = v
		case `tokenpath_clickhouse_merges{table="spans"}`:
			m.SpansMerges = v
		case `tokenpath_clickhouse_merging_parts{table="spans"}`:
			m.SpansMerging = v
		case "tokenpath_clickhouse_memory_tracked_bytes":
			m.Engine = v
		case `tokenpath_clickhouse_allocator_bytes{state="resident"}`:
			m.AllocResident = v
		case `tokenpath_clickhouse_allocator_bytes{state="dirty"}`:
			m.AllocDirty = v
		default:
			if l, ok := strings.CutPrefix(name, `tokenpath_ingest_export_seconds_bucket{signal="traces",`); ok {
				m.ExportSecs.add(l, v)
			}
			if l, ok := strings.CutPrefix(name, `tokenpath_ingest_wal_sync_seconds_bucket{`); ok {
				m.WALSyncSecs.add(l, v)
			}
			if stage, ok := strings.CutPrefix(name, `tokenpath_assembler_seconds_total{stage="`); ok {
				m.AssemblerSecs[strings.TrimSuffix(stage, `"}`)] = v
			}
			if use, ok := strings.CutPrefix(name, `tokenpath_clickhouse_memory_bytes{use="`); ok {
				if m.EngineUses == nil {
					m.EngineUses = map[string]float64{}
				}
				m.EngineUses[strings.TrimSuffix(use, `"}`)] = v
			}
		}
	}
	return m, sc.Err()
}

// machineBusy is the CPU time every process on the machine has used (all
// of /proc/stat's non-idle time): minus ours, it tells how much the other
// engineers' jobs took from a measurement.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// loadAverage is the 1-minute load average.
func loadAverage() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
