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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
)

// Record is one acknowledged export as it sits in the write-ahead log.
type Record struct {
	Kind      Kind
	ProjectID uint32
	Received  time.Time
	Payload   []byte
}

// Record framing: magic, kind, project, received (unix ns), payload length,
// payload, CRC32 of everything before it. A crash mid-write leaves a torn
// tail, which the reader detects by length or checksum and drops: that
// record was never acknowledged.
const recordMagic = 0x54505731 // "TPW1"

const recordHeader = 4 + 1 + 4 + 8 + 4

func encodeRecord(dst []byte, r Record) []byte {
	var h [recordHeader]byte
	binary.LittleEndian.PutUint32(h[0:], recordMagic)
	h[4] = byte(r.Kind)
	binary.LittleEndian.PutUint32(h[5:], r.ProjectID)
	binary.LittleEndian.PutUint64(h[9:], uint64(r.Received.UnixNano()))
	binary.LittleEndian.PutUint32(h[17:], uint32(len(r.Payload)))
	start := len(dst)
	dst = append(dst, h[:]...)
	dst = append(dst, r.Payload...)
	sum := crc32.ChecksumIEEE(dst[start:])
	return binary.LittleEndian.AppendUint32(dst, sum)
}

// ReadSegment returns the complete records of a segment file, stopping at
// the first torn or corrupt one.
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
		var h [recordHeader]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return out, nil // clean end or torn header
		}
		if binary.LittleEndian.Uint32(h[0:]) != recordMagic {
			return out, nil
		}
		remaining -= recordHeader
		n := binary.LittleEndian.Uint32(h[17:])
		if int64(n)+4 > remaining {
			return out, nil
		}
		remaining -= int64(n) + 4
		body := make([]byte, int(n)+4)
		if _, err := io.ReadFull(br, body); err != nil {
			return out, nil
		}
		sum := crc32.ChecksumIEEE(h[:])
		sum = crc32.Update(sum, crc32.IEEETable, body[:n])
		if sum != binary.LittleEndian.Uint32(body[n:]) {
			return out, nil
		}
		out = append(out, Record{
			Kind:      Kind(h[4]),
			ProjectID: binary.LittleEndian.Uint32(h[5:]),
			Received:  time.Unix(0, int64(binary.LittleEndian.Uint64(h[9:]))).UTC(),
			Payload:   body[:n],
		})
	}
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
	rec  Record
	seq  chan uint64 // segment the record landed in
	errc chan error
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
	free, reserve := int64(st.Bavail)*st.Bsize, freeSpaceReserve(int64(st.Blocks)*st.Bsize)
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
	req := &appendReq{rec: rec, seq: make(chan uint64, 1), errc: make(chan error, 1)}
	select {
	case w.reqs <- req:
	case <-w.done:
		return 0, ErrWALClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	// Once queued the record will be written; wait for the fsync even if
	// the caller gave up, so the answer is never a lie. After Close the
	// loop may be gone with the request still queued: the send above can
	// win the race against done, and waiting would hang forever.
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
			buf = encodeRecord(buf, r.rec)
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
