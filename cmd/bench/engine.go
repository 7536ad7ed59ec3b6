package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// engineStats is the raw engine insert rate of the bench's spans, and what
// the Go stages before it cost per span on one core.
type engineStats struct {
	Rows  int
	Batch int
	// Insert is the server's write path in total: EncodeSpans per export
	// (Build) plus Store.Insert(SpanBlocksBatch) per batch (the staging
	// file and the engine's INSERT … SELECT FROM file()).
	Insert, Build time.Duration
	// The receiver's work per export, timed over the same rows:
	// proto.Unmarshal and normalize.Traces (the WAL keeps the bytes as
	// received, so nothing is re-encoded).
	Decode, Normalize time.Duration
	// Wire: normalize.TracesWire, the receivers' protobuf path (decode and
	// normalize in one pass over the bytes), over the same exports.
	Wire time.Duration
	// CPU time of the same stages (the machine is shared: wall time
	// includes waiting for a core). Go stages: the calling thread only;
	// InsertCPU: the whole process, i.e. the engine's threads too.
	DecodeCPU, NormalizeCPU, WireCPU, BuildCPU, InsertCPU time.Duration
	Memory                                                memStatus // bench process after the inserts
}

// threadCPU is the CPU time of the calling OS thread (lock it first).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time of the whole process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// InsertRate is rows per second through Store.Insert.
func (e engineStats) InsertRate() float64 {
	if e.Insert <= 0 {
		return 0
	}
	return float64(e.Rows) / e.Insert.Seconds()
}

func perSpan(d time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return d / time.Duration(n)
}

// measureEngine opens an embedded store in dir and inserts rows spans (the
// templates normalized as the receiver does) in batches of batch rows.
func measureEngine(ctx context.Context, dir string, templates []*traceTemplate, rows, batch int) (engineStats, error) {
	st := engineStats{Batch: batch}
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return st, fmt.Errorf("open engine: %w", err)
	}
	defer ch.Close()
	if err := ch.Migrate(ctx); err != nil {
		return st, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	seq := uint64(1) << 40 // apart from the sequence numbers the server saw
	now := time.Now()
	var buf []byte
	written := map[uint64]bool{} // resources stored, as the pipeline remembers them
	for st.Rows < rows {
		var blocks [][]byte
		var resources []telemetry.Resource
		n := 0
		for n < min(batch, rows-st.Rows) {
			seq++
			tpl := templates[seq%uint64(len(templates))]
			buf = tpl.patch(buf, seq, time.Now())
			t0, c0 := time.Now(), threadCPU()
			var req coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(buf, &req); err != nil {
				return st, err
			}
			t1, c1 := time.Now(), threadCPU()
			ref := normalize.Traces(1, &req, now, normalize.Limits{})
			tn, cn := time.Now(), threadCPU()
			res, ok := normalize.TracesWire(1, buf, now, normalize.Limits{})
			if !ok || len(res.Spans) != len(ref.Spans) {
				return st, fmt.Errorf("the wire reader did not take a bench export (ok=%v, %d spans, want %d)", ok, len(res.Spans), len(ref.Spans))
			}
			t2, c2, p2 := time.Now(), threadCPU(), processCPU()
			st.Wire += t2.Sub(tn)
			st.WireCPU += c2 - cn
			blk, err := clickhouse.EncodeSpans(res.Spans)
			if err != nil {
				return st, err
			}
			st.Decode += t1.Sub(t0)
			st.Normalize += tn.Sub(t1)
			st.Build += time.Since(t2)
			st.Insert += time.Since(t2)
			st.DecodeCPU += c1 - c0
			st.NormalizeCPU += cn - c1
			st.BuildCPU += threadCPU() - c2
			st.InsertCPU += processCPU() - p2
			blocks = append(blocks, blk)
			n += len(res.Spans)
			for _, sp := range res.Spans {
				if sp.ResourceHash != 0 && !written[sp.ResourceHash] {
					written[sp.ResourceHash] = true
					resources = append(resources, telemetry.Resource{ProjectID: sp.ProjectID, Hash: sp.ResourceHash,
						Service: sp.Service, Attributes: sp.Resource, LastSeen: sp.Start})
				}
			}
		}
		t0, p0 := time.Now(), processCPU()
		if len(resources) > 0 {
			if err := ch.Insert(ctx, clickhouse.ResourcesBatch(resources)); err != nil {
				return st, err
			}
		}
		if err := ch.Insert(ctx, clickhouse.SpanBlocksBatch(blocks, n)); err != nil {
			return st, err
		}
		st.Insert += time.Since(t0)
		st.InsertCPU += processCPU() - p0
		st.Rows += n
		if err := ctx.Err(); err != nil {
			return st, err
		}
	}
	st.Memory = readMem(os.Getpid())
	return st, nil
}
