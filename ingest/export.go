// Package ingest receives telemetry — OTLP over gRPC and HTTP, Prometheus
// scrapes, scaling events — validates and normalizes it, makes it durable in
// a write-ahead log before acknowledging, and writes it to ClickHouse in
// large batches. It is the only package that knows OTLP.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// Authenticator maps an API key to its project.
type Authenticator interface {
	ProjectForKey(ctx context.Context, key string) (int64, error)
}

// Receiver holds what both OTLP transports share: auth, limits,
// normalization and the pipeline.
type Receiver struct {
	Pipeline     *Pipeline
	Auth         Authenticator
	MaxBodyBytes int64
	Limits       normalize.Limits
	Log          *slog.Logger
	Now          func() time.Time
}

// Export errors, mapped to each protocol's status by the transports.
var (
	errUnauthenticated = errors.New("missing or invalid API key: send Authorization: Bearer <key>")
	errAuthUnavailable = errors.New("cannot check the API key right now (PostgreSQL unreachable); retry later")
)

func (r *Receiver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// authenticate resolves "Bearer <key>" to a project id.
func (r *Receiver) authenticate(ctx context.Context, header string) (uint32, error) {
	key, ok := strings.CutPrefix(strings.TrimSpace(header), "Bearer ")
	if !ok {
		key, ok = strings.CutPrefix(strings.TrimSpace(header), "bearer ")
	}
	if !ok || strings.TrimSpace(key) == "" {
		return 0, errUnauthenticated
	}
	id, err := r.Auth.ProjectForKey(ctx, strings.TrimSpace(key))
	switch {
	case err == nil:
		return uint32(id), nil
	case ctx.Err() != nil:
		// The exporter gave up. A deadline inside the lookup (PostgreSQL
		// not answering) is not this case: it is unavailable, not 401.
		return 0, ctx.Err()
	case isUnknownKey(err):
		return 0, errUnauthenticated
	}
	r.Log.Error("api key lookup failed", "err", err)
	return 0, errAuthUnavailable
}

func isUnknownKey(err error) bool { return errors.Is(err, postgres.ErrUnknownKey) }

// outcome of one export: items accepted and rejected, and why.
type outcome struct {
	accepted, rejected int64
	message            string
}

func joinReasons(errs []string) string {
	if len(errs) == 0 {
		return ""
	}
	return strings.Join(errs, "; ")
}

// submit makes the accepted rows of one export durable. raw is the request
// as received in protobuf (nil when it came as JSON): the write-ahead log
// keeps those bytes rather than re-encoding msg.
func (r *Receiver) submit(ctx context.Context, kind Kind, project uint32, msg proto.Message, raw []byte, rows Rows, signal, transport string, rejected int64, reasons []string) (outcome, error) {
	received := int64(rows.count()) + rejected
	r.Pipeline.Metrics.Received.WithLabelValues(signal, transport).Add(float64(received))
	r.Pipeline.Metrics.Rejected.WithLabelValues(signal, transport).Add(float64(rejected))
	out := outcome{rejected: rejected, message: joinReasons(reasons)}
	if rows.count() > 0 {
		payload := raw
		if payload == nil {
			var err error
			if payload, err = proto.Marshal(msg); err != nil {
				return out, fmt.Errorf("encode request: %w", err)
			}
		}
		if err := r.Pipeline.Submit(ctx, Record{Kind: kind, ProjectID: project, Received: r.now(), Payload: payload}, rows); err != nil {
			return out, err
		}
	}
	out.accepted = int64(rows.count())
	r.Pipeline.Metrics.Accepted.WithLabelValues(signal, transport).Add(float64(out.accepted))
	return out, nil
}

// exportTraces stores one trace export: req when it came as JSON, else
// raw, the protobuf body, decoded here (a malformedError if it is not
// protobuf).
func (r *Receiver) exportTraces(ctx context.Context, project uint32, req *coltracepb.ExportTraceServiceRequest, raw []byte, transport string) (*coltracepb.ExportTraceServiceResponse, error) {
	var res normalize.TraceResult
	if req != nil {
		res = normalize.Traces(project, req, r.now(), r.Limits)
	} else {
		var err error
		if res, err = tracesAttrsFromProtobuf(project, raw, r.now(), r.Limits); err != nil {
			return nil, err
		}
	}
	out, err := r.submit(ctx, KindTraces, project, req, raw, Rows{Spans: res.Spans, spanAttrs: res.Attrs}, "traces", transport, res.Rejected, res.Errors)
	if err != nil {
		return nil, err
	}
	resp := &coltracepb.ExportTraceServiceResponse{}
	if out.rejected > 0 || out.message != "" {
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{RejectedSpans: out.rejected, ErrorMessage: out.message}
	}
	return resp, nil
}

// malformedError is a request body that is not valid protobuf: the
// client's mistake (HTTP 400, gRPC INVALID_ARGUMENT), never retried.
type malformedError struct{ err error }

func (e malformedError) Error() string { return e.err.Error() }

// tracesFromProtobuf normalizes a protobuf trace export. The wire reader
// takes the encodings SDKs and collectors send without building the
// generated structs (the largest receiver cost); anything else goes
// through the generated decoder, which yields the same rows.
func tracesFromProtobuf(project uint32, body []byte, now time.Time, lim normalize.Limits) (normalize.TraceResult, error) {
	res, err := tracesAttrsFromProtobuf(project, body, now, lim)
	res.MaterializeAttrs()
	return res, err
}

// tracesAttrsFromProtobuf is tracesFromProtobuf with the attributes of
// wire-read spans left in res.Attrs (normalize.TracesWireAttrs): the
// pipeline encodes them for the embedded engine without building maps.
func tracesAttrsFromProtobuf(project uint32, body []byte, now time.Time, lim normalize.Limits) (normalize.TraceResult, error) {
	if res, ok := normalize.TracesWireAttrs(project, body, now, lim); ok {
		return res, nil
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return normalize.TraceResult{}, malformedError{err}
	}
	return normalize.Traces(project, &req, now, lim), nil
}

func (r *Receiver) exportMetrics(ctx context.Context, project uint32, req *colmetricspb.ExportMetricsServiceRequest, raw []byte, transport string) (*colmetricspb.ExportMetricsServiceResponse, error) {
	res := normalize.Metrics(project, req, r.now(), r.Limits)
	out, err := r.submit(ctx, KindMetrics, project, req, raw, Rows{Points: res.Points, Histograms: res.Histograms}, "metrics", transport, res.Rejected, res.Errors)
	if err != nil {
		return nil, err
	}
	resp := &colmetricspb.ExportMetricsServiceResponse{}
	if out.rejected > 0 || out.message != "" {
		resp.PartialSuccess = &colmetricspb.ExportMetricsPartialSuccess{RejectedDataPoints: out.rejected, ErrorMessage: out.message}
	}
	return resp, nil
}

func (r *Receiver) exportLogs(ctx context.Context, project uint32, req *collogspb.ExportLogsServiceRequest, raw []byte, transport string) (*collogspb.ExportLogsServiceResponse, error) {
	res := normalize.Logs(project, req, r.now(), r.Limits)
	out, err := r.submit(ctx, KindLogs, project, req, raw, Rows{Events: res.Events}, "logs", transport, res.Rejected, res.Errors)
	if err != nil {
		return nil, err
	}
	resp := &collogspb.ExportLogsServiceResponse{}
	if out.rejected > 0 || out.message != "" {
		resp.PartialSuccess = &collogspb.ExportLogsPartialSuccess{RejectedLogRecords: out.rejected, ErrorMessage: out.message}
	}
	return resp, nil
}
