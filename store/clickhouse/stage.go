package clickhouse

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// SpanStage is a Native file of encoded span blocks (EncodeSpans) that one
// insert reads as it is. The ingest pipeline appends each export's spans to
// its segment's stage as they are acknowledged, so spans waiting for their
// insert sit in the page cache instead of the Go heap: at full rate they
// were most of the heap (~1.5 KiB a span, up to the pending-row cap), and
// the collector and the memory limit's scavenging cost the receivers CPU.
// Append is safe for concurrent use; the stage is derived data (the
// write-ahead log holds the exports), so a failed append only means the
// segment is written from the log instead.
type SpanStage struct {
	mu   sync.Mutex
	f    *os.File
	path string
	rows int
	err  error
}

// stageSuffix names stage and insert files in the engine's tmp dir; files
// with it left by a crashed process are removed when the engine opens.
const stageSuffix = ".native"

// NewSpanStage creates an empty stage in the embedded engine's tmp dir.
func (s *Store) NewSpanStage() (*SpanStage, error) {
	e, ok := s.b.(*embedded)
	if !ok {
		return nil, errors.New("span stages need the embedded engine (Store.TakesNative)")
	}
	path := filepath.Join(e.dir, "tmp", fmt.Sprintf("stage-%d-%d%s", os.Getpid(), e.seq.Add(1), stageSuffix))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create span stage: %w", err)
	}
	return &SpanStage{f: f, path: path}, nil
}

// Append adds one block of rows spans. After a failed write the file may
// end in a torn block, so every later Append fails too.
func (st *SpanStage) Append(block []byte, rows int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	if st.f == nil {
		return errors.New("span stage is removed")
	}
	if _, err := st.f.Write(block); err != nil {
		st.err = fmt.Errorf("stage spans: %w", err)
		return st.err
	}
	st.rows += rows
	return nil
}

// Rows is how many spans the stage holds.
func (st *SpanStage) Rows() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rows
}

// Batch inserts the stage's spans (Store.Insert); the file stays until
// Remove, so a failed insert can be retried. A stage whose write failed
// has none to give.
func (st *SpanStage) Batch() (*Batch, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return nil, st.err
	}
	b := SpanBlocksBatch(nil, st.rows)
	b.nativeFile = st.path
	return b, nil
}

// Remove closes and deletes the file.
func (st *SpanStage) Remove() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.f == nil {
		return nil
	}
	cerr := st.f.Close()
	st.f = nil
	if err := os.Remove(st.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return cerr
}

// removeStaleStages deletes stage and insert files a crashed process left
// in the engine's tmp dir (the caller holds the data dir's lock): their
// rows are in the write-ahead log, which is replayed.
func removeStaleStages(tmp string) {
	entries, _ := os.ReadDir(tmp)
	for _, de := range entries {
		if n := de.Name(); de.Type().IsRegular() && strings.HasSuffix(n, stageSuffix) &&
			(strings.HasPrefix(n, "stage-") || strings.HasPrefix(n, "insert-")) {
			_ = os.Remove(filepath.Join(tmp, n))
		}
	}
}
