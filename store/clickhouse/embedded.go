package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// embedded runs statements on the in-process chDB engine. The engine runs
// one statement at a time per process, so a one-slot semaphore serializes
// them here, where waiting can honour the caller's context.
type embedded struct {
	slot    chan struct{}
	conn    *chdbConn
	dir     string
	lock    *os.File
	seq     atomic.Uint64
	maxExec int
	// runningSince is when the statement holding the slot started (unix
	// ns), 0 when idle: readiness reads it instead of queueing behind it.
	runningSince atomic.Int64
}

// The engine allows one connection per process; a second chdb_connect would
// silently replace the first, so it is refused here.
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
	conn, err := openChdb([]string{"--path=" + dir})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("start embedded clickhouse in %s: %w", dir, err)
	}
	e := &embedded{slot: make(chan struct{}, 1), conn: conn, dir: dir, lock: lock,
		maxExec: int(cfg.MaxExecutionTime.Seconds())}
	// The session keeps these for every later statement.
	for _, set := range []string{
		"SET session_timezone = 'UTC'",
		"SET max_execution_time = " + strconv.Itoa(e.maxExec),
		"SET max_query_size = " + strconv.Itoa(MaxQuerySize),
		// The engine's top-K filter mis-types Nullable(Float64) sort keys
		// ("Expected: Float64. Got: Decimal64") on ORDER BY … LIMIT
		// without FINAL (chDB 26.5); the plain plan is correct.
		"SET use_top_k_dynamic_filtering = 0",
		"SET " + projectionFiltering + " = 0",
	} {
		if _, err := conn.query(set, "TabSeparated"); err != nil {
			e.close()
			return nil, fmt.Errorf("configure embedded clickhouse: %w", err)
		}
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
	select {
	case e.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	e.runningSince.Store(time.Now().UnixNano())
	defer func() { e.runningSince.Store(0); <-e.slot }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, err := e.conn.query(sql, format)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %s", strings.TrimSpace(err.Error()))
	}
	return out, nil
}

// ping checks the engine answers. A statement running now proves it is
// alive — unless it has run past the longest a statement may, which is a
// wedged engine. Queueing behind a busy ingest would make a readiness probe
// time out and flap while the engine is working as it should.
func (e *embedded) ping(ctx context.Context) error {
	if since := e.runningSince.Load(); since != 0 {
		limit := time.Duration(e.maxExec+10) * time.Second
		if e.maxExec <= 0 {
			limit = 5 * time.Minute
		}
		busy := time.Since(time.Unix(0, since))
		if busy >= limit {
			return fmt.Errorf("embedded clickhouse has run one statement for %s", busy.Round(time.Second))
		}
		return nil
	}
	_, err := e.run(ctx, "SELECT 1", "TabSeparated")
	return err
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
	path := filepath.Join(e.dir, "tmp", fmt.Sprintf("insert-%d-%d.native", os.Getpid(), e.seq.Add(1)))
	if err := writeNative(path, b); err != nil {
		return fmt.Errorf("stage insert: %w", err)
	}
	defer os.Remove(path)
	cols := make([]string, len(b.Columns))
	for i, c := range b.Columns {
		cols[i] = c.Name
	}
	list := strings.Join(cols, ", ")
	sql, err := Bind("INSERT INTO "+b.Table+" ("+list+") SELECT "+list+" FROM file(?, 'Native') SETTINGS optimize_on_insert = 0", path)
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
	e.slot <- struct{}{} // wait for the running statement
	if e.conn != nil {
		e.conn.close()
		e.conn = nil
	}
	if e.lock != nil {
		e.lock.Close()
		e.lock = nil
	}
	embeddedOpen = false
	return nil
}
