package clickhouse

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TestSpanStage: blocks appended from several goroutines to one stage are
// stored exactly as SpansBatch stores the same spans; the file stays after
// the insert (for a retry) until Remove, and a stage a crashed process left
// is gone when the engine opens again.
func TestSpanStage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTemp(t, dir)
	trace := strings.Repeat("ef", 16)
	var st *SpanStage
	got, want, n := storedAsSpansBatch(t, s, trace, func(staged []telemetry.Span) {
		var err error
		if st, err = s.NewSpanStage(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range staged {
			blk, err := EncodeSpans(staged[i : i+1])
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if err := st.Append(blk, 1); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if st.Rows() != len(staged) {
			t.Fatalf("stage rows = %d, want %d", st.Rows(), len(staged))
		}
		b, err := st.Batch()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(ctx, b); err != nil {
			t.Fatal(err)
		}
	})
	if len(want) != n || !reflect.DeepEqual(got, want) {
		t.Errorf("spans inserted from a stage:\n got %+v\nwant %+v", got, want)
	}
	stages := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "tmp", "stage-*"))
		return m
	}
	if len(stages()) != 1 {
		t.Fatalf("stage files after the insert: %v, want the one kept for a retry", stages())
	}
	if err := st.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := st.Append([]byte{0}, 1); err == nil {
		t.Error("append to a removed stage succeeded")
	}
	if len(stages()) != 0 {
		t.Fatalf("stage files after Remove: %v", stages())
	}

	// A failed write leaves a torn block: the stage gives no batch after it.
	broken, err := s.NewSpanStage()
	if err != nil {
		t.Fatal(err)
	}
	broken.f.Close()
	if err := broken.Append([]byte{0}, 1); err == nil {
		t.Error("append to a closed file succeeded")
	}
	if _, err := broken.Batch(); err == nil {
		t.Error("a stage whose write failed gave a batch")
	}
	_ = broken.Remove() // the file is closed already
	if len(stages()) != 0 {
		t.Fatalf("stage files after removing the broken one: %v", stages())
	}

	// A crash leaves a stage behind; the next open removes it and nothing else.
	left, err := s.NewSpanStage()
	if err != nil {
		t.Fatal(err)
	}
	if err := left.Append([]byte("torn"), 1); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "tmp", "keep.native")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTemp(t, dir)
	defer s.Close()
	if len(stages()) != 0 {
		t.Errorf("a stale stage survived the restart: %v", stages())
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not a stage was removed: %v", err)
	}
	if got := traceSpansWithoutID(t, s, trace); !reflect.DeepEqual(got, want) {
		t.Errorf("after restart: %+v", got)
	}
}
