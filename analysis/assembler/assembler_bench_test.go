package assembler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/telemetry"
)

// BenchmarkAssemblerPass times assembler passes over fresh traffic
// (TOKENPATH_BENCH_PASS_TRACES new traces of four spans per pass, default
// 2000; a pass catching up takes 50000) while spans and llm_requests
// already hold days of data: what a pass costs as retention fills up. The
// stored sizes are TOKENPATH_BENCH_STORED_SPANS (comma-separated, growing;
// default 200000), spread over the last 7 days, one assembled row per
// stored trace.
//
//	TOKENPATH_BENCH_STORED_SPANS=500000,3000000 go test -run - -bench AssemblerPass -benchtime 10x ./analysis/
func BenchmarkAssemblerPass(b *testing.B) {
	sizes := []int{200_000}
	if env := os.Getenv("TOKENPATH_BENCH_STORED_SPANS"); env != "" {
		sizes = nil
		for _, f := range splitComma(env) {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				b.Fatalf("TOKENPATH_BENCH_STORED_SPANS=%q: want positive whole numbers", env)
			}
			sizes = append(sizes, n)
		}
	}
	perPass := 2000
	if env := os.Getenv("TOKENPATH_BENCH_PASS_TRACES"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n <= 0 {
			b.Fatalf("TOKENPATH_BENCH_PASS_TRACES=%q: want a positive whole number", env)
		}
		perPass = n
	}
	a := openAssembler(b)
	a.MaxSpans = 4 * perPass
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().UTC()
	stored := 0
	for _, size := range sizes {
		t0 := time.Now()
		for stored < size {
			n := min(100_000, size-stored) / 4
			spans := make([]telemetry.Span, 0, 4*n)
			reqs := make([]telemetry.LLMRequest, 0, n)
			for range n {
				start := now.Add(-time.Duration(rng.Int64N(int64(7 * 24 * time.Hour))))
				spans = append(spans, benchTrace(rng, start)...)
				reqs = append(reqs, telemetry.LLMRequest{ProjectID: 1, TraceID: spans[len(spans)-1].TraceID, SpanID: "c1", Service: "app",
					ServerService: "vllm", Model: "llama", Start: start.Add(10 * time.Millisecond), E2E: telemetry.Ptr(1000.0)})
			}
			if err := a.CH.Insert(ctx, clickhouse.SpansBatch(spans)); err != nil {
				b.Fatal(err)
			}
			if err := a.CH.Insert(ctx, clickhouse.RequestsBatch(reqs, nil, 1)); err != nil {
				b.Fatal(err)
			}
			stored += len(spans)
		}
		// Days-old partitions are merged in a running server; merge here
		// too, so background merges do not run during the timed passes.
		for _, table := range []string{"spans", "llm_requests", "trace_bounds"} {
			if err := a.CH.Exec(ctx, "OPTIMIZE TABLE "+table+" FINAL"); err != nil && table != "trace_bounds" {
				b.Fatal(err)
			}
		}
		b.Logf("stored %d spans over 7 days in %s", stored, time.Since(t0).Round(time.Millisecond))
		if err := a.setWatermark(ctx, time.Now()); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("stored=%d", stored), func(b *testing.B) {
			var cpu time.Duration
			var live uint64
			spans := 0
			stages0 := a.times.seconds()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				fresh := make([]telemetry.Span, 0, 4*perPass)
				for range perPass {
					fresh = append(fresh, benchTrace(rng, time.Now().Add(-time.Second))...)
				}
				if err := a.CH.Insert(ctx, clickhouse.SpansBatch(fresh)); err != nil {
					b.Fatal(err)
				}
				spans += len(fresh)
				heap := watchLiveHeap()
				cpu0 := processCPU()
				b.StartTimer()
				n, err := a.Step(ctx)
				b.StopTimer()
				cpu += processCPU() - cpu0
				live = max(live, heap.stop())
				if err != nil {
					b.Fatal(err)
				}
				if n != perPass {
					b.Fatalf("pass assembled %d traces, want %d", n, perPass)
				}
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/pass")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(spans), "cpu-ns/span")
			// The pass's working set is what the collector has to keep
			// room for while receivers share the process (GOMEMLIMIT).
			b.ReportMetric(float64(live)/(1<<20), "live-MiB/pass")
			// Wall time per stage: where a pass's time goes, and which
			// stage a change moved.
			for stage, s := range a.times.seconds() {
				if ms := 1000 * (s - stages0[stage]) / float64(b.N); ms >= 0.5 {
					b.ReportMetric(ms, stage+"-ms/pass")
				}
			}
		})
	}
}

// seconds reads the time spent per stage so far.
func (p *passTimes) seconds() map[string]float64 {
	out := map[string]float64{}
	for _, stage := range passStages {
		var m dto.Metric
		if err := p.counters().WithLabelValues(stage).Write(&m); err == nil {
			out[stage] = m.GetCounter().GetValue()
		}
	}
	return out
}

// benchTrace is an app request through a gateway to vLLM: four spans.
func benchTrace(rng *rand.Rand, start time.Time) []telemetry.Span {
	trace := fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
	ms := func(n int) time.Time { return start.Add(time.Duration(n) * time.Millisecond) }
	attrs := map[string]string{"http.route": "/chat", "tenant.id": "acme", "http.method": "POST", "user.id": strconv.Itoa(rng.IntN(1000))}
	return []telemetry.Span{
		{ProjectID: 1, TraceID: trace, SpanID: "r1", Service: "app", Instance: "app-0", Name: "POST /chat", Start: start, End: ms(1200), StatusCode: "ok", Attributes: attrs},
		{ProjectID: 1, TraceID: trace, SpanID: "g1", ParentSpanID: "c1", Service: "gateway", Instance: "gw-0", Name: "POST /v1/chat/completions", Start: ms(12), End: ms(1100), StatusCode: "ok"},
		{ProjectID: 1, TraceID: trace, SpanID: "s1", ParentSpanID: "g1", Service: "vllm", Instance: "vllm-0", Name: "llm_request", Start: ms(15), End: ms(1090), StatusCode: "ok",
			LLM: telemetry.LLMCall{Role: telemetry.LLMServer, Provider: "vllm", Model: "llama", QueueTime: telemetry.Ptr(5 * time.Millisecond), ServerTTFT: telemetry.Ptr(80 * time.Millisecond)}},
		{ProjectID: 1, TraceID: trace, SpanID: "c1", ParentSpanID: "r1", Service: "app", Instance: "app-0", Name: "chat llama", Start: ms(10), End: ms(1110), StatusCode: "ok",
			LLM: telemetry.LLMCall{Role: telemetry.LLMClient, Provider: "vllm", Model: "llama", ClientTTFT: telemetry.Ptr(100 * time.Millisecond)}},
	}
}

func splitComma(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// liveHeap samples the collector's live heap (as of each cycle's mark)
// until stop, which returns its highest rise over the value at the start:
// about the most a pass held at once.
type liveHeap struct {
	done chan struct{}
	peak chan uint64
}

func watchLiveHeap() *liveHeap {
	h := &liveHeap{done: make(chan struct{}), peak: make(chan uint64)}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base := read()
	go func() {
		peak := base
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.done:
				h.peak <- max(peak, read()) - base
				return
			case <-tick.C:
				peak = max(peak, read())
			}
		}
	}()
	return h
}

func (h *liveHeap) stop() uint64 { close(h.done); return <-h.peak }

// processCPU is this process's CPU time, the embedded engine's included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
