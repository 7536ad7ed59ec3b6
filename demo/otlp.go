package demo

import (
	"fmt"
	"maps"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenpath/tokenpath/telemetry"
)

// scope identifies the demo as the instrumentation library, so its data
// can be told apart from a real app's.
var scope = instrumentation.Scope{Name: "github.com/tokenpath/tokenpath/demo", Version: "1.0.0"}

// The simulator states every span and point completely (ids, past
// timestamps, parents, resource), which a live TracerProvider or
// MeterProvider cannot be told: it picks its own ids and reads the clock.
// So the demo hands finished data to the SDK's OTLP exporters, as the
// SDK's own span processor and metric reader do.

func keyValue(a Attr) attribute.KeyValue {
	switch v := a.Value.(type) {
	case string:
		return attribute.String(a.Key, v)
	case int64:
		return attribute.Int64(a.Key, v)
	case int:
		return attribute.Int(a.Key, v)
	case float64:
		return attribute.Float64(a.Key, v)
	case bool:
		return attribute.Bool(a.Key, v)
	}
	return attribute.String(a.Key, fmt.Sprint(a.Value))
}

func keyValues(attrs []Attr) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		out = append(out, keyValue(a))
	}
	return out
}

func sdkResource(r *Resource) *resource.Resource {
	return resource.NewSchemaless(keyValues(r.Attrs)...)
}

var spanKinds = map[SpanKind]trace.SpanKind{
	KindInternal: trace.SpanKindInternal,
	KindServer:   trace.SpanKindServer,
	KindClient:   trace.SpanKindClient,
}

// readOnlySpans turns simulated spans into the finished spans an SDK span
// processor hands its exporter, one resource per emitting process.
func readOnlySpans(spans []Span) []sdktrace.ReadOnlySpan {
	resources := map[*Resource]*resource.Resource{}
	out := make([]sdktrace.ReadOnlySpan, 0, len(spans))
	for i := range spans {
		sp := &spans[i]
		res, ok := resources[sp.Resource]
		if !ok {
			res = sdkResource(sp.Resource)
			resources[sp.Resource] = res
		}
		stub := tracetest.SpanStub{
			Name: sp.Name,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID(sp.TraceID), SpanID: trace.SpanID(sp.SpanID), TraceFlags: trace.FlagsSampled,
			}),
			SpanKind:             spanKinds[sp.Kind],
			StartTime:            sp.Start,
			EndTime:              sp.End,
			Attributes:           keyValues(sp.Attrs),
			Resource:             res,
			InstrumentationScope: scope,
		}
		if !sp.ParentSpanID.IsZero() {
			// A server span's caller is another process: its parent came
			// in through traceparent, so it is remote.
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID(sp.TraceID), SpanID: trace.SpanID(sp.ParentSpanID), TraceFlags: trace.FlagsSampled,
				Remote: sp.Kind == KindServer,
			})
		}
		if sp.Error {
			stub.Status = sdktrace.Status{Code: codes.Error, Description: sp.StatusMessage}
		}
		out = append(out, stub.Snapshot())
	}
	return out
}

// resourceMetrics groups gauge points into one ResourceMetrics per
// (service, instance), in the order they first appear, with one metric
// per name within it. The points keep their own (scrape) times.
func resourceMetrics(points []telemetry.MetricPoint) []*metricdata.ResourceMetrics {
	type resKey struct{ service, instance string }
	var out []*metricdata.ResourceMetrics
	index := map[resKey]*metricdata.ResourceMetrics{}
	gauges := map[resKey]map[string]int{} // metric name → index in ScopeMetrics[0].Metrics
	for _, p := range points {
		k := resKey{p.Service, p.Instance}
		rm, ok := index[k]
		if !ok {
			rm = &metricdata.ResourceMetrics{
				Resource:     sdkResource(metricResource(p.Service, p.Instance)),
				ScopeMetrics: []metricdata.ScopeMetrics{{Scope: scope}},
			}
			index[k] = rm
			gauges[k] = map[string]int{}
			out = append(out, rm)
		}
		sm := &rm.ScopeMetrics[0]
		i, ok := gauges[k][p.Name]
		if !ok {
			i = len(sm.Metrics)
			gauges[k][p.Name] = i
			sm.Metrics = append(sm.Metrics, metricdata.Metrics{
				Name: p.Name, Description: metricHelp[p.Name], Data: metricdata.Gauge[float64]{},
			})
		}
		labels := make([]attribute.KeyValue, 0, len(p.Labels))
		for _, l := range slices.Sorted(maps.Keys(p.Labels)) {
			labels = append(labels, attribute.String(l, p.Labels[l]))
		}
		g := sm.Metrics[i].Data.(metricdata.Gauge[float64])
		g.DataPoints = append(g.DataPoints, metricdata.DataPoint[float64]{
			Attributes: attribute.NewSet(labels...),
			Time:       p.Time,
			Value:      p.Value,
		})
		sm.Metrics[i].Data = g
	}
	return out
}

var metricHelp = map[string]string{
	MetricKVCacheUsage:    "KV-cache usage. 1 means 100 percent usage.",
	MetricRequestsWaiting: "Number of requests waiting to be processed.",
	MetricRequestsRunning: "Number of requests in model execution batches.",
	MetricReplicas:        "Number of desired pods for a deployment.",
}
