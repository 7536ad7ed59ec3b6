package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// embedded runs statements on the in-process chDB engine through a small
// pool of connections. Since chDB 4 (EmbeddedServer) connections to the
// same data path are independent and run statements in parallel, so a
// page's reads, an ingest insert and an assembler pass no longer queue
// behind one another (a diagnosis's reads used to add up, one at a time).
// Waiting for a connection honours the caller's context.
type embedded struct {
	conns chan *pooledConn // idle connections
	// background has a slot for each statement that runs while nobody
	// waits (inserts, assembler passes, alert checks): one slot fewer than
	// connections, so an Interactive statement always finds one.
	background chan struct{}
	all        []*pooledConn
	dir        string
	lock       *os.File
	seq        atomic.Uint64
	maxExec    int
}

// pooledConn is one engine connection of the pool.
type pooledConn struct {
	conn *chdbConn
	// runningSince is when the statement on it started (unix ns), 0 when
	// idle: readiness reads it instead of queueing behind it.
	runningSince atomic.Int64
}

// backgroundConns is how many connections background statements may hold
// at once: enough for every core to run one, a few more would only queue
// inside the engine. The pool has one more, for Interactive statements.
func backgroundConns() int { return min(max(runtime.NumCPU(), 2), 4) }

// engineArgs are the command-line settings the embedded engine starts with.
func engineArgs(dir string) []string {
	args := []string{"--path=" + dir, "--merges_mutations_memory_usage_soft_limit=" + strconv.Itoa(mergeMemorySoftLimit),
		"--os_threads_nice_value_merge_mutate=" + strconv.Itoa(mergeNice),
		"--background_merges_mutations_concurrency_ratio=" + strconv.Itoa(mergesPerThread)}
	if limit := engineMemoryLimit(); limit > 0 {
		args = append(args, "--memory_worker_purge_dirty_pages_threshold_ratio="+strconv.FormatFloat(purgeDirtyRatio(limit), 'g', 4, 64))
	}
	return args
}

// mergeMemorySoftLimit: while background merges hold more than this, the
// engine starts no new one. A merge of the ~21 parts of spans that
// merge_selector_base 25 gathers held ~300 MiB with 10 MiB granules (one
// granule of the attributes map per part; ~150 MiB with spans' 2 MiB
// granules, migration 0001); two such merges at once were 723 of a 1689
// MiB RSS peak over 3 minutes of OTLP/HTTP at 94k spans/s (bench ingest).
// With the limit, a third large merge waits for the first two.
const mergeMemorySoftLimit = 256 << 20

// mergesPerThread is how many merges the engine runs at once per merge
// thread. ClickHouse's default, 2, interleaves four merges on chDB's two
// threads: no faster on two cores, and each merge holds its parts' read
// buffers the whole time. Over 3 minutes of gRPC at ~120k spans/s, four
// merges of spans over 162 parts held 651 MiB of a 1642 MiB RSS peak
// (mergeMemorySoftLimit only stops merges from starting, and they start
// small); with one per thread, two merges over 57 parts held 201–326 MiB
// of a 1259 MiB peak at the same rate (120k spans/s, bench ingest), and the
// assembler caught up 45 s sooner.
const mergesPerThread = 1

// mergeNice is the nice value of the engine's merge threads. At the
// receivers' priority, the merges of a burst's parts took the cores from
// the goroutines decoding and acknowledging exports: merges are a third of
// the server's CPU at full rate, and half-load exports right after a burst
// waited on them (p99 257–351 ms over gRPC, bench ingest). Niced,
// they run in the time the receivers leave: bench ingest over 3 minutes
// of both transports, same machine, back to back: gRPC 83k → 91k spans/s,
// HTTP 63k → 75k (22.0 → 20.2 and 29.9 → 24.5 µs of server CPU a span),
// half-load p99 206 → 154 ms and 183 → 150 ms at a higher half load, RSS
// peak 1113 → 1306 and 1241 → 1309 MiB; merges trail further in a burst
// (spans peaked at 173–185 active parts against 61–95). A second niced
// run: 90k and 85k spans/s, RSS 1286 and 1463 MiB. Without a bound on
// merges' memory, merges deferred past a 3-minute burst took RSS to 2.1
// GiB; mergeMemorySoftLimit and spans' 2 MiB granules bound it. The engine sets a nice
// value only with CAP_SYS_NICE (root, or a container given it), as
// for the assembler's reads; without it merges run at the default.
const mergeNice = 10

// dirtyPagesCap is how many freed pages the engine's allocator (jemalloc)
// may keep before its memory worker purges them. Under full ingest,
// inserts and merges free hundreds of MiB a second, and with only the
// allocator's 5 s decay 300–700 MiB of the RSS peak were such pages (bench
// ingest); the server's RSS target is 1.5 GiB. Purging costs re-faulting
// the pages later: a cap of ~113 MiB purged 15 times a second and cost a
// third of the throughput (bench ingest).
const dirtyPagesCap = 224 << 20

// purgeDirtyRatio is dirtyPagesCap as the engine's setting takes it: a
// share of its memory limit, so the cap stays the same in bytes whatever
// the machine's size.
func purgeDirtyRatio(limit uint64) float64 {
	return min(float64(dirtyPagesCap)/float64(limit), 1)
}

// engineMemoryLimit is the memory limit the engine sets itself
// (max_server_memory_usage): 0.9 of the machine's memory, or of the
// cgroup's limit when lower; 0 when the machine's cannot be read (the
// engine then keeps its default).
func engineMemoryLimit() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	total := si.Totalram * uint64(si.Unit)
	// cgroup v2, then v1 ("max" or a huge number when there is none).
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(f); err == nil {
			if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
				total = min(total, v)
			}
		}
	}
	return total / 10 * 9
}

// The engine serves one data path per process: a second store (the pool
// is per store) is refused here.
var (
	embeddedMu   sync.Mutex
	embeddedOpen bool
)

func openEmbedded(cfg Config) (*embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded clickhouse needs a data dir")
	}
	embeddedMu.Lock()
	defer embeddedMu.Unlock()
	if embeddedOpen {
		return nil, errors.New("the embedded ClickHouse engine is already open in this process")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o750); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	removeStaleStages(filepath.Join(dir, "tmp"))
	n := backgroundConns() + 1
	e := &embedded{conns: make(chan *pooledConn, n), background: make(chan struct{}, backgroundConns()),
		dir: dir, lock: lock, maxExec: int(cfg.MaxExecutionTime.Seconds())}
	args := engineArgs(dir)
	for range n {
		conn, err := openChdb(args)
		if err != nil {
			e.closeConns()
			return nil, fmt.Errorf("start embedded clickhouse in %s: %w", dir, err)
		}
		pc := &pooledConn{conn: conn}
		e.all = append(e.all, pc)
		// Each connection is a session of its own and keeps these for
		// every later statement.
		for _, set := range []string{
			"SET session_timezone = 'UTC'",
			"SET max_execution_time = " + strconv.Itoa(e.maxExec),
			"SET max_query_size = " + strconv.Itoa(MaxQuerySize),
			// The engine's top-K filter mis-types Nullable(Float64) sort
			// keys ("Expected: Float64. Got: Decimal64") on ORDER BY …
			// LIMIT without FINAL (chDB 26.5); the plain plan is correct.
			"SET use_top_k_dynamic_filtering = 0",
			"SET " + projectionFiltering + " = 0",
		} {
			if _, err := conn.query(set, "TabSeparated"); err != nil {
				e.closeConns()
				return nil, fmt.Errorf("configure embedded clickhouse: %w", err)
			}
		}
		e.conns <- pc
	}
	embeddedOpen = true
	return e, nil
}

// lockDir takes an exclusive flock on dir/tokenpath.lock: one process owns
// the engine's files, a second one gets a clear error instead of corruption.
// The kernel drops the lock when the process dies, even on SIGKILL.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "tokenpath.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another Tokenpath process (pid %s); stop it or choose another TOKENPATH_DATA_DIR",
			dir, strings.TrimSpace(string(owner)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

func (e *embedded) run(ctx context.Context, sql, format string) ([]byte, error) {
	if !isInteractive(ctx) {
		select {
		case e.background <- struct{}{}:
			defer func() { <-e.background }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var pc *pooledConn
	select {
	case pc = <-e.conns:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.runOn(ctx, pc, sql, format)
}

// runOn runs a statement on a connection taken from the pool, and gives it
// back.
func (e *embedded) runOn(ctx context.Context, pc *pooledConn, sql, format string) ([]byte, error) {
	pc.runningSince.Store(time.Now().UnixNano())
	defer func() { pc.runningSince.Store(0); e.conns <- pc }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, err := pc.conn.query(sql, format)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %s", strings.TrimSpace(err.Error()))
	}
	return out, nil
}

// ping checks the engine answers, on an idle connection. With none idle,
// a statement that started recently proves it alive — unless every one
// has run past the longest a statement may, which is a wedged engine.
// Queueing behind a busy ingest would make a readiness probe time out and
// flap while the engine is working as it should.
func (e *embedded) ping(ctx context.Context) error {
	select {
	case pc := <-e.conns:
		_, err := e.runOn(ctx, pc, "SELECT 1", "TabSeparated")
		return err
	default:
	}
	limit := time.Duration(e.maxExec+10) * time.Second
	if e.maxExec <= 0 {
		limit = 5 * time.Minute
	}
	shortest := time.Duration(-1)
	for _, pc := range e.all {
		if since := pc.runningSince.Load(); since != 0 {
			if busy := time.Since(time.Unix(0, since)); shortest < 0 || busy < shortest {
				shortest = busy
			}
		}
	}
	switch {
	case shortest < 0: // a connection came back meanwhile
		_, err := e.run(ctx, "SELECT 1", "TabSeparated")
		return err
	case shortest >= limit:
		return fmt.Errorf("embedded clickhouse has run every connection's statement for %s or more", shortest.Round(time.Second))
	}
	return nil
}

func (e *embedded) exec(ctx context.Context, sql string) error {
	_, err := e.run(ctx, sql, "TabSeparated")
	return err
}

func (e *embedded) query(ctx context.Context, sql string) (*Result, error) {
	out, err := e.run(ctx, sql, rowBinaryFormat)
	if err != nil {
		return nil, err
	}
	res, err := decodeRowBinary(out)
	if !errors.Is(err, errUnsupportedType) {
		return res, err
	}
	// A rare type: ask again in the slower, universal text form.
	if out, err = e.run(ctx, sql, "JSONCompact"); err != nil {
		return nil, err
	}
	return decodeJSONCompact(out)
}

// insert writes the batch as a Native file and lets the engine read it:
// chdb_query takes C strings, so binary data cannot travel inline. A batch
// of pre-encoded blocks is written as it is: a Native file may hold many
// blocks, and the insert squashes them into large ones.
func (e *embedded) insert(ctx context.Context, b *Batch) error {
	path := b.nativeFile
	if path == "" {
		path = filepath.Join(e.dir, "tmp", fmt.Sprintf("insert-%d-%d%s", os.Getpid(), e.seq.Add(1), stageSuffix))
		if err := writeNative(path, b); err != nil {
			return fmt.Errorf("stage insert: %w", err)
		}
		defer os.Remove(path)
	}
	cols := make([]string, len(b.Columns))
	for i, c := range b.Columns {
		cols[i] = c.Name
	}
	list := strings.Join(cols, ", ")
	// pread, not the engine's default mmap for file(): a mapped stage's
	// pages count in the process's RSS for the whole insert (a 300k-span
	// stage is ~450 MiB).
	sql, err := Bind("INSERT INTO "+b.Table+" ("+list+") SELECT "+list+" FROM file(?, 'Native') SETTINGS optimize_on_insert = 0, storage_file_read_method = 'pread'", path)
	if err != nil {
		return err
	}
	return e.exec(ctx, sql)
}

func writeNative(path string, b *Batch) error {
	if b.native == nil {
		data, err := b.encodeNative()
		if err != nil {
			return err
		}
		return os.WriteFile(path, data, 0o600)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for _, blk := range b.native {
		if _, err := f.Write(blk); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func (e *embedded) close() error {
	embeddedMu.Lock()
	defer embeddedMu.Unlock()
	for range e.all {
		<-e.conns // wait for the running statements
	}
	e.closeConns()
	embeddedOpen = false
	return nil
}

// closeConns closes every connection opened and releases the data dir.
func (e *embedded) closeConns() {
	for _, pc := range e.all {
		pc.conn.close()
	}
	e.all = nil
	if e.lock != nil {
		e.lock.Close()
		e.lock = nil
	}
}
