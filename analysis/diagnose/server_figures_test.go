package diagnose

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// vLLM's request_latency_buckets and ITL buckets (vllm/v1/metrics/loggers.py).
var (
	latencyBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0}
	itlBounds     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0}
)

// histMinute buckets values (seconds) observed in one minute.
func histMinute(at time.Time, name string, bounds []float64, values []float64) HistogramBucket {
	b := stats.Buckets{Bounds: bounds, Counts: make([]float64, len(bounds)+1)}
	for _, v := range values {
		b.Counts[sort.SearchFloat64s(bounds, v)]++
	}
	return HistogramBucket{Start: at, Name: name, Buckets: b}
}

// metricsFleet is an hour of baseline and 20 minutes of window of a
// metrics-only vLLM and the app calling it; incident shapes the window.
type incident struct {
	queue, prefill, itl, clientExtra float64 // seconds added in the window
	waiting, kv                      float64
	preempt, hitRate                 float64
	scaleUp                          bool    // 0 → 1 replicas a minute into the window
	dram, tensor                     float64 // DCGM window means; 0 = not exported
}

func metricsFleet(inc incident) (Input, ServerMetrics) {
	r := rand.New(rand.NewPCG(7, 41))
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := Input{Window: Range{From: t0, To: t0.Add(20 * time.Minute)}}
	in.Baseline = DefaultBaseline(in.Window)
	sm := ServerMetrics{Servers: []string{"vllm-llama"}, Endpoints: []string{"vllm.svc:8000"}}
	for m := -60; m < 20; m++ {
		at := t0.Add(time.Duration(m) * time.Minute)
		bad := m >= 0
		var q, p, itl []float64
		for i := range 30 {
			qq, pp, ii := r.ExpFloat64()*0.02, 0.15+r.Float64()*0.1, 0.02+r.Float64()*0.01
			if bad {
				qq += inc.queue * (0.5 + r.Float64())
				pp += inc.prefill * (0.5 + r.Float64())
				ii += inc.itl * (0.5 + r.Float64())
			}
			q, p, itl = append(q, qq), append(p, pp), append(itl, ii)
			ttft := (qq + pp + 0.03) * 1000
			if bad {
				ttft += inc.clientExtra * 1000 * (0.5 + r.Float64())
			}
			req := telemetry.LLMRequest{Service: "chat-app", Model: "llama", Start: at.Add(time.Duration(i) * 2 * time.Second), TTFT: &ttft}
			if bad {
				in.Requests = append(in.Requests, req)
			} else {
				in.BaselineRequests = append(in.BaselineRequests, req)
			}
		}
		ttfts := make([]float64, len(q))
		for i := range q {
			ttfts[i] = q[i] + p[i]
		}
		sm.Histograms = append(sm.Histograms, histMinute(at, HistQueue, latencyBounds, q), histMinute(at, HistPrefill, latencyBounds, p),
			histMinute(at, HistTTFT, latencyBounds, ttfts), histMinute(at, HistITL, itlBounds, itl))
		waiting, kv := 0.0, 0.4
		if bad {
			waiting, kv = inc.waiting, max(inc.kv, 0.4)
		}
		sm.Gauges = append(sm.Gauges, telemetry.MetricPoint{Time: at, Name: MetricRequestsWaiting, Value: waiting},
			telemetry.MetricPoint{Time: at, Name: MetricKVCacheUsage, Value: kv})
	}
	pre, base := inc.preempt, 0.0
	hits, queries, bhits := (0.6-inc.hitRate)*1000, 1000.0, 600.0
	sm.Window = CounterFigures{Preemptions: &pre, PrefixHits: &hits, PrefixQueries: &queries}
	sm.Baseline = CounterFigures{Preemptions: &base, PrefixHits: &bhits, PrefixQueries: &queries}
	if inc.dram > 0 {
		sm.Window.DRAMActive, sm.Window.TensorActive = &inc.dram, &inc.tensor
	}
	if inc.scaleUp {
		zero, one := int32(0), int32(1)
		sm.Events = []telemetry.Event{{Time: t0.Add(time.Minute), Kind: telemetry.EventScale, Service: "vllm-llama", FromReplicas: &zero, ToReplicas: &one}}
	}
	return in, sm
}

// A metrics-only fleet's incidents get their verdict from the server's
// histograms, with the corroborating evidence each calls for.
func TestServerMetricsVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inc      incident
		want     Verdict
		evidence []string // figures some evidence must carry
	}{
		{"queueing", incident{queue: 2, waiting: 32, kv: 0.97}, VerdictQueueing, []string{"resolution_ms", "requests_waiting_peak", "kv_cache_peak"}},
		{"prefill after a prefix-cache drop", incident{prefill: 1.5, hitRate: 0.45}, VerdictPrefill, []string{"prefix_cache_hit_rate"}},
		{"decode under preemptions", incident{itl: 0.04, preempt: 120, kv: 0.95}, VerdictDecode, []string{"preemptions"}},
		{"gateway in between", incident{clientExtra: 1.5}, VerdictNetwork, []string{"server_ttft_growth_ms"}},
		{"held while a replica starts", incident{clientExtra: 1.5, scaleUp: true}, VerdictColdStart, []string{"scale_events", "server_ttft_growth_ms"}},
		{"decode, memory-bound by DCGM", incident{itl: 0.04, dram: 0.85, tensor: 0.3}, VerdictDecode, []string{"gpu_dram_active", "gpu_compute_active"}},
		{"nothing moved", incident{}, VerdictHealthy, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, sm := metricsFleet(tc.inc)
			in.ServerMetrics = &sm
			d := Diagnose(in)
			if d.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s; evidence %+v", d.Verdict, d.Summary, tc.want, d.Evidence)
			}
			if d.ServerMetrics == nil || d.ServerMetrics.Components[ComponentQueue].P95 == nil {
				t.Fatalf("server figures missing: %+v", d.ServerMetrics)
			}
			if want := map[bool]string{true: "dcgm", false: ""}[tc.inc.dram > 0]; d.Answers.Decode == nil && want != "" ||
				d.Answers.Decode != nil && d.Answers.Decode.Source != want {
				t.Errorf("decode answer %+v, want source %q", d.Answers.Decode, want)
			}
			for _, fig := range tc.evidence {
				found := false
				for i, e := range d.Evidence {
					if e.N != i+1 {
						t.Errorf("evidence %d numbered %d", i+1, e.N)
					}
					if _, ok := e.Figures[fig]; ok {
						found = true
					}
				}
				if !found {
					t.Errorf("no evidence quotes %s: %+v", fig, d.Evidence)
				}
			}
		})
	}
}

// Spans with the server split decide; the metrics change nothing.
func TestServerMetricsYieldToServerSpans(t *testing.T) {
	in, sm := metricsFleet(incident{queue: 2, waiting: 32, kv: 0.97})
	for i := range in.Requests {
		q := 5.0
		in.Requests[i].Queue = &q
	}
	before := Diagnose(in)
	in.ServerMetrics = &sm
	if after := Diagnose(in); after.ServerMetrics != nil || after.Verdict != before.Verdict {
		t.Fatalf("metrics overrode span figures: %s → %s", before.Verdict, after.Verdict)
	}
}

// DCGM decides memory- against compute-bound decode and says which
// counters it compared: the tensor pipes, else the SMs.
func TestGPUDecodeBound(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name   string
		c      CounterFigures
		kind   string
		metric string
	}{
		{"memory interface busier", CounterFigures{DRAMActive: f(0.8), TensorActive: f(0.2)}, "memory-bound", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"},
		{"tensor pipes busier", CounterFigures{DRAMActive: f(0.3), TensorActive: f(0.7), SMActive: f(0.1)}, "compute-bound", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"},
		{"SMs when no tensor pipes", CounterFigures{DRAMActive: f(0.3), SMActive: f(0.9)}, "compute-bound", "DCGM_FI_PROF_SM_ACTIVE"},
		{"no DRAM activity", CounterFigures{TensorActive: f(0.9)}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := gpuDecodeBound(tc.c)
			if tc.kind == "" {
				if d != nil {
					t.Fatalf("got %+v without DRAM activity", d)
				}
				return
			}
			if d == nil || d.Kind != tc.kind || d.ComputeMetric != tc.metric || !strings.Contains(d.Text, tc.metric) {
				t.Fatalf("got %+v, want %s from %s", d, tc.kind, tc.metric)
			}
		})
	}
}

// TGI exports no prefill histogram: its prefill forward passes stand in,
// and the evidence says they are per batch; a server's own prefill
// histogram comes first when both exist.
func TestServerMetricsForwardPassFallback(t *testing.T) {
	in, sm := metricsFleet(incident{prefill: 1.5})
	var tgi []HistogramBucket
	for _, h := range sm.Histograms {
		if h.Name == HistPrefill {
			h.Name = HistForwardPrefill
		}
		tgi = append(tgi, h)
	}
	sm.Histograms = tgi
	in.ServerMetrics = &sm
	d := Diagnose(in)
	if d.Verdict != VerdictPrefill || d.ServerMetrics.Components[ComponentPrefill].Histogram != HistForwardPrefill {
		t.Fatalf("verdict %s, prefill from %+v", d.Verdict, d.ServerMetrics.Components[ComponentPrefill])
	}
	said := false
	for _, e := range d.Evidence {
		said = said || strings.Contains(e.Text, "per batch rather than per request")
	}
	if !said {
		t.Errorf("no evidence says the forward passes are per batch: %+v", d.Evidence)
	}
	both := sm
	both.Histograms = append(slices.Clone(tgi), histMinute(in.Window.From, HistPrefill, latencyBounds, []float64{0.2}))
	if got := serverComponents(both, in.Window, in.Baseline)[ComponentPrefill].Histogram; got != HistPrefill {
		t.Errorf("prefill read from %s with the server's own histogram present", got)
	}
}

// A preemption burst and a prefix-cache drop are quoted whichever verdict
// the metrics reach: here queueing, which names neither hit rate nor (as
// corroboration) anything but the queue's pressure.
func TestServerMetricsOwnLines(t *testing.T) {
	in, sm := metricsFleet(incident{queue: 2, waiting: 32, kv: 0.97, hitRate: 0.4, preempt: 50})
	in.ServerMetrics = &sm
	d := Diagnose(in)
	if d.Verdict != VerdictQueueing {
		t.Fatalf("verdict %s (%s)", d.Verdict, d.Summary)
	}
	seen := map[string]int{}
	for _, e := range d.Evidence {
		for k := range e.Figures {
			seen[k]++
		}
	}
	if seen["preemptions"] != 1 || seen["prefix_cache_hit_rate"] != 1 {
		t.Errorf("want one preemption line and one hit-rate line: %+v", d.Evidence)
	}
}
