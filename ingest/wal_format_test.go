package ingest

import (
	"bytes"
	"context"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// walV1Segment is a segment written by the log before payloads were
// compressed (record version 1, "TPW1"; commit 9be35f8): a 2-span trace
// export, otlptest.Traces(41, 2, v1Time), and a JSON event batch, both of
// project 7, received 1 and 2 s after v1Time.
const walV1Segment = "MVdQVAEHAAAAAMqNX4Rb1xg4AQAACrUCCjkKFgoMc2VydmljZS5uYW1lEgYKBHZsbG0KHwoTc2VydmljZS5pbnN0YW5jZS5pZBIICgZ2bGxtLTAS9wESvAEKEKsAAAAAAAAAAAAAAAAAACkSCAAAAAAAAAABKgtsbG1fcmVxdWVzdDACOQAA8yOEW9cYQQCj1DWEW9cYSh8KFGdlbl9haS5yZXF1ZXN0Lm1vZGVsEgcKBWxsYW1hSikKHGdlbl9haS5sYXRlbmN5LnRpbWVfaW5fcXVldWUSCSGamZmZmZnJP0oxCiRnZW5fYWkubGF0ZW5jeS50aW1lX2luX21vZGVsX3ByZWZpbGwSCSGamZmZmZmpPxI2ChCrAAAAAAAAAAAAAAAAAAApEggAAAAAAAAAAioEd29yazABOUBCAiSEW9cYQUDl4zWEW9cY8iW+vTFXUFQEBwAAAACUKJuEW9cYXwAAAFt7IlByb2plY3RJRCI6NywiVGltZSI6IjIwMjYtMDktMjFUMTQ6MTM6MjBaIiwiS2luZCI6InNjYWxlIiwiU2VydmljZSI6InZsbG0iLCJTb3VyY2UiOiJrZWRhIn1drQ7odA=="

var v1Time = time.Unix(1_790_000_000, 0).UTC()

const v1Events = `[{"ProjectID":7,"Time":"2026-09-21T14:13:20Z","Kind":"scale","Service":"vllm","Source":"keda"}]`

func writeV1Segment(t *testing.T, dir string, seq int) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(walV1Segment)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	w := &WAL{dir: dir}
	path := w.segPath(uint64(seq))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadSegmentVersion1: a segment left by the previous record format
// reads back record for record, and cut short it keeps what is whole.
func TestReadSegmentVersion1(t *testing.T) {
	body, err := proto.Marshal(otlptest.Traces(41, 2, v1Time))
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{Kind: KindTraces, ProjectID: 7, Received: v1Time.Add(time.Second), Payload: body},
		{Kind: KindEvents, ProjectID: 7, Received: v1Time.Add(2 * time.Second), Payload: []byte(v1Events)},
	}
	path := writeV1Segment(t, t.TempDir(), 1)
	got, err := ReadSegment(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records from the version 1 segment, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Kind != w.Kind || g.ProjectID != w.ProjectID || !g.Received.Equal(w.Received) || !bytes.Equal(g.Payload, w.Payload) {
			t.Errorf("record %d: kind %d project %d received %v payload %d bytes; want kind %d project %d received %v payload %d bytes (equal: %v)",
				i+1, g.Kind, g.ProjectID, g.Received, len(g.Payload), w.Kind, w.ProjectID, w.Received, len(w.Payload), bytes.Equal(g.Payload, w.Payload))
		}
	}
	whole, _ := os.ReadFile(path)
	if err := os.WriteFile(path, whole[:len(whole)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadSegment(path); len(got) != 1 || got[0].Kind != KindTraces {
		t.Errorf("version 1 segment torn in its last record: read %d records, want the first", len(got))
	}
}

// TestPipelineReplaysVersion1Segment: after an upgrade, a segment the
// previous version acknowledged but never flushed reaches ClickHouse.
func TestPipelineReplaysVersion1Segment(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	walDir := filepath.Join(dir, "wal")
	writeV1Segment(t, walDir, 3)
	// The fixture's rows are from September 2026: keep them past the
	// usual test retention of 7 days.
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: filepath.Join(dir, "clickhouse"), RetentionDays: 3650}, QuietLog)
	if err != nil {
		t.Fatalf("open embedded clickhouse: %v", err)
	}
	defer ch.Close()
	if err := ch.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	p, err := NewPipeline(walDir, ch, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wal.Close()
	// New appends go after the old segment, in the new format.
	if _, err := p.wal.Append(ctx, Record{Kind: KindEvents, ProjectID: 7, Received: v1Time, Payload: []byte("[]")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if segs, _ := p.wal.Sealed(); len(segs) != 0 {
		t.Errorf("segments left after the flush: %v", segs)
	}
	if n := count(t, ch, "SELECT count() AS n FROM spans FINAL WHERE trace_id = ?", otlptest.TraceHex(41)); n != 2 {
		t.Errorf("spans replayed from the version 1 segment: %d, want 2", n)
	}
	if n := count(t, ch, "SELECT count() AS n FROM events FINAL WHERE project_id = 7 AND kind = 'scale' AND service = 'vllm'"); n != 1 {
		t.Errorf("scale events replayed from the version 1 segment: %d, want 1", n)
	}
}

// TestWALStoresPayloadsCompressed: payloads that compress are stored as S2
// blocks and read back byte for byte; small or incompressible ones are
// stored as they are.
func TestWALStoresPayloadsCompressed(t *testing.T) {
	export, err := proto.Marshal(otlptest.Traces(5, 500, v1Time))
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	tests := []struct {
		name    string
		payload []byte
		codec   byte
		// maxSize bounds the stored record, header and checksum included.
		maxSize int
	}{
		{"500-span trace export", export, codecS2, len(export) / 3},
		{"small JSON", []byte(v1Events), codecRaw, recordHeader + len(v1Events) + 4},
		{"incompressible", random, codecRaw, recordHeader + len(random) + 4},
		{"empty", nil, codecRaw, recordHeader + 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := Record{Kind: KindTraces, ProjectID: 9, Received: v1Time, Payload: tt.payload}
			path, _ := writeTestSegment(t, t.TempDir(), []Record{rec, rec})
			seg, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(seg) < recordHeader || seg[5] != tt.codec {
				t.Fatalf("stored with codec %v, want %d", seg[5:6], tt.codec)
			}
			if len(seg) > 2*tt.maxSize {
				t.Errorf("%d-byte payload stored in %d bytes a record, want at most %d", len(tt.payload), len(seg)/2, tt.maxSize)
			}
			got, err := ReadSegment(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("read %d records, want 2", len(got))
			}
			for _, g := range got {
				if !bytes.Equal(g.Payload, tt.payload) || g.Kind != rec.Kind || g.ProjectID != rec.ProjectID || !g.Received.Equal(rec.Received) {
					t.Errorf("read back kind %d project %d received %v, payload equal: %v", g.Kind, g.ProjectID, g.Received, bytes.Equal(g.Payload, tt.payload))
				}
			}
		})
	}
}

// FuzzReadSegment: whatever a segment file holds, reading it neither panics
// nor returns a record that is not in it whole; a segment written by the
// log reads back as written, whatever follows it.
func FuzzReadSegment(f *testing.F) {
	v1, err := base64.StdEncoding.DecodeString(walV1Segment)
	if err != nil {
		f.Fatal(err)
	}
	v2 := encodeRecord(nil, Record{Kind: KindPoints, ProjectID: 3, Received: v1Time, Payload: bytes.Repeat([]byte("compressible "), 40)})
	v2 = encodeRecord(v2, Record{Kind: KindEvents, ProjectID: 4, Received: v1Time, Payload: []byte(v1Events)})
	f.Add(v1, []byte{})
	f.Add(v2, []byte("TPW2"))
	f.Add(append(v1, v2...), v2[:30])
	f.Fuzz(func(t *testing.T, seg, tail []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "wal-00000000000000000001.log")
		if err := os.WriteFile(path, append(append([]byte(nil), seg...), tail...), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadSegment(path)
		if err != nil {
			t.Fatal(err)
		}
		// Every record costs at least a version 1 header and a checksum.
		if len(got)*(recordHeaderV1+4) > len(seg)+len(tail) {
			t.Fatalf("%d records from %d bytes", len(got), len(seg)+len(tail))
		}
		// Records the log wrote, then anything: all of them come back.
		var recs []Record
		var enc []byte
		for _, r := range got {
			recs = append(recs, r)
			enc = encodeRecord(enc, r)
		}
		if err := os.WriteFile(path, append(enc, tail...), 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := ReadSegment(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(again) < len(recs) {
			t.Fatalf("re-encoded %d records, read %d back", len(recs), len(again))
		}
		for i, r := range recs {
			a := again[i]
			if a.Kind != r.Kind || a.ProjectID != r.ProjectID || !a.Received.Equal(r.Received) || !bytes.Equal(a.Payload, r.Payload) {
				t.Fatalf("record %d changed in a round trip", i+1)
			}
		}
	})
}
