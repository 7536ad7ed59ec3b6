package ingest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/s2"
)

// Kind says what a write-ahead log record holds.
type Kind uint8

// Record kinds. OTLP kinds hold the export request as protobuf; the others
// hold JSON-encoded telemetry rows.
const (
	KindTraces  Kind = 1
	KindMetrics Kind = 2
	KindLogs    Kind = 3
	KindEvents  Kind = 4 // []telemetry.Event from the events webhook
	KindPoints  Kind = 5 // []telemetry.MetricPoint from the Prometheus scraper
	KindScrape  Kind = 6 // scrapeRecord: a scrape's points and histograms
)

// Record is one acknowledged export as it sits in the write-ahead log.
type Record struct {
	Kind      Kind
	ProjectID uint32
	Received  time.Time
	Payload   []byte
}

// Record framing, version 2: magic, kind, codec, project, received (unix
// ns), stored payload length, stored payload, CRC32 of everything before it.
// The stored payload is the record's payload as codec says (S2 block or
// raw). A crash mid-write leaves a torn tail, which the reader detects by
// length, checksum or a payload that does not decode, and drops: that
// record was never acknowledged.
//
// Version 1 (magic "TPW1", written before payloads were compressed) has no
// codec byte and a raw payload; segments left by it still replay.
const (
	recordMagicV1 = 0x54505731 // "TPW1"
	recordMagic   = 0x54505732 // "TPW2"
)

const (
	recordHeaderV1 = 4 + 1 + 4 + 8 + 4
	recordHeader   = 4 + 1 + 1 + 4 + 8 + 4
)

// Payload codecs of a version 2 record.
const (
	codecRaw = 0
	// codecS2: an S2 block (klauspost/compress/s2). The ingest bench's
	// 1000-span exports (~1 MB of protobuf) shrink 6.8× at 0.35 µs of CPU
	// per span (0.17 to decompress); zstd's fastest level gets 9.4× for
	// 1.5 µs, gzip level 1 7.4× for 1.9 µs. BenchmarkWALCodecs' export:
	// S2 4.4×, zstd 14×, at the same relative costs. Once a group is a
	// few hundred KB its fsync no longer grows with its size, and ingest
	// is short of CPU, not disk: S2.
	codecS2 = 1
)

// minCompress: smaller payloads are stored raw (a tiny JSON event batch
// gains nothing worth a codec round trip).
const minCompress = 256

// maxDecodedPayload bounds what a stored payload may claim to decompress
// to, so a corrupt record cannot make replay allocate without limit; larger
// payloads are stored raw, so no record the log wrote is refused.
const maxDecodedPayload = 1 << 30

// encodeRecord appends rec in the current framing to dst, its payload
// compressed when that makes it smaller. Payloads come decompressed even
// when an exporter sent gzip (the receivers inflate while reading): keeping
// the wire's gzip bytes would save S2's 0.35 µs per span but cost 1.9 µs
// of inflating at replay and a second copy of every body in the receivers.
func encodeRecord(dst []byte, r Record) []byte {
	start := len(dst)
	dst = slices.Grow(dst, recordHeader+s2.MaxEncodedLen(len(r.Payload))+4)
	dst = dst[:start+recordHeader]
	h := dst[start:]
	binary.LittleEndian.PutUint32(h[0:], recordMagic)
	h[4] = byte(r.Kind)
	binary.LittleEndian.PutUint32(h[6:], r.ProjectID)
	binary.LittleEndian.PutUint64(h[10:], uint64(r.Received.UnixNano()))
	codec := byte(codecRaw)
	if len(r.Payload) >= minCompress && len(r.Payload) <= maxDecodedPayload {
		// Room for the worst case was reserved above, so S2 writes into
		// dst's spare capacity and the append below copies nothing.
		if c := s2.Encode(dst[len(dst):cap(dst)], r.Payload); len(c) < len(r.Payload) {
			codec = codecS2
			dst = append(dst, c...)
		}
	}
	if codec == codecRaw {
		dst = append(dst, r.Payload...)
	}
	h[5] = codec
	binary.LittleEndian.PutUint32(h[18:], uint32(len(dst)-start-recordHeader))
	sum := crc32.ChecksumIEEE(dst[start:])
	return binary.LittleEndian.AppendUint32(dst, sum)
}

// ReadSegment returns the complete records of a segment file, stopping at
// the first torn or corrupt one. It reads both record versions.
func ReadSegment(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// remaining bounds a record's claimed length: a torn or corrupt length
	// field must not make replay allocate up to a gigabyte.
	remaining := fi.Size()
	br := bufio.NewReaderSize(f, 1<<20)
	var out []Record
	for {
		rec, n, ok := readRecord(br, remaining)
		if !ok {
			return out, nil // clean end, or a torn or corrupt record
		}
		remaining -= n
		out = append(out, rec)
	}
}

// readRecord reads one record of either version; ok is false at the end of
// the segment or at a torn or corrupt record. n is the bytes it took.
func readRecord(br *bufio.Reader, remaining int64) (rec Record, n int64, ok bool) {
	var h [recordHeader]byte
	if _, err := io.ReadFull(br, h[:4]); err != nil {
		return Record{}, 0, false
	}
	var hdr []byte
	switch binary.LittleEndian.Uint32(h[0:]) {
	case recordMagicV1:
		hdr = h[:recordHeaderV1]
	case recordMagic:
		hdr = h[:recordHeader]
	default:
		return Record{}, 0, false
	}
	if _, err := io.ReadFull(br, hdr[4:]); err != nil {
		return Record{}, 0, false
	}
	// Version 1 has no codec byte: its fields sit one byte earlier.
	codec, f := byte(codecRaw), hdr[5:]
	if len(hdr) == recordHeader {
		codec, f = hdr[5], hdr[6:]
	}
	size := binary.LittleEndian.Uint32(f[12:])
	n = int64(len(hdr)) + int64(size) + 4
	if n > remaining {
		return Record{}, 0, false
	}
	body := make([]byte, int(size)+4)
	if _, err := io.ReadFull(br, body); err != nil {
		return Record{}, 0, false
	}
	sum := crc32.ChecksumIEEE(hdr)
	sum = crc32.Update(sum, crc32.IEEETable, body[:size])
	if sum != binary.LittleEndian.Uint32(body[size:]) {
		return Record{}, 0, false
	}
	payload := body[:size]
	switch codec {
	case codecRaw:
	case codecS2:
		// The checksum matched, so this is what was written; a payload
		// that still does not decode is treated as corrupt all the same.
		dl, err := s2.DecodedLen(payload)
		if err != nil || dl > maxDecodedPayload {
			return Record{}, 0, false
		}
		if payload, err = s2.Decode(make([]byte, dl), payload); err != nil {
			return Record{}, 0, false
		}
	default:
		return Record{}, 0, false
	}
	return Record{
		Kind:      Kind(hdr[4]),
		ProjectID: binary.LittleEndian.Uint32(f[0:]),
		Received:  time.Unix(0, int64(binary.LittleEndian.Uint64(f[4:]))).UTC(),
		Payload:   payload,
	}, n, true
}

// WAL is a segmented, group-committed write-ahead log. Append returns once
// the record is fsynced, so an acknowledged export survives SIGKILL; many
// concurrent appends share one fsync.
type WAL struct {
	dir  string
	reqs chan *appendReq
	done chan struct{}
	// exited closes when commitLoop has returned: a request it has not
	// answered by then was never written.
	exited chan struct{}
	mu     sync.Mutex // guards cur, seq, size, broken
	cur    *os.File
	seq    uint64
	size   int64
	// broken: the current segment could not be (re)opened; the next
	// append retries, so a full disk heals without a restart.
	broken bool
	close  sync.Once
	// onSync, when set, is told how long each group commit's write and
	// fsync took: an export's acknowledgement waits for one.
	onSync func(time.Duration)
}

type appendReq struct {
	enc  *[]byte     // the encoded record (encodeRecord), from encodedPool
	seq  chan uint64 // segment the record landed in
	errc chan error
}

// encodedPool recycles encoded-record buffers: a compressed 1000-span
// export is ~150 KB, and dozens arrive a second.
var encodedPool sync.Pool

// maxPooledRecord: larger buffers are left to the collector rather than
// kept for exports that rarely need them.
const maxPooledRecord = 4 << 20

func getEncoded() *[]byte {
	if b, ok := encodedPool.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

func putEncoded(b *[]byte) {
	if cap(*b) <= maxPooledRecord {
		*b = (*b)[:0]
		encodedPool.Put(b)
	}
}

// Segment is a sealed log file waiting to be written to ClickHouse.
type Segment struct {
	Seq  uint64
	Path string
}

// ErrWALClosed is returned by Append after Close.
var ErrWALClosed = errors.New("write-ahead log is closed")

// ErrDiskFull is returned by Append when writing would leave the log's file
// system with less than its reserve (see freeSpaceReserve); retry later.
var ErrDiskFull = errors.New("disk almost full")

// freeSpaceReserve is what the log leaves free on its file system: 5 % of
// it, at most 1 GiB. The embedded ClickHouse shares the data dir, and a
// merge that runs out of space mid-write can commit a corrupt part (seen
// with chDB: an empty skip-index marks file, the part dropped at the next
// start), so exports are refused before the disk is full rather than after.
func freeSpaceReserve(size int64) int64 { return min(size/20, 1<<30) }

// checkFree fails with ErrDiskFull when n more bytes would eat into the
// reserve of dir's file system. A failing statfs lets the write decide.
func checkFree(dir string, n int) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil
	}
	free, reserve := int64(st.Bavail)*int64(st.Bsize), freeSpaceReserve(int64(st.Blocks)*int64(st.Bsize)) // Bsize is uint32 on darwin
	if free-int64(n) < reserve {
		return fmt.Errorf("%w: %.1f MiB free in %s, Tokenpath keeps %.1f MiB free for its database; free some space",
			ErrDiskFull, float64(free)/(1<<20), dir, float64(reserve)/(1<<20))
	}
	return nil
}

// OpenWAL opens dir; existing segments are left sealed for replay and new
// appends go to a fresh segment.
func OpenWAL(dir string) (*WAL, error) { return openWAL(dir, nil) }

// openWAL is OpenWAL reporting each group commit's duration to onSync.
func openWAL(dir string, onSync func(time.Duration)) (*WAL, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create wal dir: %w", err)
	}
	w := &WAL{dir: dir, reqs: make(chan *appendReq, 1024), done: make(chan struct{}), exited: make(chan struct{}), onSync: onSync}
	segs, err := w.Sealed()
	if err != nil {
		return nil, err
	}
	if len(segs) > 0 {
		w.seq = segs[len(segs)-1].Seq
	}
	if err := w.openNext(); err != nil {
		return nil, err
	}
	go w.commitLoop()
	return w, nil
}

func (w *WAL) segPath(seq uint64) string {
	return filepath.Join(w.dir, fmt.Sprintf("wal-%020d.log", seq))
}

func (w *WAL) openNext() error {
	w.seq++
	f, err := os.OpenFile(w.segPath(w.seq), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("open wal segment: %w", err)
	}
	w.cur, w.size = f, 0
	// Make the new file's directory entry durable too.
	if d, err := os.Open(w.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Append writes rec durably and returns the segment it is in.
func (w *WAL) Append(ctx context.Context, rec Record) (uint64, error) {
	// Encode (and compress) here, in the caller's goroutine: concurrent
	// exports compress in parallel, and the single commit loop only copies
	// the bytes it writes.
	enc := getEncoded()
	*enc = encodeRecord(*enc, rec)
	req := &appendReq{enc: enc, seq: make(chan uint64, 1), errc: make(chan error, 1)}
	select {
	case w.reqs <- req:
	case <-w.done:
		putEncoded(enc)
		return 0, ErrWALClosed
	case <-ctx.Done():
		putEncoded(enc)
		return 0, ctx.Err()
	}
	// Once queued the record will be written; wait for the fsync even if
	// the caller gave up, so the answer is never a lie. After Close the
	// loop may be gone with the request still queued: the send above can
	// win the race against done, and waiting would hang forever.
	// The loop is done with enc once it answers or has returned.
	defer putEncoded(enc)
	select {
	case err := <-req.errc:
		return <-req.seq, err
	case <-w.exited:
		select {
		case err := <-req.errc: // answered just before the loop returned
			return <-req.seq, err
		default:
			return 0, ErrWALClosed
		}
	}
}

func (w *WAL) commitLoop() {
	defer close(w.exited)
	var buf []byte
	for {
		var first *appendReq
		select {
		case first = <-w.reqs:
		case <-w.done:
			return
		}
		group := []*appendReq{first}
	drain:
		for len(group) < 4096 {
			select {
			case r := <-w.reqs:
				group = append(group, r)
			default:
				break drain
			}
		}
		buf = buf[:0]
		for _, r := range group {
			buf = append(buf, *r.enc...)
		}
		if err := checkFree(w.dir, len(buf)); err != nil {
			for _, r := range group {
				r.seq <- 0
				r.errc <- err
			}
			continue
		}
		w.mu.Lock()
		if w.broken {
			// The last write failed and no new segment could be opened
			// (disk full, read-only dir): try again now, so ingest recovers
			// by itself when space returns.
			if err := w.openNext(); err != nil {
				w.mu.Unlock()
				for _, r := range group {
					r.seq <- 0
					r.errc <- fmt.Errorf("write-ahead log unavailable: %w", err)
				}
				continue
			}
			w.broken = false
		}
		seq := w.seq
		if w.cur == nil {
			w.mu.Unlock()
			for _, r := range group {
				r.seq <- 0
				r.errc <- ErrWALClosed
			}
			continue
		}
		t0 := time.Now()
		_, err := w.cur.Write(buf)
		if err == nil {
			err = w.cur.Sync()
		}
		if w.onSync != nil {
			w.onSync(time.Since(t0))
		}
		if err == nil {
			w.size += int64(len(buf))
		} else {
			// A partial write may have left a torn record; start a new
			// segment so later records are not hidden behind it.
			err = fmt.Errorf("write-ahead log: %w", err)
			_ = w.cur.Close()
			if oerr := w.openNext(); oerr != nil {
				err = errors.Join(err, oerr)
				w.broken = true
			}
		}
		w.mu.Unlock()
		for _, r := range group {
			r.seq <- seq
			r.errc <- err
		}
	}
}

// Rotate seals the current segment (when it holds anything) and returns the
// sequence number of the newest sealed segment.
func (w *WAL) Rotate() (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rotateLocked()
}

// RotateIf seals the current segment if it is seq: of the writers that
// find seq full, only the first seals it.
func (w *WAL) RotateIf(seq uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seq != seq {
		return nil
	}
	_, err := w.rotateLocked()
	return err
}

func (w *WAL) rotateLocked() (uint64, error) {
	if w.size == 0 || w.broken {
		return w.seq - 1, nil
	}
	if err := w.cur.Close(); err != nil {
		return 0, err
	}
	sealed := w.seq
	if err := w.openNext(); err != nil {
		w.broken = true
		return sealed, err
	}
	return sealed, nil
}

// Sealed lists the sealed segments in order (the current one excluded).
func (w *WAL) Sealed() ([]Segment, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	cur := w.seq
	open := w.cur != nil
	w.mu.Unlock()
	var out []Segment
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "wal-") || !strings.HasSuffix(name, ".log") {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "wal-"), ".log"), 10, 64)
		if err != nil || (open && seq == cur) {
			continue
		}
		out = append(out, Segment{Seq: seq, Path: filepath.Join(w.dir, name)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// Remove deletes a segment whose rows are safely in ClickHouse.
func (w *WAL) Remove(s Segment) error {
	return os.Remove(s.Path)
}

// Close stops accepting appends and closes the current segment.
func (w *WAL) Close() error {
	w.close.Do(func() { close(w.done) })
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur != nil {
		err := w.cur.Close()
		w.cur = nil
		return err
	}
	return nil
}
