package analysis_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// tgiDurationBuckets are TGI's buckets of every *_duration histogram:
// 35 bounds 0.0001 × 1.5^k, k = 1…35 (huggingface/text-generation-inference
// router/src/server.rs, duration_buckets).
var tgiDurationBuckets = func() []float64 {
	out, v := make([]float64, 0, 35), 0.0001
	for range 35 {
		v *= 1.5
		out = append(out, v)
	}
	return out
}()

// tgiHistogram is one cumulative TGI histogram series.
type tgiHistogram struct {
	name   string
	attrs  attribute.Set
	counts []uint64 // per bucket, +Inf last
	n      uint64
	sum    float64
}

func (h *tgiHistogram) observe(v float64) {
	h.counts[sort.SearchFloat64s(tgiDurationBuckets, v)]++
	h.n++
	h.sum += v
}

func (h *tgiHistogram) metric(start, at time.Time) metricdata.Metrics {
	return metricdata.Metrics{Name: h.name, Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality,
		DataPoints: []metricdata.HistogramDataPoint[float64]{{Attributes: h.attrs, StartTime: start, Time: at, Count: h.n, Sum: h.sum,
			Bounds: slices.Clone(tgiDurationBuckets), BucketCounts: slices.Clone(h.counts)}}}}
}

// relayTGI exports a TGI router with tracing off over OTLP (as the
// Collector relays its Prometheus page): queue time per request and the
// batches' forward passes per method, whose prefill grows tenfold in the
// window (longer prompts), and the app's calls to instance.
func relayTGI(t *testing.T, srv *apptest.Server, t0 time.Time, server, app, host string, port int) {
	t.Helper()
	ctx := context.Background()
	exp := srv.MetricExporter(t)
	res := resource.NewSchemaless(attribute.String("service.name", server), attribute.String("service.instance.id", host+":80"),
		attribute.String("server.address", host), attribute.String("server.port", "80"))
	mk := func(name string, kv ...attribute.KeyValue) *tgiHistogram {
		return &tgiHistogram{name: name, attrs: attribute.NewSet(kv...), counts: make([]uint64, len(tgiDurationBuckets)+1)}
	}
	queue, prefill, decode := mk("tgi_request_queue_duration"), mk("tgi_batch_forward_duration", attribute.String("method", "prefill")),
		mk("tgi_batch_forward_duration", attribute.String("method", "decode"))
	r := rand.New(rand.NewPCG(3, 9))
	start := t0.Add(-10 * time.Second)
	var minutes []fleetMinute
	for m := range baselineMinutes + windowMinutes {
		bad := m >= baselineMinutes
		fm := fleetMinute{at: t0.Add(time.Duration(m) * time.Minute)}
		for range callsPerMinute {
			q, p := r.ExpFloat64()*0.01, 0.04+r.Float64()*0.02
			if bad {
				p *= 10
			}
			queue.observe(q)
			prefill.observe(p)
			for range 5 {
				decode.observe(0.02 + r.Float64()*0.005)
			}
			fm.calls = append(fm.calls, fleetCall{ttft: time.Duration((q + p + 0.03) * float64(time.Second)), decode: 2 * time.Second, inputTokens: 900})
		}
		minutes = append(minutes, fm)
		end := fm.at.Add(time.Minute)
		rm := &metricdata.ResourceMetrics{Resource: res, ScopeMetrics: []metricdata.ScopeMetrics{{
			Scope:   instrumentation.Scope{Name: "otelcol/prometheusreceiver"},
			Metrics: []metricdata.Metrics{queue.metric(start, end), prefill.metric(start, end), decode.metric(start, end)}}}}
		if err := exp.Export(ctx, rm); err != nil {
			t.Fatal(err)
		}
	}
	sendCalls(t, srv, app, host, port, minutes)
}
