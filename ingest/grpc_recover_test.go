package ingest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// panicky panics on its first check and answers the next.
type panicky struct {
	grpc_health_v1.UnimplementedHealthServer
	calls int
}

func (p *panicky) Check(context.Context, *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if p.calls++; p.calls == 1 {
		panic("a decoder bug")
	}
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// A handler's panic under the receiver's server options is answered
// Internal and the server keeps serving.
func TestGRPCPanicIsAnsweredNotFatal(t *testing.T) {
	r := &Receiver{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := grpc.NewServer(r.GRPCServerOptions()...)
	grpc_health_v1.RegisterHealthServer(srv, &panicky{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := grpc_health_v1.NewHealthClient(conn)
	_, err = client.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "a decoder bug") {
		t.Fatalf("a panicking handler answered %v, want Internal naming the panic", err)
	}
	resp, err := client.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
	if err != nil || resp.Status != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("after the panic: %v %v, want SERVING", resp, err)
	}
}
