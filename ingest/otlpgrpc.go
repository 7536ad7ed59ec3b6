package ingest

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcencoding "google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor exporters use
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
)

// RegisterGRPC adds the OTLP trace, metrics and logs services to s. The
// server must be built with GRPCServerOptions: its codec hands the services
// the request bytes as received.
func (r *Receiver) RegisterGRPC(s *grpc.Server) {
	s.RegisterService(rawService(coltracepb.TraceService_ServiceDesc, r.grpcExportTraces), r)
	s.RegisterService(rawService(colmetricspb.MetricsService_ServiceDesc, r.grpcExportMetrics), r)
	s.RegisterService(rawService(collogspb.LogsService_ServiceDesc, r.grpcExportLogs), r)
}

// rawExport is an export request as it came off the wire. The write-ahead
// log stores these bytes as they are, so an export is decoded once and
// never re-encoded.
type rawExport struct{ body []byte }

// rawCodec is the server's codec: it fills a *rawExport with the request
// bytes and leaves every other message to the standard protobuf codec.
type rawCodec struct{ grpcencoding.CodecV2 }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawExport); ok {
		r.body = data.Materialize()
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// rawService is the generated OTLP service description with its one Export
// method served by export over the raw request bytes.
func rawService(desc grpc.ServiceDesc, export func(context.Context, []byte) (any, error)) *grpc.ServiceDesc {
	method := desc.Methods[0]
	fullMethod := "/" + desc.ServiceName + "/" + method.MethodName
	method.Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(rawExport)
		if err := dec(in); err != nil {
			return nil, err
		}
		handle := func(ctx context.Context, req any) (any, error) { return export(ctx, req.(*rawExport).body) }
		if interceptor == nil {
			return handle(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, handle)
	}
	desc.Methods = []grpc.MethodDesc{method}
	desc.HandlerType = (*any)(nil)
	return &desc
}

// GRPCServerOptions bounds message size and connection resources.
func (r *Receiver) GRPCServerOptions() []grpc.ServerOption {
	limit := int(r.MaxBodyBytes)
	if limit <= 0 {
		limit = 16 << 20
	}
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{grpcencoding.GetCodecV2(grpcproto.Name)}),
		grpc.MaxRecvMsgSize(limit),
		// The key is checked from the stream's headers before its message
		// is read: an unauthenticated export costs no body memory
		// (TestGRPCRefusesUnauthenticatedBeforeReading).
		grpc.InTapHandle(r.grpcAuthTap),
		// gRPC reads a whole message before its handler runs, so a
		// connection holds at most grpcStreamsPerConn × MaxBodyBytes of
		// request bodies; clients queue further exports on their side.
		grpc.MaxConcurrentStreams(grpcStreamsPerConn),
		// Bounded resources per client: a connection that never finishes its
		// handshake is dropped after 10 s, an idle one after 5 minutes, and
		// dead peers are found by keepalive pings.
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(r.recoverPanics),
	}
}

// recoverPanics answers a panicking export with Internal instead of letting
// it end the process and every other client's connection with it: gRPC
// does not recover handlers, where net/http does for OTLP/HTTP. Internal
// is not retryable in OTLP: an export that panicked would panic again.
func (r *Receiver) recoverPanics(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.Log.Error("otlp export panicked", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "the server failed on this export: %v", p)
		}
	}()
	return handler(ctx, req)
}

// grpcStreamsPerConn bounds concurrent exports on one connection (HTTP/2
// streams), and with MaxBodyBytes the request bytes it can hold: 32 ×
// 16 MiB. The OTel Collector's exporter sends 10 at once by default.
const grpcStreamsPerConn = 32

// grpcAuthTimeout bounds the key lookup of a new stream: the tap runs on
// the connection's reader, which waits meanwhile.
const grpcAuthTimeout = 5 * time.Second

// grpcProjectKey carries the project grpcAuthTap authenticated.
type grpcProjectKey struct{}

// grpcAuthTap authenticates an OTLP stream from its authorization header
// when its headers arrive, before gRPC reads the message: a refused stream
// is reset at once and its body is never buffered. Other methods pass: the
// server registers none but OTLP's, and gRPC answers an unknown one
// Unimplemented without reading its message.
func (r *Receiver) grpcAuthTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	signal := grpcSignal(info.FullMethodName)
	if signal == "" {
		return ctx, nil
	}
	var header string
	if v := info.Header.Get("authorization"); len(v) > 0 {
		header = v[0]
	}
	actx, cancel := context.WithTimeout(ctx, grpcAuthTimeout)
	defer cancel()
	p, err := r.authenticate(actx, header)
	if err == nil {
		return context.WithValue(ctx, grpcProjectKey{}, p), nil
	}
	r.Pipeline.Metrics.Requests.WithLabelValues(signal, "grpc", "unauthenticated").Inc()
	if errors.Is(err, errAuthUnavailable) || actx.Err() != nil && ctx.Err() == nil {
		return nil, status.Error(codes.Unavailable, errAuthUnavailable.Error())
	}
	return nil, status.Error(codes.Unauthenticated, err.Error())
}

// grpcSignal names the OTLP signal of a gRPC method, "" for any other.
func grpcSignal(fullMethod string) string {
	switch fullMethod {
	case "/" + coltracepb.TraceService_ServiceDesc.ServiceName + "/Export":
		return "traces"
	case "/" + colmetricspb.MetricsService_ServiceDesc.ServiceName + "/Export":
		return "metrics"
	case "/" + collogspb.LogsService_ServiceDesc.ServiceName + "/Export":
		return "logs"
	}
	return ""
}

// grpcProject is the project grpcAuthTap authenticated the stream for.
func (r *Receiver) grpcProject(ctx context.Context, signal string) (uint32, error) {
	if p, ok := ctx.Value(grpcProjectKey{}).(uint32); ok {
		return p, nil
	}
	// A server built without GRPCServerOptions has no tap; refuse rather
	// than accept an export nobody authenticated.
	r.Pipeline.Metrics.Requests.WithLabelValues(signal, "grpc", "unauthenticated").Inc()
	return 0, status.Error(codes.Unauthenticated, "the stream was not authenticated: build the server with GRPCServerOptions")
}

// grpcStatus answers a failed export with the status refusalOf gives it,
// counting and logging it like OTLP/HTTP does.
func (r *Receiver) grpcStatus(signal string, err error) error {
	f := refusalOf(signal, "protobuf", err)
	r.Pipeline.Metrics.Requests.WithLabelValues(signal, "grpc", f.Outcome()).Inc()
	if f.Outcome() == "error" {
		r.Log.Error("otlp export failed", "signal", signal, "err", err)
	}
	return f.GRPCStatus()
}

// grpcExport authenticates, decodes and exports one request of a signal.
// With lazy, export gets a nil request and decodes body itself (a
// malformedError when it cannot).
func grpcExport[Req any, PReq interface {
	*Req
	proto.Message
}](r *Receiver, ctx context.Context, signal string, body []byte, lazy bool, export func(context.Context, uint32, PReq, []byte, string) (proto.Message, error)) (any, error) {
	t0 := time.Now()
	p, err := r.grpcProject(ctx, signal)
	if err != nil {
		return nil, err
	}
	if r.Pipeline.Saturated() {
		return nil, r.grpcStatus(signal, ErrOverloaded)
	}
	var req PReq
	if !lazy {
		req = PReq(new(Req))
		if err := proto.Unmarshal(body, req); err != nil {
			return nil, r.grpcStatus(signal, malformedError{err})
		}
	}
	resp, err := export(ctx, p, req, body, "grpc")
	if err != nil {
		return nil, r.grpcStatus(signal, err)
	}
	r.Pipeline.Metrics.Requests.WithLabelValues(signal, "grpc", "ok").Inc()
	r.Pipeline.Metrics.observeAck(signal, "grpc", time.Since(t0))
	return resp, nil
}

func (r *Receiver) grpcExportTraces(ctx context.Context, body []byte) (any, error) {
	return grpcExport(r, ctx, "traces", body, true, func(ctx context.Context, p uint32, req *coltracepb.ExportTraceServiceRequest, raw []byte, tr string) (proto.Message, error) {
		return r.exportTraces(ctx, p, req, raw, tr)
	})
}

func (r *Receiver) grpcExportMetrics(ctx context.Context, body []byte) (any, error) {
	return grpcExport(r, ctx, "metrics", body, false, func(ctx context.Context, p uint32, req *colmetricspb.ExportMetricsServiceRequest, raw []byte, tr string) (proto.Message, error) {
		return r.exportMetrics(ctx, p, req, raw, tr)
	})
}

func (r *Receiver) grpcExportLogs(ctx context.Context, body []byte) (any, error) {
	return grpcExport(r, ctx, "logs", body, false, func(ctx context.Context, p uint32, req *collogspb.ExportLogsServiceRequest, raw []byte, tr string) (proto.Message, error) {
		return r.exportLogs(ctx, p, req, raw, tr)
	})
}
