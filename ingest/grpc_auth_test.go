package ingest

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	dto "github.com/prometheus/client_model/go"
)

// countingListener counts the bytes the server reads from every
// connection it accepts.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return countingConn{c, l.read}, err
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// An OTLP/gRPC export without a valid key is refused from its headers:
// the server reads a few flow-control windows of it, not its body, so
// unauthenticated clients cannot make it buffer messages.
func TestGRPCRefusesUnauthenticatedBeforeReading(t *testing.T) {
	p, err := NewPipeline(filepath.Join(t.TempDir(), "wal"), nil, PipelineConfig{}, QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	recv := &Receiver{Pipeline: p, Auth: keyAuth(testKey), Log: QuietLog}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	gs := grpc.NewServer(recv.GRPCServerOptions()...)
	recv.RegisterGRPC(gs)
	go func() { _ = gs.Serve(countingListener{ln, &read}) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := coltracepb.NewTraceServiceClient(conn)

	// 8 MiB of attribute-free padding in one resource: a valid message.
	big := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{SchemaUrl: string(make([]byte, 8<<20))}}}
	const calls = 8
	for _, auth := range []string{"", "Bearer not-a-key"} {
		for range calls {
			ctx := context.Background()
			if auth != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
			}
			if _, err := client.Export(ctx, big); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("export with authorization %q: %v, want Unauthenticated", auth, err)
			}
		}
	}
	sent := int64(2 * calls * 8 << 20)
	if n := read.Load(); n > sent/16 {
		t.Errorf("the server read %d MiB of %d MiB sent without a key; want the bodies left unread", n>>20, sent>>20)
	}
	var m dto.Metric
	if err := p.Metrics.Requests.WithLabelValues("traces", "grpc", "unauthenticated").Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 2*calls {
		t.Errorf("unauthenticated counter %v, want %d", n, 2*calls)
	}
	// The right key still exports.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testKey)
	small := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{SchemaUrl: "x"}}}
	if _, err := client.Export(ctx, small); err != nil {
		t.Fatalf("export with the key: %v", err)
	}
}
