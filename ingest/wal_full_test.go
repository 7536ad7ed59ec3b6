package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A segment that cannot be opened (here: its name is taken by a directory,
// the same failure a full disk or read-only dir gives) fails appends with a
// clear error instead of acknowledging them, and the log heals by itself
// once the path is usable again.
func TestWALRecoversWhenSegmentCannotOpen(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	rec := Record{Kind: KindEvents, ProjectID: 1, Received: time.Now(), Payload: []byte(`[]`)}
	if _, err := w.Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	// Block the next segment's file name, then force a rotation.
	w.mu.Lock()
	next := w.segPath(w.seq + 1)
	w.mu.Unlock()
	if err := os.Mkdir(next, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Rotate(); err == nil {
		t.Fatal("rotation into a blocked segment succeeded")
	}
	// The next append retries and opens the following segment, which is free.
	if _, err := w.Append(ctx, rec); err != nil {
		t.Fatalf("append after a failed rotation did not heal: %v", err)
	}
	// Block every plausible next name, as a full disk would.
	w.mu.Lock()
	for i := uint64(1); i < 50; i++ {
		_ = os.Mkdir(w.segPath(w.seq+i), 0o755)
	}
	w.broken = true
	w.mu.Unlock()
	if _, err := w.Append(ctx, rec); err == nil {
		t.Fatal("append acknowledged while no segment could be opened")
	}
	// Space returns.
	matches, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() {
			os.Remove(m)
		}
	}
	if _, err := w.Append(ctx, rec); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
	// Everything acknowledged is readable.
	if _, err := w.Rotate(); err != nil {
		t.Fatal(err)
	}
	segs, err := w.Sealed()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range segs {
		recs, err := ReadSegment(s.Path)
		if err != nil {
			t.Fatal(err)
		}
		n += len(recs)
	}
	if n != 3 {
		t.Fatalf("acknowledged records readable: %d, want 3", n)
	}
}

// The log refuses a write that would eat into the free-space reserve with
// ErrDiskFull, saying how much is free and kept, and accepts one that fits.
func TestWALKeepsFreeSpaceReserve(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free, reserve := int64(st.Bavail)*st.Bsize, freeSpaceReserve(int64(st.Blocks)*st.Bsize)
	if reserve <= 0 || reserve > 1<<30 {
		t.Fatalf("reserve %d bytes for a %d-byte file system; want 5 %%, at most 1 GiB", reserve, int64(st.Blocks)*st.Bsize)
	}
	// Half the reserve into it, not one byte: other tests share this file
	// system and free space between the two reads of it (CI saw a 1-byte
	// overshoot pass once).
	err := checkFree(dir, int(free-reserve/2))
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "MiB free in "+dir) {
		t.Errorf("a write into the reserve: %v; want ErrDiskFull naming the free space", err)
	}
	if err := checkFree(dir, 4096); err != nil {
		t.Errorf("a 4 KiB write with %d MiB free: %v (is the test machine's disk nearly full?)", free>>20, err)
	}
}
