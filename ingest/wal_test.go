package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// writeSegment appends recs to a fresh WAL in dir, seals the segment and
// returns its path and each record's encoded size.
func writeTestSegment(t *testing.T, dir string, recs []Record) (string, []int) {
	t.Helper()
	w, err := OpenWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, r := range recs {
		if _, err := w.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(encodeRecord(nil, r)))
	}
	seq, err := w.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.segPath(seq), sizes
}

// testRecords are n records whose payloads compress (a run of zeros), so
// they are stored as S2 blocks.
func testRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Kind: KindPoints, ProjectID: uint32(i + 1), Received: time.Unix(1_790_000_000+int64(i), 5).UTC(),
			Payload: []byte(fmt.Sprintf(`[{"record":%d,"pad":"%0*d"}]`, i, 300*(i+1), 0))}
	}
	return recs
}

// resum recomputes the checksum of the record at off, size bytes long, so a
// change to it passes the checksum and must be caught by what follows.
func resum(seg []byte, off, size int) {
	end := off + size - 4
	binary.LittleEndian.PutUint32(seg[end:], crc32.ChecksumIEEE(seg[off:end]))
}

func payloads(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d/%d/%d/%s", r.Kind, r.ProjectID, r.Received.UnixNano(), r.Payload))
	}
	return out
}

// TestReadSegmentDamage: a crash mid-write leaves a torn tail; replay keeps
// every complete record before the damage and nothing after it.
func TestReadSegmentDamage(t *testing.T) {
	recs := testRecords(3)
	path, sizes := writeTestSegment(t, t.TempDir(), recs)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) != sizes[0]+sizes[1]+sizes[2] {
		t.Fatalf("segment is %d bytes, want %d", len(whole), sizes[0]+sizes[1]+sizes[2])
	}
	second := sizes[0] // offset of record 2
	third := sizes[0] + sizes[1]
	for i, off := range []int{0, second, third} {
		if whole[off+5] != codecS2 {
			t.Fatalf("record %d stored with codec %d, want S2 (%d): the cases below would not test compressed records", i+1, whole[off+5], codecS2)
		}
	}
	flip := func(off int) []byte {
		b := append([]byte(nil), whole...)
		b[off] ^= 0x40
		return b
	}
	hugeLen := append([]byte(nil), whole...)
	binary.LittleEndian.PutUint32(hugeLen[third+18:], 1<<30-1) // claims ~1 GiB
	// Damage that the checksum cannot see (it is recomputed): the reader
	// must still stop at record 2 rather than return a wrong payload.
	resummed := func(change func(rec []byte)) []byte {
		b := append([]byte(nil), whole...)
		change(b[second:third])
		resum(b, second, sizes[1])
		return b
	}
	garbledBlock := resummed(func(rec []byte) {
		for i := recordHeader + 2; i < len(rec)-4; i++ {
			rec[i] = 0xff
		}
	})
	unknownCodec := resummed(func(rec []byte) { rec[5] = 9 })
	hugeDecoded := resummed(func(rec []byte) {
		// The S2 block starts with its decoded length as a uvarint:
		// claim 2 GiB. Only the first 5 bytes change; the block is
		// then shorter than it says.
		copy(rec[recordHeader:], binary.AppendUvarint(nil, 2<<30))
	})

	tests := []struct {
		name string
		data []byte
		want int
	}{
		{"intact", whole, 3},
		{"torn in the last payload", whole[:len(whole)-7], 2},
		{"torn in the last checksum", whole[:len(whole)-2], 2},
		{"torn in the last header", whole[:third+9], 2},
		{"torn right after a record", whole[:third], 2},
		{"corrupt payload byte in record 2", flip(second + recordHeader + 3), 1},
		{"corrupt checksum of record 2", flip(third - 1), 1},
		{"corrupt kind of record 2", flip(second + 4), 1},
		{"bad magic in record 1", flip(0), 0},
		{"length beyond the file", hugeLen, 2},
		{"compressed payload that does not decode", garbledBlock, 1},
		{"unknown codec", unknownCodec, 1},
		{"compressed payload claiming 2 GiB decoded", hugeDecoded, 1},
		{"empty file", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "wal-00000000000000000001.log")
			if err := os.WriteFile(p, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := ReadSegment(p)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(payloads(got)) != fmt.Sprint(payloads(recs[:tt.want])) {
				t.Errorf("read %d records %v, want the first %d", len(got), payloads(got), tt.want)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("reading a %d-byte segment allocated %d MiB", len(tt.data), grew>>20)
			}
		})
	}
}

// TestWALGroupCommit: concurrent appends each come back with the segment
// they landed in, and all of them are in it.
func TestWALGroupCommit(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const n = 300
	var wg sync.WaitGroup
	seqs := make([]uint64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := w.Append(context.Background(), Record{Kind: KindEvents, ProjectID: uint32(i), Received: time.Unix(0, int64(i)), Payload: []byte{byte(i)}})
			if err != nil {
				t.Error(err)
			}
			seqs[i] = seq
		}()
	}
	wg.Wait()
	sealed, err := w.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if s != sealed {
			t.Fatalf("append %d landed in segment %d, sealed %d", i, s, sealed)
		}
	}
	recs, err := ReadSegment(w.segPath(sealed))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for _, r := range recs {
		seen[r.ProjectID] = true
	}
	if len(recs) != n || len(seen) != n {
		t.Fatalf("segment holds %d records (%d distinct), want %d", len(recs), len(seen), n)
	}
	segs, err := w.Sealed()
	if err != nil || len(segs) != 1 || segs[0].Seq != sealed {
		t.Fatalf("sealed segments %v, %v; want just %d", segs, err, sealed)
	}
}

// TestWALAppendAfterClose: an append racing with or following Close must
// fail, never hang (the queued request used to wait forever for a commit
// loop that had already returned).
func TestWALAppendAfterClose(t *testing.T) {
	for i := range 200 {
		w, err := OpenWAL(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := w.Append(context.Background(), Record{Kind: KindEvents, Payload: []byte("x")})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrWALClosed) {
				t.Fatalf("attempt %d: append after close: err = %v, want ErrWALClosed", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("attempt %d: append after close hangs", i)
		}
	}
}

// TestWALReopenKeepsSegments: segments left by a previous process are
// listed as sealed, in order, and new appends go to a later segment.
func TestWALReopenKeepsSegments(t *testing.T) {
	dir := t.TempDir()
	first, _ := writeTestSegment(t, dir, testRecords(2))
	w, err := OpenWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	segs, err := w.Sealed()
	if err != nil {
		t.Fatal(err)
	}
	// The first process's empty current segment is sealed too.
	if len(segs) != 2 || segs[0].Path != first {
		t.Fatalf("sealed after reopen: %v, want %s first", segs, first)
	}
	seq, err := w.Append(context.Background(), testRecords(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if seq <= segs[len(segs)-1].Seq {
		t.Fatalf("new append in segment %d, not after the old ones (%v)", seq, segs)
	}
}
