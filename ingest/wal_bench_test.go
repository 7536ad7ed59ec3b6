package ingest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// BenchmarkWALCodecs: what compressing a 1000-span trace export costs and
// saves with the codecs considered for write-ahead log payloads (S2 is
// what encodeRecord uses). ratio is raw ÷ compressed bytes.
func BenchmarkWALCodecs(b *testing.B) {
	body := receiveBenchExport(b)
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	zr, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	codecs := []struct {
		name string
		enc  func(dst, src []byte) []byte
		dec  func(dst, src []byte) ([]byte, error)
	}{
		{"s2", func(dst, src []byte) []byte { return s2.Encode(dst[:cap(dst)], src) },
			func(dst, src []byte) ([]byte, error) { return s2.Decode(dst[:cap(dst)], src) }},
		{"zstd-fastest", func(dst, src []byte) []byte { return zw.EncodeAll(src, dst[:0]) },
			func(dst, src []byte) ([]byte, error) { return zr.DecodeAll(src, dst[:0]) }},
		{"gzip-1", func(dst, src []byte) []byte {
			buf := bytes.NewBuffer(dst[:0])
			w, _ := gzip.NewWriterLevel(buf, gzip.BestSpeed)
			_, _ = w.Write(src)
			_ = w.Close()
			return buf.Bytes()
		}, func(dst, src []byte) ([]byte, error) {
			r, err := gzip.NewReader(bytes.NewReader(src))
			if err != nil {
				return nil, err
			}
			buf := bytes.NewBuffer(dst[:0])
			_, err = buf.ReadFrom(r)
			return buf.Bytes(), err
		}},
	}
	for _, c := range codecs {
		dst := make([]byte, 0, s2.MaxEncodedLen(len(body)))
		var packed []byte
		b.Run(c.name+"/compress", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				packed = c.enc(dst, body)
			}
			b.ReportMetric(float64(len(body))/float64(len(packed)), "ratio")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
		})
		packed = append([]byte(nil), c.enc(dst, body)...)
		out := make([]byte, 0, len(body))
		b.Run(c.name+"/decompress", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				got, err := c.dec(out, packed)
				if err != nil || !bytes.Equal(got, body) {
					b.Fatalf("round trip: %v", err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
		})
	}
}

// BenchmarkWALAppend: 8 concurrent exporters appending 1000-span trace
// exports, each waiting for its group commit as Submit does. walMB is what
// the log wrote per export.
func BenchmarkWALAppend(b *testing.B) {
	body := receiveBenchExport(b)
	dir := b.TempDir()
	w, err := OpenWAL(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	rec := Record{Kind: KindTraces, ProjectID: 1, Received: time.Now(), Payload: body}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if _, err := w.Append(context.Background(), rec); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := 0; i < b.N; i++ {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	if _, err := w.Rotate(); err != nil {
		b.Fatal(err)
	}
	var written int64
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	for _, s := range segs {
		if fi, err := os.Stat(s); err == nil {
			written += fi.Size()
		}
	}
	b.ReportMetric(float64(written)/float64(b.N)/(1<<20), "walMB/export")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
}
