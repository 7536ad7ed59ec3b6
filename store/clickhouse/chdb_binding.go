package clickhouse

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// libchdb is loaded lazily (not in init) so that binaries and tests that never
// open the embedded engine do not need the 500 MB library at all.
var (
	chdbOnce sync.Once
	chdbErr  error

	chdbConnect             func(argc int, argv []*byte) unsafe.Pointer
	chdbCloseConn           func(conn unsafe.Pointer)
	chdbQuery               func(conn unsafe.Pointer, query string, format string) unsafe.Pointer
	chdbDestroyQueryResult  func(result unsafe.Pointer)
	chdbResultBuffer        func(result unsafe.Pointer) unsafe.Pointer
	chdbResultLength        func(result unsafe.Pointer) uint
	chdbResultError         func(result unsafe.Pointer) string
	chdbResultRowsRead      func(result unsafe.Pointer) uint64
	chdbResultElapsedSecond func(result unsafe.Pointer) float64
)

// LibraryPath finds libchdb.so: TOKENPATH_CHDB_LIB, then CHDB_LIB_PATH, then the
// npm package under node_modules in the working directory or any parent of it
// or of the executable (so `go test ./store/...` finds the repo's copy).
func LibraryPath() (string, error) {
	for _, env := range []string{"TOKENPATH_CHDB_LIB", "CHDB_LIB_PATH"} {
		if p := os.Getenv(env); p != "" {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%s=%s: %w", env, p, err)
			}
			return p, nil
		}
	}
	const rel = "node_modules/@chdb/lib-linux-x64-gnu/libchdb.so"
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, rel)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("libchdb.so not found: run `npm ci` in the repository (package @chdb/lib-linux-x64-gnu) or set TOKENPATH_CHDB_LIB")
}

func loadChdb() error {
	chdbOnce.Do(func() {
		path, err := LibraryPath()
		if err != nil {
			chdbErr = err
			return
		}
		// The jemalloc linked into libchdb reads JE_MALLOC_CONF here, once;
		// operators set it (docs/operations.md → Memory). Tokenpath sets no
		// default.
		goSignalHandlers.save()
		lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			chdbErr = fmt.Errorf("load %s: %w", path, err)
			return
		}
		purego.RegisterLibFunc(&chdbConnect, lib, "chdb_connect")
		purego.RegisterLibFunc(&chdbCloseConn, lib, "chdb_close_conn")
		purego.RegisterLibFunc(&chdbQuery, lib, "chdb_query")
		purego.RegisterLibFunc(&chdbDestroyQueryResult, lib, "chdb_destroy_query_result")
		purego.RegisterLibFunc(&chdbResultBuffer, lib, "chdb_result_buffer")
		purego.RegisterLibFunc(&chdbResultLength, lib, "chdb_result_length")
		purego.RegisterLibFunc(&chdbResultError, lib, "chdb_result_error")
		purego.RegisterLibFunc(&chdbResultRowsRead, lib, "chdb_result_rows_read")
		purego.RegisterLibFunc(&chdbResultElapsedSecond, lib, "chdb_result_elapsed")
	})
	return chdbErr
}

// chdbConn is one engine connection. chdb_connect returns a pointer to the
// connection handle; chdb_query takes the handle itself.
type chdbConn struct {
	handlePtr unsafe.Pointer
}

func openChdb(args []string) (*chdbConn, error) {
	if err := loadChdb(); err != nil {
		return nil, err
	}
	argv := make([]*byte, 0, len(args)+1)
	for _, a := range append([]string{"clickhouse"}, args...) {
		b := append([]byte(a), 0)
		argv = append(argv, &b[0])
	}
	h := chdbConnect(len(argv), argv)
	goSignalHandlers.restore() // see signals.go
	if h == nil {
		return nil, errors.New("chdb_connect returned no connection (see the engine log above)")
	}
	return &chdbConn{handlePtr: h}, nil
}

func (c *chdbConn) close() {
	if c.handlePtr != nil {
		chdbCloseConn(c.handlePtr)
		c.handlePtr = nil
	}
}

// query runs one statement and returns the formatted output bytes (copied).
func (c *chdbConn) query(sql, format string) ([]byte, error) {
	if c.handlePtr == nil {
		return nil, errors.New("embedded clickhouse is closed")
	}
	handle := *(*unsafe.Pointer)(c.handlePtr)
	res := chdbQuery(handle, sql, format)
	if res == nil {
		return nil, errors.New("chdb_query returned no result")
	}
	defer chdbDestroyQueryResult(res)
	if msg := chdbResultError(res); msg != "" {
		return nil, errors.New(msg)
	}
	n := chdbResultLength(res)
	if n == 0 {
		return nil, nil
	}
	buf := chdbResultBuffer(res)
	out := make([]byte, n)
	copy(out, unsafe.Slice((*byte)(buf), n))
	return out, nil
}
