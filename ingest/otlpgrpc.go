package ingest

import (
	"context"
	"errors"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor exporters use
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RegisterGRPC adds the OTLP trace, metrics and logs services to s.
func (r *Receiver) RegisterGRPC(s *grpc.Server) {
	coltracepb.RegisterTraceServiceServer(s, &grpcTraces{r: r})
	colmetricspb.RegisterMetricsServiceServer(s, &grpcMetrics{r: r})
	collogspb.RegisterLogsServiceServer(s, &grpcLogs{r: r})
}

// GRPCServerOptions bounds message size and connection resources.
func (r *Receiver) GRPCServerOptions() []grpc.ServerOption {
	limit := int(r.MaxBodyBytes)
	if limit <= 0 {
		limit = 16 << 20
	}
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit),
		grpc.MaxConcurrentStreams(256),
		// Bounded resources per client: a connection that never finishes its
		// handshake is dropped after 10 s, an idle one after 5 minutes, and
		// dead peers are found by keepalive pings.
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

func (r *Receiver) grpcProject(ctx context.Context, signal string) (uint32, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var header string
	if v := md.Get("authorization"); len(v) > 0 {
		header = v[0]
	}
	p, err := r.authenticate(ctx, header)
	if err != nil {
		r.Pipeline.Metrics.Requests.WithLabelValues(signal, "grpc", "unauthenticated").Inc()
		if errors.Is(err, errAuthUnavailable) {
			return 0, status.Error(codes.Unavailable, err.Error())
		}
		return 0, status.Error(codes.Unauthenticated, err.Error())
	}
	return p, nil
}

// grpcStatus maps pipeline errors: overload and storage trouble are
// retryable for exporters, nothing else reaches here.
func (r *Receiver) grpcStatus(signal string, err error) error {
	if errors.Is(err, ErrOverloaded) {
		r.Pipeline.Metrics.Requests.WithLabelValues(signal, "grpc", "overloaded").Inc()
		// OTLP exporters retry RESOURCE_EXHAUSTED only when the status
		// carries RetryInfo; without it they drop the data.
		st, derr := status.New(codes.ResourceExhausted, err.Error()).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(overloadRetryDelay)})
		if derr != nil {
			return status.Error(codes.ResourceExhausted, err.Error())
		}
		return st.Err()
	}
	r.Pipeline.Metrics.Requests.WithLabelValues(signal, "grpc", "error").Inc()
	r.Log.Error("otlp export failed", "signal", signal, "err", err)
	return status.Errorf(codes.Unavailable, "could not store the export: %v", err)
}

type grpcTraces struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (g *grpcTraces) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	p, err := g.r.grpcProject(ctx, "traces")
	if err != nil {
		return nil, err
	}
	resp, err := g.r.exportTraces(ctx, p, req, "grpc")
	if err != nil {
		return nil, g.r.grpcStatus("traces", err)
	}
	g.r.Pipeline.Metrics.Requests.WithLabelValues("traces", "grpc", "ok").Inc()
	return resp, nil
}

type grpcMetrics struct {
	colmetricspb.UnimplementedMetricsServiceServer
	r *Receiver
}

func (g *grpcMetrics) Export(ctx context.Context, req *colmetricspb.ExportMetricsServiceRequest) (*colmetricspb.ExportMetricsServiceResponse, error) {
	p, err := g.r.grpcProject(ctx, "metrics")
	if err != nil {
		return nil, err
	}
	resp, err := g.r.exportMetrics(ctx, p, req, "grpc")
	if err != nil {
		return nil, g.r.grpcStatus("metrics", err)
	}
	g.r.Pipeline.Metrics.Requests.WithLabelValues("metrics", "grpc", "ok").Inc()
	return resp, nil
}

type grpcLogs struct {
	collogspb.UnimplementedLogsServiceServer
	r *Receiver
}

func (g *grpcLogs) Export(ctx context.Context, req *collogspb.ExportLogsServiceRequest) (*collogspb.ExportLogsServiceResponse, error) {
	p, err := g.r.grpcProject(ctx, "logs")
	if err != nil {
		return nil, err
	}
	resp, err := g.r.exportLogs(ctx, p, req, "grpc")
	if err != nil {
		return nil, g.r.grpcStatus("logs", err)
	}
	g.r.Pipeline.Metrics.Requests.WithLabelValues("logs", "grpc", "ok").Inc()
	return resp, nil
}
