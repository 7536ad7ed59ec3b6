package ingest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// keyAuth accepts one key, for project 7.
type keyAuth string

func (k keyAuth) ProjectForKey(ctx context.Context, key string) (int64, error) {
	if key == string(k) {
		return 7, nil
	}
	return 0, postgres.ErrUnknownKey
}

const testKey = "tp_overload_test_key_0123"

// testReceiver serves a receiver over real HTTP and gRPC listeners on
// 127.0.0.1.
type testReceiver struct {
	recv     *Receiver
	httpURL  string
	grpcConn *grpc.ClientConn
	traces   coltracepb.TraceServiceClient
}

func startTestReceiver(t *testing.T, p *Pipeline) *testReceiver {
	t.Helper()
	recv := &Receiver{Pipeline: p, Auth: keyAuth(testKey), Log: QuietLog}
	hs := httptest.NewServer(recv.HTTPHandler())
	t.Cleanup(hs.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(recv.GRPCServerOptions()...)
	recv.RegisterGRPC(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &testReceiver{recv: recv, httpURL: hs.URL, grpcConn: conn, traces: coltracepb.NewTraceServiceClient(conn)}
}

func postProto(t *testing.T, url string, msg proto.Message) *http.Response {
	t.Helper()
	body, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func walBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	var n int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// TestOverload: with the writer stalled (Pipeline.Run not running), exports
// beyond MaxPendingRows are refused with HTTP 429 + Retry-After and gRPC
// RESOURCE_EXHAUSTED + RetryInfo, nothing more is buffered in memory or in
// the log, and once the writer catches up the acknowledged exports — and
// only those — are in ClickHouse and exports are accepted again.
func TestOverload(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ch := openTestStore(t, filepath.Join(dir, "clickhouse"))
	walDir := filepath.Join(dir, "wal")
	p, err := NewPipeline(walDir, ch, PipelineConfig{MaxPendingRows: 10}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wal.Close()
	srv := startTestReceiver(t, p)
	t0 := time.Now().Add(-time.Minute)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testKey)

	// 4 + 4 rows fit under the limit of 10.
	for seed := uint64(1); seed <= 2; seed++ {
		resp := postProto(t, srv.httpURL+"/v1/traces", otlptest.Traces(seed, 4, t0))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("export %d under the limit: HTTP %d", seed, resp.StatusCode)
		}
	}
	acked := walBytes(t, walDir)

	for i := range 50 {
		seed := uint64(100 + i)
		resp := postProto(t, srv.httpURL+"/v1/traces", otlptest.Traces(seed, 4, t0))
		var st rpcstatus.Status
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
			t.Fatalf("export over the limit: HTTP %d, Retry-After %q; want 429 with Retry-After 2", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if err := proto.Unmarshal(buf.Bytes(), &st); err != nil || codes.Code(st.Code) != codes.ResourceExhausted || st.Message == "" {
			t.Fatalf("429 body: %v %+v, want a google.rpc.Status RESOURCE_EXHAUSTED", err, &st)
		}

		_, err := srv.traces.Export(authed, otlptest.Traces(seed+1000, 4, t0))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("gRPC export over the limit: %v, want RESOURCE_EXHAUSTED", err)
		}
		var delay time.Duration
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		if delay != 2*time.Second {
			t.Fatalf("RESOURCE_EXHAUSTED retry delay %s, want 2s in RetryInfo (exporters drop data without it)", delay)
		}
	}
	// Refused exports cost neither memory nor log space.
	if n := p.nPend.Load(); n != 8 {
		t.Errorf("%d rows pending after the refusals, want 8", n)
	}
	if got := walBytes(t, walDir); got != acked {
		t.Errorf("write-ahead log grew from %d to %d bytes with refused exports", acked, got)
	}
	if got := gatherGauge(t, p, "tokenpath_ingest_queue_rows"); got != 8 {
		t.Errorf("queue gauge %v, want 8", got)
	}

	// An OTel SDK exporter retries RESOURCE_EXHAUSTED when RetryInfo says so:
	// start one now and let the writer catch up while it waits.
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithGRPCConn(srv.grpcConn), otlptracegrpc.WithHeaders(map[string]string{"Authorization": "Bearer " + testKey}),
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: 15 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	stubs := tracetest.SpanStubs{}
	for i := range 3 {
		stubs = append(stubs, tracetest.SpanStub{Name: "retried", StartTime: t0, EndTime: t0.Add(time.Second),
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(otlptest.TraceID(500)), SpanID: trace.SpanID{0, 0, 0, 0, 0, 0, 0, byte(i + 1)}})})
	}
	// 8 pending + 3 > 10: refused until the flush below.
	exported := make(chan error, 1)
	go func() { exported <- exp.ExportSpans(ctx, stubs.Snapshots()) }()
	time.Sleep(300 * time.Millisecond)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exported:
		if err != nil {
			t.Fatalf("SDK exporter gave up on RESOURCE_EXHAUSTED: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("SDK exporter still retrying after 20s")
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = exp.Shutdown(ctx)

	// Exactly the acknowledged spans are stored.
	for seed, want := range map[uint64]int64{1: 4, 2: 4, 500: 3, 100: 0, 1100: 0, 149: 0} {
		if n := count(t, ch, "SELECT count() AS n FROM spans FINAL WHERE trace_id = ?", otlptest.TraceHex(seed)); n != want {
			t.Errorf("trace %d: %d spans stored, want %d", seed, n, want)
		}
	}
	if n := p.nPend.Load(); n != 0 {
		t.Errorf("%d rows pending after the flush, want 0", n)
	}
}

// gatherGauge reads one unlabelled gauge from the pipeline's registry.
func gatherGauge(t *testing.T, p *Pipeline, name string) float64 {
	t.Helper()
	mfs, err := p.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("gauge %s not found", name)
	return 0
}

// A saturated pipeline refuses an export before reading it: even a body
// that would not decode gets 429, so overload costs no decode CPU.
func TestSaturatedRefusesBeforeDecoding(t *testing.T) {
	dir := t.TempDir()
	ch := openTestStore(t, filepath.Join(dir, "clickhouse"))
	p, err := NewPipeline(filepath.Join(dir, "wal"), ch, PipelineConfig{MaxPendingRows: 4}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer p.wal.Close()
	srv := startTestReceiver(t, p)
	resp := postProto(t, srv.httpURL+"/v1/traces", otlptest.Traces(1, 4, time.Now().Add(-time.Minute)))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export up to the limit: HTTP %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.httpURL+"/v1/traces", bytes.NewReader([]byte("\xff\xff not protobuf")))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("malformed export to a saturated pipeline: HTTP %d, want 429 with Retry-After", resp.StatusCode)
	}
	_, err = srv.traces.Export(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testKey), otlptest.Traces(2, 1, time.Now()))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("gRPC export to a saturated pipeline: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// Health names the reason exports are failing and clears on the next
// durable one.
func TestHealthFollowsTheWriteAheadLog(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPipeline(filepath.Join(dir, "wal"), nil, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.wal.Close() }()
	ctx := context.Background()
	recv := &Receiver{Pipeline: p, Log: QuietLog}
	t0 := time.Now().Add(-time.Minute)
	export := func(seed uint64) error {
		_, err := recv.exportTraces(ctx, 7, otlptest.Traces(seed, 2, t0), nil, "test")
		return err
	}
	if err := export(1); err != nil || p.Health() != nil {
		t.Fatalf("healthy export: %v, health %v", err, p.Health())
	}
	// The log stops taking appends (as when its disk fills): the export
	// fails and Health says why.
	p.wal.Close()
	if err := export(2); err == nil {
		t.Fatal("export to a closed log succeeded")
	}
	if h := p.Health(); !errors.Is(h, ErrWALClosed) {
		t.Fatalf("health after a failed append: %v, want ErrWALClosed", h)
	}
	// A working log again: the next durable export clears it.
	if p.wal, err = OpenWAL(filepath.Join(dir, "wal2")); err != nil {
		t.Fatal(err)
	}
	if err := export(3); err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); h != nil {
		t.Fatalf("health after a durable export: %v", h)
	}
}
