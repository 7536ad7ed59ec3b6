package reliability_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/app/apptest/otlptest"
)

// key is the bootstrap API key of every server these tests start.
const key = apptest.Key

// long reports whether the long mode (make test-reliability) was asked for.
func long() bool { return os.Getenv("TOKENPATH_RELIABILITY_LONG") != "" }

// pick returns the short-mode or the long-mode value.
func pick[T any](short, longValue T) T {
	if long() {
		return longValue
	}
	return short
}

// TestMain removes the built binary once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	apptest.RemoveServerBinary()
	os.Exit(code)
}

// startServer runs the real cmd/server binary on dataDir against the
// PostgreSQL at dbURL, with extra TOKENPATH_* settings in env.
func startServer(t *testing.T, dataDir, dbURL string, env ...string) *apptest.Process {
	t.Helper()
	return apptest.StartProcess(t, apptest.ServerBinary(t), apptest.ProcessOptions{DataDir: dataDir, DatabaseURL: dbURL, Env: env})
}

// rss is the server's resident set size now.
func rss(t *testing.T, srv *apptest.Process) int64 {
	t.Helper()
	now, _ := srv.Memory(t)
	return now
}

// goroutines reads go_goroutines from the server's /metrics.
func goroutines(t *testing.T, srv *apptest.Process) int {
	t.Helper()
	return int(srv.Metric(t, "go_goroutines"))
}

// httpResult is a finished request: status and body.
type httpResult struct {
	code       int
	body       string
	retryAfter string // the Retry-After header, if any
	err        error
}

// do sends one request with the API key and reads the whole answer.
func do(client *http.Client, method, url string, body []byte, contentType string) httpResult {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return httpResult{err: err}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return httpResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return httpResult{code: resp.StatusCode, body: string(b), retryAfter: resp.Header.Get("Retry-After"), err: err}
}

// exportTraces posts one OTLP/HTTP protobuf export of spansPer spans of
// trace seed (otlptest.Traces).
func exportTraces(client *http.Client, otlpHTTP string, seed uint64, spansPer int, t0 time.Time) httpResult {
	body, err := proto.Marshal(otlptest.Traces(seed, spansPer, t0))
	if err != nil {
		return httpResult{err: err}
	}
	return do(client, http.MethodPost, "http://"+otlpHTTP+"/v1/traces", body, "application/x-protobuf")
}

// grpcTraces is an OTLP/gRPC trace client of srv, closed at cleanup.
func grpcTraces(t *testing.T, srv *apptest.Process) coltracepb.TraceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(srv.OTLPGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return coltracepb.NewTraceServiceClient(conn)
}

// grpcExport sends one OTLP/gRPC export with the API key and returns its
// status code (codes.OK when acknowledged).
func grpcExport(client coltracepb.TraceServiceClient, req *coltracepb.ExportTraceServiceRequest) (codes.Code, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	_, err := client.Export(ctx, req)
	return status.Code(err), err
}

// tail is the last n bytes of s.
func tail(s string, n int) string { return apptest.Tail(s, n) }
