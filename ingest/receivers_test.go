package ingest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcencoding "google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// maxBody is the test server's TOKENPATH_MAX_BODY_BYTES.
const maxBody = 4 << 20

type otlpRequest struct {
	method, path, contentType, encoding, auth string
	body                                      []byte
}

func (o otlpRequest) do(t *testing.T, base string) (*http.Response, []byte) {
	t.Helper()
	method, path := o.method, o.path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/v1/traces"
	}
	req, err := http.NewRequest(method, "http://"+base+path, bytes.NewReader(o.body))
	if err != nil {
		t.Fatal(err)
	}
	if o.contentType != "" {
		req.Header.Set("Content-Type", o.contentType)
	}
	if o.encoding != "" {
		req.Header.Set("Content-Encoding", o.encoding)
	}
	if o.auth != "-" {
		auth := o.auth
		if auth == "" {
			auth = "Bearer " + apptest.Key
		}
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func protoBody(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeStatus reads an OTLP/HTTP error body: a google.rpc.Status in the
// response's encoding.
func decodeStatus(t *testing.T, resp *http.Response, body []byte) *rpcstatus.Status {
	t.Helper()
	st := &rpcstatus.Status{}
	var err error
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		err = protojson.Unmarshal(body, st)
	} else {
		err = proto.Unmarshal(body, st)
	}
	if err != nil {
		t.Fatalf("error body %q is not a google.rpc.Status: %v", body, err)
	}
	return st
}

// spansIn counts the stored spans of a trace once the pipeline has flushed
// (acknowledged means durable, not yet queryable).
func spansIn(t *testing.T, ch *clickhouse.Store, traceHex string, want int64) {
	t.Helper()
	var n int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := ch.Query(context.Background(), "SELECT count() AS n FROM spans FINAL WHERE trace_id = ?", traceHex)
		if err != nil {
			t.Fatal(err)
		}
		if n = r.Row(0).Int("n"); n == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n != want {
		t.Fatalf("trace %s: %d spans stored, want %d", traceHex, n, want)
	}
}

func startHardeningServer(t *testing.T) *apptest.Server {
	return apptest.Start(t, apptest.Options{Configure: func(c *config.Config) { c.MaxBodyBytes = maxBody }})
}

// TestOTLPHTTPRefusals: every way an OTLP/HTTP request can be wrong gets the
// specified status and a google.rpc.Status body, in the request's encoding.
func TestOTLPHTTPRefusals(t *testing.T) {
	srv := startHardeningServer(t)
	valid := protoBody(t, otlptest.Traces(1, 1, time.Now().Add(-time.Minute)))
	tooBig := protoBody(t, otlptest.ExportOf(&tracepb.Span{Name: strings.Repeat("x", maxBody)}))
	tests := []struct {
		name    string
		req     otlpRequest
		code    int
		rpcCode codes.Code
		msg     string
	}{
		{"malformed protobuf", otlpRequest{contentType: "application/x-protobuf", body: []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01}},
			400, codes.InvalidArgument, "malformed OTLP traces protobuf"},
		{"malformed JSON", otlpRequest{contentType: "application/json", body: []byte(`{"resourceSpans": [{"scopeSpans": [`)},
			400, codes.InvalidArgument, "malformed OTLP traces JSON"},
		{"JSON with a base64 trace id", otlpRequest{contentType: "application/json",
			body: []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"eee19b7ec3c1b174"}]}]}]}`)},
			400, codes.InvalidArgument, "traceId"},
		{"JSON of the wrong shape", otlpRequest{contentType: "application/json", body: []byte(`{"resourceSpans": 5}`)},
			400, codes.InvalidArgument, "malformed OTLP traces JSON"},
		{"wrong Content-Type", otlpRequest{contentType: "text/plain", body: valid}, 415, codes.InvalidArgument, "unsupported Content-Type"},
		{"no Content-Type", otlpRequest{body: valid}, 415, codes.InvalidArgument, "unsupported Content-Type"},
		{"unsupported Content-Encoding", otlpRequest{contentType: "application/x-protobuf", encoding: "br", body: valid}, 415, codes.InvalidArgument, "Content-Encoding"},
		{"gzip header on a plain body", otlpRequest{contentType: "application/x-protobuf", encoding: "gzip", body: valid}, 400, codes.InvalidArgument, "invalid gzip"},
		{"missing key", otlpRequest{contentType: "application/x-protobuf", auth: "-", body: valid}, 401, codes.Unauthenticated, "API key"},
		{"wrong key", otlpRequest{contentType: "application/x-protobuf", auth: "Bearer tp_wrong_key_000000000000", body: valid}, 401, codes.Unauthenticated, "API key"},
		{"not a bearer token", otlpRequest{contentType: "application/x-protobuf", auth: "Basic " + apptest.Key, body: valid}, 401, codes.Unauthenticated, "API key"},
		{"wrong key, JSON", otlpRequest{contentType: "application/json", auth: "Bearer nope", body: []byte(`{}`)}, 401, codes.Unauthenticated, "API key"},
		{"body over the limit", otlpRequest{contentType: "application/x-protobuf", body: tooBig}, 413, codes.InvalidArgument, ""},
		{"gzip body over the limit once inflated", otlpRequest{contentType: "application/x-protobuf", encoding: "gzip", body: gzipped(t, tooBig)},
			413, codes.InvalidArgument, "after decompression"},
		{"GET", otlpRequest{method: http.MethodGet, auth: "-"}, 405, codes.Unknown, "use POST"},
		{"PUT with a body", otlpRequest{method: http.MethodPut, contentType: "application/x-protobuf", body: valid}, 405, codes.Unknown, "use POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := tt.req.do(t, srv.OTLPHTTPAddr)
			if resp.StatusCode != tt.code {
				t.Fatalf("HTTP %d %q, want %d", resp.StatusCode, body, tt.code)
			}
			if tt.code == 405 && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("405 without Allow: POST")
			}
			st := decodeStatus(t, resp, body)
			if codes.Code(st.Code) != tt.rpcCode || !strings.Contains(st.Message, tt.msg) || st.Message == "" {
				t.Errorf("status {%v %q}, want {%v …%q…}", codes.Code(st.Code), st.Message, tt.rpcCode, tt.msg)
			}
			if strings.Contains(st.Message, apptest.Key) {
				t.Errorf("the API key is echoed back: %q", st.Message)
			}
		})
	}
	// The server is still healthy and accepts a valid export afterwards.
	resp, body := otlpRequest{contentType: "application/x-protobuf", body: valid}.do(t, srv.OTLPHTTPAddr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("valid export after the refusals: HTTP %d %q", resp.StatusCode, body)
	}
}

// TestOTLPHTTPGzipBomb: a small gzip body that inflates far beyond the limit
// is refused after reading about the limit, not after inflating it all.
func TestOTLPHTTPGzipBomb(t *testing.T) {
	srv := startHardeningServer(t)
	// 256 MiB of zeros in ~256 KiB: one gzip member of 1 MiB of zeros,
	// repeated (a gzip stream may hold many members, and readers join them).
	member := gzipped(t, make([]byte, 1<<20))
	bomb := bytes.Repeat(member, 256)
	if len(bomb) > maxBody/4 {
		t.Fatalf("bomb is %d bytes compressed; it must be well under the limit", len(bomb))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, body := otlpRequest{contentType: "application/x-protobuf", encoding: "gzip", body: bomb}.do(t, srv.OTLPHTTPAddr)
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("gzip bomb: HTTP %d %q, want 413", resp.StatusCode, body)
	}
	// Everything the process allocated while serving it (the server is in
	// this process): a few times the 4 MiB limit at most, not 256 MiB.
	t.Logf("allocated %d MiB while serving the bomb", (after.TotalAlloc-before.TotalAlloc)>>20)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 48<<20 {
		t.Errorf("serving a %d KiB gzip bomb allocated %d MiB", len(bomb)>>10, grew>>20)
	}
}

func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

func str(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

// mixedExport holds three valid spans of trace seed and three that must be
// rejected: an all-zero trace id, a 1970 timestamp, a year-2300 timestamp.
func mixedExport(seed uint64, t0 time.Time) *coltracepb.ExportTraceServiceRequest {
	zero := otlptest.Span(seed, 3, t0)
	zero.TraceId = make([]byte, 16)
	epoch := otlptest.Span(seed, 4, t0)
	epoch.StartTimeUnixNano, epoch.EndTimeUnixNano = 1_000_000_000, 2_000_000_000
	future := otlptest.Span(seed, 5, t0)
	y2300 := uint64(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC).Unix()) * 1e9 // past int64 nanoseconds
	future.StartTimeUnixNano, future.EndTimeUnixNano = y2300, y2300+1e9
	return otlptest.ExportOf(otlptest.Span(seed, 0, t0), zero, otlptest.Span(seed, 1, t0), epoch, otlptest.Span(seed, 2, t0), future)
}

func checkPartial(t *testing.T, ps *coltracepb.ExportTracePartialSuccess) {
	t.Helper()
	if ps.GetRejectedSpans() != 3 {
		t.Errorf("rejected_spans = %d, want 3", ps.GetRejectedSpans())
	}
	for _, want := range []string{"trace_id", "before 2000", "in the future"} {
		if !strings.Contains(ps.GetErrorMessage(), want) {
			t.Errorf("error_message %q does not mention %q", ps.GetErrorMessage(), want)
		}
	}
}

// TestOTLPPartialSuccess: bad spans are rejected one by one with a count and
// a reason, the good ones of the same request are stored, and hostile sizes
// are clamped instead of refused or crashing the server.
func TestOTLPPartialSuccess(t *testing.T) {
	srv := startHardeningServer(t)
	ctx := context.Background()
	t0 := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	conn, err := grpc.NewClient(srv.OTLPGRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	traces := coltracepb.NewTraceServiceClient(conn)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apptest.Key)

	t.Run("HTTP protobuf", func(t *testing.T) {
		for _, ct := range []string{"application/x-protobuf", "application/protobuf"} {
			seed := uint64(10)
			if ct == "application/protobuf" {
				seed = 11
			}
			resp, body := otlpRequest{contentType: ct, body: protoBody(t, mixedExport(seed, t0))}.do(t, srv.OTLPHTTPAddr)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ct {
				t.Fatalf("HTTP %d, Content-Type %q, want 200 in %s", resp.StatusCode, resp.Header.Get("Content-Type"), ct)
			}
			var out coltracepb.ExportTraceServiceResponse
			if err := proto.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			checkPartial(t, out.GetPartialSuccess())
			spansIn(t, srv.CH, otlptest.TraceHex(seed), 3)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		acks0, _ := srv.Ingest.Pipeline.Metrics.Acks()
		out, err := traces.Export(authed, mixedExport(12, t0))
		if err != nil {
			t.Fatal(err)
		}
		checkPartial(t, out.GetPartialSuccess())
		// The assembler's view of the receivers counts it (Assembler.Acks).
		if acks, slow := srv.Ingest.Pipeline.Metrics.Acks(); acks != acks0+1 || slow > acks {
			t.Errorf("acknowledgements %d → %d (%d slow), want one more", acks0, acks, slow)
		}
		spansIn(t, srv.CH, otlptest.TraceHex(12), 3)
	})

	t.Run("HTTP JSON as the OTLP spec writes it", func(t *testing.T) {
		// Hex ids, int64 as strings, enums as numbers, lowerCamelCase.
		start := t0.UnixNano()
		body := fmt.Sprintf(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"json-app"}}]},
		  "scopeSpans":[{"scope":{"name":"manual"},"spans":[
		    {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173",
		     "name":"chat llama","kind":3,"startTimeUnixNano":"%d","endTimeUnixNano":"%d",
		     "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},
		                   {"key":"gen_ai.request.model","value":{"stringValue":"llama"}},
		                   {"key":"gen_ai.usage.input_tokens","value":{"intValue":"800"}}],
		     "status":{"code":1}},
		    {"traceId":"00000000000000000000000000000000","spanId":"eee19b7ec3c1b175","name":"zero","startTimeUnixNano":"%d","endTimeUnixNano":"%d"}
		  ]}]}]}`, start, start+1_500_000_000, start, start+1)
		resp, raw := otlpRequest{contentType: "application/json", body: []byte(body)}.do(t, srv.OTLPHTTPAddr)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("HTTP %d, Content-Type %q, body %q; want 200 in JSON", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
		}
		var out coltracepb.ExportTraceServiceResponse
		if err := protojson.Unmarshal(raw, &out); err != nil {
			t.Fatalf("response %q: %v", raw, err)
		}
		if out.GetPartialSuccess().GetRejectedSpans() != 1 || !strings.Contains(string(raw), `"rejectedSpans":"1"`) {
			t.Errorf("response %s, want partialSuccess.rejectedSpans \"1\" (int64 as a string)", raw)
		}
		spansIn(t, srv.CH, "5b8efff798038103d269b633813fc60c", 1)
		r, err := srv.CH.Query(ctx, "SELECT span_id, parent_span_id, service, kind, llm_role, input_tokens, duration_ns, status_code FROM spans FINAL WHERE trace_id = ?",
			"5b8efff798038103d269b633813fc60c")
		if err != nil {
			t.Fatal(err)
		}
		row := r.Row(0)
		got := fmt.Sprintf("%s %s %s %s %s %d %d %s", row.String("span_id"), row.String("parent_span_id"), row.String("service"), row.String("kind"),
			row.String("llm_role"), row.Int("input_tokens"), row.Int("duration_ns"), row.String("status_code"))
		if want := "eee19b7ec3c1b174 eee19b7ec3c1b173 json-app client client 800 1500000000 ok"; got != want {
			t.Errorf("stored span\n got %s\nwant %s", got, want)
		}
	})

	t.Run("10k attributes and 1 MB values are clamped", func(t *testing.T) {
		many := otlptest.Span(20, 1, t0)
		for i := range 10_000 {
			many.Attributes = append(many.Attributes, kv(fmt.Sprintf("attr.%05d", i), str("v")))
		}
		huge := otlptest.Span(20, 2, t0)
		mb := strings.Repeat("é", 1<<19) // 1 MiB of two-byte runes: the cut must stay valid UTF-8
		huge.Attributes = append(huge.Attributes, kv("prompt", str(mb)), kv("completion", str(mb)), kv(strings.Repeat("k", 1<<20), str("long key")))
		huge.Name = strings.Repeat("n", 1<<19)
		req := otlptest.ExportOf(otlptest.Span(20, 0, t0), many, huge)
		t1 := time.Now()
		out, err := traces.Export(authed, req)
		if err != nil {
			t.Fatal(err)
		}
		if out.GetPartialSuccess().GetRejectedSpans() != 0 {
			t.Errorf("clamped spans were rejected: %v", out.GetPartialSuccess())
		}
		if took := time.Since(t1); took > 10*time.Second {
			t.Errorf("export took %s", took)
		}
		spansIn(t, srv.CH, otlptest.TraceHex(20), 3)
		r, err := srv.CH.Query(ctx, "SELECT length(attributes) AS n, arrayMax(arrayMap(v -> length(v), mapValues(attributes))) AS longest_value, "+
			"arrayMax(arrayMap(k -> length(k), mapKeys(attributes))) AS longest_key, length(name) AS name_len, "+
			"arrayMin(arrayMap(v -> isValidUTF8(v), mapValues(attributes))) AS utf8 FROM spans FINAL WHERE trace_id = ? ORDER BY span_id", otlptest.TraceHex(20))
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 2; i++ {
			row := r.Row(i)
			if n := row.Int("n"); n > 256 || (i == 1 && n != 256) {
				t.Errorf("span %d: %d attributes stored, want at most 256", i, n)
			}
			if v := row.Int("longest_value"); v > 16<<10 || (i == 2 && v < 16<<10-1) {
				t.Errorf("span %d: longest value %d bytes, want clamped to 16 KiB", i, v)
			}
			if k := row.Int("longest_key"); k > 256 {
				t.Errorf("span %d: longest key %d bytes", i, k)
			}
			if n := row.Int("name_len"); n > 1024 {
				t.Errorf("span %d: name %d bytes", i, n)
			}
			if row.Int("utf8") != 1 {
				t.Errorf("span %d: a clamped value is not valid UTF-8", i)
			}
		}
	})
}

// TestOTLPGRPCRefusals: the gRPC receiver refuses what the HTTP one does,
// with the gRPC codes exporters act on.
func TestOTLPGRPCRefusals(t *testing.T) {
	srv := startHardeningServer(t)
	conn, err := grpc.NewClient(srv.OTLPGRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	traces := coltracepb.NewTraceServiceClient(conn)
	ctx := context.Background()
	valid := otlptest.Traces(30, 2, time.Now().Add(-time.Minute))
	tooBig := otlptest.ExportOf(&tracepb.Span{Name: strings.Repeat("x", maxBody)})
	tests := []struct {
		name string
		md   []string
		req  *coltracepb.ExportTraceServiceRequest
		want codes.Code
	}{
		{"no key", nil, valid, codes.Unauthenticated},
		{"wrong key", []string{"authorization", "Bearer tp_wrong_key_000000000000"}, valid, codes.Unauthenticated},
		{"key without Bearer", []string{"authorization", apptest.Key}, valid, codes.Unauthenticated},
		{"message over the limit", []string{"authorization", "Bearer " + apptest.Key}, tooBig, codes.ResourceExhausted},
		{"valid", []string{"authorization", "Bearer " + apptest.Key}, valid, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cctx := ctx
			if tt.md != nil {
				cctx = metadata.AppendToOutgoingContext(ctx, tt.md...)
			}
			_, err := traces.Export(cctx, tt.req, grpc.MaxCallSendMsgSize(64<<20))
			if status.Code(err) != tt.want {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), apptest.Key) {
				t.Errorf("the API key is echoed back: %v", err)
			}
		})
	}
	// The server decodes the request bytes itself: garbage is the client's
	// fault (InvalidArgument), not an internal error.
	mdCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apptest.Key)
	var resp coltracepb.ExportTraceServiceResponse
	err = conn.Invoke(mdCtx, coltracepb.TraceService_Export_FullMethodName, rawBytes{0x0a, 0xff, 0xff, 0xff}, &resp,
		grpc.ForceCodecV2(rawClientCodec{grpcencoding.GetCodecV2(grpcproto.Name)}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "malformed OTLP traces protobuf") {
		t.Errorf("malformed protobuf: err = %v, want InvalidArgument", err)
	}
	spansIn(t, srv.CH, otlptest.TraceHex(30), 2)
}

// rawBytes is a request body sent as it is by rawClientCodec.
type rawBytes []byte

type rawClientCodec struct{ grpcencoding.CodecV2 }

func (c rawClientCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(rawBytes); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}
