package ingest

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
)

var fuzzContentTypes = []string{"application/x-protobuf", "application/protobuf", "application/json", "application/json; charset=utf-8", "text/plain", ""}

var fuzzSignals = []struct {
	path string
	resp func() proto.Message
}{
	{"/v1/traces", func() proto.Message { return &coltracepb.ExportTraceServiceResponse{} }},
	{"/v1/metrics", func() proto.Message { return &colmetricspb.ExportMetricsServiceResponse{} }},
	{"/v1/logs", func() proto.Message { return &collogspb.ExportLogsServiceResponse{} }},
}

// FuzzHTTPDecode drives arbitrary bodies × content types × gzip through the
// whole OTLP/HTTP handler (decode, normalize, WAL): it must never panic or
// answer 5xx, and every answer must decode in the request's encoding.
func FuzzHTTPDecode(f *testing.F) {
	t0 := time.Now().Add(-time.Minute)
	traces, _ := proto.Marshal(otlptest.Traces(1, 3, t0))
	metrics, _ := proto.Marshal(&colmetricspb.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{Name: "vllm:num_requests_waiting",
			Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{{
				TimeUnixNano: uint64(t0.UnixNano()), Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 4}}}}}}}}}}}})
	logs, _ := proto.Marshal(&collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{
		LogRecords: []*logspb.LogRecord{{TimeUnixNano: uint64(t0.UnixNano()), Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "Scaled up replica set vllm-7f9c to 3"}},
			Attributes: []*commonpb.KeyValue{{Key: "k8s.event.reason", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "ScalingReplicaSet"}}}}}}}}}}})
	tracesJSON, _ := protojson.Marshal(otlptest.Traces(2, 1, t0))
	seeds := []struct {
		body   []byte
		ct     uint8
		gz     bool
		signal uint8
	}{
		{traces, 0, false, 0}, {traces, 1, true, 0}, {metrics, 0, false, 1}, {logs, 0, true, 2},
		{tracesJSON, 2, false, 0}, {[]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","startTimeUnixNano":"1790000000000000000","endTimeUnixNano":"1790000001000000000"}]}]}]}`), 3, false, 0},
		{[]byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x","sum":{"dataPoints":[{"asInt":"9223372036854775807"}]}}]}]}]}`), 2, true, 1},
		{[]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, 0, false, 0}, {nil, 4, false, 2}, {[]byte("[]"), 2, false, 0},
	}
	for _, s := range seeds {
		f.Add(s.body, s.ct, s.gz, s.signal)
	}

	// A real pipeline that is never flushed: accepted exports are fsynced to
	// the log until MaxPendingRows, then refused with 429 without I/O.
	p, err := NewPipeline(f.TempDir(), nil, PipelineConfig{MaxPendingRows: 2000}, QuietLog)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.wal.Close() })
	h := (&Receiver{Pipeline: p, Auth: keyAuth(testKey), MaxBodyBytes: 1 << 20, Log: QuietLog}).HTTPHandler()

	f.Fuzz(func(t *testing.T, body []byte, ct uint8, gz bool, signal uint8) {
		contentType := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]
		sig := fuzzSignals[int(signal)%len(fuzzSignals)]
		payload := body
		if gz {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(body)
			_ = zw.Close()
			payload = buf.Bytes()
		}
		req := httptest.NewRequest(http.MethodPost, sig.path, bytes.NewReader(payload))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer "+testKey)
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		case http.StatusUnsupportedMediaType:
			if contentType != "text/plain" && contentType != "" {
				t.Fatalf("415 for Content-Type %q: %s", contentType, rec.Body.Bytes())
			}
		default:
			t.Fatalf("HTTP %d for a %d-byte %s body: %s", rec.Code, len(body), contentType, rec.Body.Bytes())
		}
		var msg proto.Message = &rpcstatus.Status{}
		if rec.Code == http.StatusOK {
			msg = sig.resp()
		}
		out := rec.Body.Bytes()
		var err error
		if strings.HasPrefix(contentType, "application/json") {
			if got := rec.Header().Get("Content-Type"); got != "application/json" {
				t.Fatalf("JSON request answered in %q", got)
			}
			err = protojson.Unmarshal(out, msg)
		} else {
			err = proto.Unmarshal(out, msg)
		}
		if err != nil {
			t.Fatalf("HTTP %d answer %q does not decode: %v", rec.Code, out, err)
		}
	})
}
