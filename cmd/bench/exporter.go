package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// exportOutcome is how the server answered one export.
type exportOutcome int

const (
	exportOK         exportOutcome = iota
	exportOverloaded               // HTTP 429 / gRPC RESOURCE_EXHAUSTED: back off and retry
	exportFailed                   // anything else: the spans may or may not be stored
)

// exporter sends one pre-encoded ExportTraceServiceRequest.
type exporter interface {
	// export returns the outcome, the retry delay the server asked for,
	// and how many spans an acknowledged export had refused (partial
	// success) with the reason.
	export(ctx context.Context, body []byte) (exportOutcome, time.Duration, int64, error)
	// warm opens the connection before a phase, so no export pays for it.
	warm(ctx context.Context)
	close() error
}

// rawMessage is an already-encoded protobuf message; rawCodec sends it as
// is, so the gRPC client does no marshaling work.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(rawMessage); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }

func (rawCodec) Name() string { return "proto" }

const traceExportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// grpcExporter is one OTLP/gRPC exporter with its own connection, as each
// app pod or collector has.
type grpcExporter struct {
	conn *grpc.ClientConn
	md   metadata.MD
}

func newGRPCExporter(addr, key string) (*grpcExporter, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &grpcExporter{conn: conn, md: metadata.Pairs("authorization", "Bearer "+key)}, nil
}

func (g *grpcExporter) export(ctx context.Context, body []byte) (exportOutcome, time.Duration, int64, error) {
	ctx = metadata.NewOutgoingContext(ctx, g.md)
	var resp coltracepb.ExportTraceServiceResponse
	err := g.conn.Invoke(ctx, traceExportMethod, rawMessage(body), &resp, grpc.ForceCodec(rawCodec{}))
	if err == nil {
		return partial(resp.GetPartialSuccess())
	}
	st := status.Convert(err)
	if st.Code() == codes.ResourceExhausted {
		delay := time.Duration(0)
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		return exportOverloaded, delay, 0, nil
	}
	return exportFailed, 0, 0, err
}

func partial(ps *coltracepb.ExportTracePartialSuccess) (exportOutcome, time.Duration, int64, error) {
	if n := ps.GetRejectedSpans(); n > 0 {
		return exportOK, 0, n, fmt.Errorf("server rejected %d spans: %s", n, ps.GetErrorMessage())
	}
	return exportOK, 0, 0, nil
}

func (g *grpcExporter) warm(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g.conn.Connect()
	for st := g.conn.GetState(); st != connectivity.Ready; st = g.conn.GetState() {
		if !g.conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}

func (g *grpcExporter) close() error { return g.conn.Close() }

// httpExporter is one OTLP/HTTP protobuf exporter (no compression: the
// client shares the machine's two cores with the server).
type httpExporter struct {
	client *http.Client
	url    string
	auth   string
}

func newHTTPExporter(addr, key string) *httpExporter {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        4,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	return &httpExporter{client: &http.Client{Transport: tr, Timeout: 60 * time.Second},
		url: "http://" + addr + "/v1/traces", auth: "Bearer " + key}
}

func (h *httpExporter) export(ctx context.Context, body []byte) (exportOutcome, time.Duration, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return exportFailed, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Authorization", h.auth)
	resp, err := h.client.Do(req)
	if err != nil {
		return exportFailed, 0, 0, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusOK:
		var out coltracepb.ExportTraceServiceResponse
		if err := proto.Unmarshal(msg, &out); err != nil {
			return exportFailed, 0, 0, fmt.Errorf("decode response: %w", err)
		}
		return partial(out.GetPartialSuccess())
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		delay := time.Duration(0)
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			delay = time.Duration(s) * time.Second
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			return exportOverloaded, delay, 0, nil
		}
		return exportFailed, delay, 0, fmt.Errorf("503: %s", bytes.TrimSpace(msg))
	}
	return exportFailed, 0, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
}

// warm is a no-op: net/http dials on the first request, a few hundred
// microseconds on loopback.
func (h *httpExporter) warm(context.Context) {}

func (h *httpExporter) close() error {
	h.client.CloseIdleConnections()
	return nil
}

func newExporter(transport, grpcAddr, httpAddr, key string) (exporter, error) {
	switch transport {
	case "grpc":
		return newGRPCExporter(grpcAddr, key)
	case "http":
		return newHTTPExporter(httpAddr, key), nil
	}
	return nil, errors.New("unknown transport " + transport)
}
