package ingest

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// receiveBenchExport is a 1000-span export shaped as cmd/bench sends them:
// 42 attributes a span (strings, ints, doubles), one resource.
func receiveBenchExport(b *testing.B) []byte {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	t0 := time.Now().Add(-time.Minute)
	var spans []*tracepb.Span
	for i := 0; i < 1000; i++ {
		tid, sid := make([]byte, 16), make([]byte, 8)
		binary.BigEndian.PutUint64(tid[8:], uint64(i/4)+1)
		binary.BigEndian.PutUint64(sid, uint64(i)+1)
		var attrs []*commonpb.KeyValue
		attrs = append(attrs, str("gen_ai.operation.name", "chat"), str("gen_ai.request.model", "llama-3.1-8b"),
			&commonpb.KeyValue{Key: "gen_ai.usage.input_tokens", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 900}}})
		for a := 0; a < 39; a++ {
			switch a % 3 {
			case 0:
				attrs = append(attrs, &commonpb.KeyValue{Key: fmt.Sprintf("app.count.%d", a), Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(i * a)}}})
			case 1:
				attrs = append(attrs, &commonpb.KeyValue{Key: fmt.Sprintf("app.score.%d", a), Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: float64(i) / 7}}})
			default:
				attrs = append(attrs, str(fmt.Sprintf("app.key.%d", a), fmt.Sprintf("value-%d-%d", a, i%97)))
			}
		}
		spans = append(spans, &tracepb.Span{TraceId: tid, SpanId: sid, Name: "chat llama", Kind: tracepb.Span_SPAN_KIND_CLIENT, Attributes: attrs,
			StartTimeUnixNano: uint64(t0.UnixNano()), EndTimeUnixNano: uint64(t0.Add(time.Second).UnixNano())})
	}
	body, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "chat"), str("service.instance.id", "chat-0")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkReceivePath: what a receiver does with a protobuf trace export
// before the write-ahead log, with the embedded engine: read it from the
// wire and encode the spans as a Native block, through attribute maps
// (TracesWire + EncodeSpans) or one attribute list (TracesWireAttrs +
// EncodeSpansAttrs, what Submit runs).
func BenchmarkReceivePath(b *testing.B) {
	body := receiveBenchExport(b)
	now := time.Now()
	b.Run("maps", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			res, ok := normalize.TracesWire(1, body, now, normalize.Limits{})
			if !ok {
				b.Fatal("not read")
			}
			if _, err := clickhouse.EncodeSpans(res.Spans); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
	})
	b.Run("attrs", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			res, ok := normalize.TracesWireAttrs(1, body, now, normalize.Limits{})
			if !ok {
				b.Fatal("not read")
			}
			a := res.Attrs
			if _, err := clickhouse.EncodeSpansAttrs(res.Spans, &clickhouse.SpanAttrs{Ends: a.Ends, Names: a.Names, Keys: a.Keys, Bounds: a.Bounds, Values: a.Values}); err != nil {
				b.Fatal(err)
			}
			a.Release()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
	})
}
