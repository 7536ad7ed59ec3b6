package demo

import (
	"fmt"
	"slices"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// scopeName identifies the demo as the instrumentation library, so its
// data can be told apart from a real app's.
const (
	scopeName    = "github.com/tokenpath/tokenpath/demo"
	scopeVersion = "1.0.0"
)

func keyValues(attrs []Attr) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		out = append(out, &commonpb.KeyValue{Key: a.Key, Value: anyValue(a.Value)})
	}
	return out
}

func anyValue(v any) *commonpb.AnyValue {
	switch x := v.(type) {
	case string:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}
	case int64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: x}}
	case int:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}
	case float64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: x}}
	case bool:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: x}}
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: fmt.Sprint(v)}}
}

func unixNano(t time.Time) uint64 { return uint64(t.UnixNano()) }

var spanKinds = map[SpanKind]tracepb.Span_SpanKind{
	KindInternal: tracepb.Span_SPAN_KIND_INTERNAL,
	KindServer:   tracepb.Span_SPAN_KIND_SERVER,
	KindClient:   tracepb.Span_SPAN_KIND_CLIENT,
}

// encodeTraces builds one export request, grouping spans by resource in
// the order the resources first appear (as an SDK exporter batch does).
func encodeTraces(spans []Span) *coltracepb.ExportTraceServiceRequest {
	req := &coltracepb.ExportTraceServiceRequest{}
	index := map[*Resource]*tracepb.ScopeSpans{}
	for i := range spans {
		sp := &spans[i]
		ss, ok := index[sp.Resource]
		if !ok {
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: scopeName, Version: scopeVersion}}
			index[sp.Resource] = ss
			req.ResourceSpans = append(req.ResourceSpans, &tracepb.ResourceSpans{
				Resource:   &resourcepb.Resource{Attributes: keyValues(sp.Resource.Attrs)},
				ScopeSpans: []*tracepb.ScopeSpans{ss},
			})
		}
		// Sampled; the parent is remote for a server span whose caller is
		// another process.
		flags := uint32(1) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
		if !sp.ParentSpanID.IsZero() && sp.Kind == KindServer {
			flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
		}
		out := &tracepb.Span{
			TraceId:           sp.TraceID[:],
			SpanId:            sp.SpanID[:],
			Flags:             flags,
			Name:              sp.Name,
			Kind:              spanKinds[sp.Kind],
			StartTimeUnixNano: unixNano(sp.Start),
			EndTimeUnixNano:   unixNano(sp.End),
			Attributes:        keyValues(sp.Attrs),
		}
		if !sp.ParentSpanID.IsZero() {
			out.ParentSpanId = sp.ParentSpanID[:]
		}
		if sp.Error {
			out.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: sp.StatusMessage}
		}
		ss.Spans = append(ss.Spans, out)
	}
	return req
}

// encodeMetrics builds one export request of gauges, one resource per
// (service, instance) and one metric per name within it.
func encodeMetrics(points []telemetry.MetricPoint) *colmetricspb.ExportMetricsServiceRequest {
	type resKey struct{ service, instance string }
	req := &colmetricspb.ExportMetricsServiceRequest{}
	scopes := map[resKey]*metricspb.ScopeMetrics{}
	gauges := map[resKey]map[string]*metricspb.Gauge{}
	for _, p := range points {
		k := resKey{p.Service, p.Instance}
		sm, ok := scopes[k]
		if !ok {
			sm = &metricspb.ScopeMetrics{Scope: &commonpb.InstrumentationScope{Name: scopeName, Version: scopeVersion}}
			scopes[k] = sm
			gauges[k] = map[string]*metricspb.Gauge{}
			req.ResourceMetrics = append(req.ResourceMetrics, &metricspb.ResourceMetrics{
				Resource:     &resourcepb.Resource{Attributes: keyValues(metricResource(p.Service, p.Instance).Attrs)},
				ScopeMetrics: []*metricspb.ScopeMetrics{sm},
			})
		}
		g, ok := gauges[k][p.Name]
		if !ok {
			g = &metricspb.Gauge{}
			gauges[k][p.Name] = g
			sm.Metrics = append(sm.Metrics, &metricspb.Metric{
				Name: p.Name, Description: metricHelp[p.Name],
				Data: &metricspb.Metric_Gauge{Gauge: g},
			})
		}
		labels := make([]string, 0, len(p.Labels))
		for l := range p.Labels {
			labels = append(labels, l)
		}
		slices.Sort(labels)
		attrs := make([]*commonpb.KeyValue, 0, len(labels))
		for _, l := range labels {
			attrs = append(attrs, &commonpb.KeyValue{Key: l, Value: anyValue(p.Labels[l])})
		}
		g.DataPoints = append(g.DataPoints, &metricspb.NumberDataPoint{
			Attributes:   attrs,
			TimeUnixNano: unixNano(p.Time),
			Value:        &metricspb.NumberDataPoint_AsDouble{AsDouble: p.Value},
		})
	}
	return req
}

var metricHelp = map[string]string{
	MetricKVCacheUsage:    "KV-cache usage. 1 means 100 percent usage.",
	MetricRequestsWaiting: "Number of requests waiting to be processed.",
	MetricRequestsRunning: "Number of requests in model execution batches.",
	MetricReplicas:        "Number of desired pods for a deployment.",
}
