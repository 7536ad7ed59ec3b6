package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// storageRetryDelay is the back-off suggested when the export could not be
// stored (log write failed, disk full) or the key store is unreachable:
// both usually clear within seconds.
const storageRetryDelay = 5 * time.Second

// exportRefusal is how the OTLP edge answers an export it does not accept,
// whichever protocol carried it. The gRPC code decides; OTLP/HTTP takes its
// status from it (httpStatusOf) and both name the outcome the same, as the
// Collector's receiver/otlpreceiver/internal/errors (GetStatusFromError,
// GetHTTPStatusCodeFromStatus) does for its two protocols.
type exportRefusal struct {
	Code codes.Code
	// HTTP is OTLP/HTTP's status: httpStatusOf(Code), unless a refusal
	// only HTTP has (405, 413, 415) sets it.
	HTTP int
	// RetryAfter > 0 marks a retryable refusal and how long to wait:
	// Retry-After on HTTP, RetryInfo on gRPC's RESOURCE_EXHAUSTED.
	RetryAfter time.Duration
	Message    string
}

// refusalOf classifies an error from a receiver's export path: malformed
// bodies are permanent (InvalidArgument), an overloaded pipeline and
// anything else (the log or the store failing) are retryable.
func refusalOf(signal, encoding string, err error) exportRefusal {
	var bad malformedError
	switch {
	case errors.As(err, &bad):
		return newRefusal(codes.InvalidArgument, 0, "malformed OTLP %s %s: %v", signal, encoding, bad.err)
	case errors.Is(err, ErrOverloaded):
		return newRefusal(codes.ResourceExhausted, overloadRetryDelay, "%s", err.Error())
	default:
		return newRefusal(codes.Unavailable, storageRetryDelay, "could not store the export: %v", err)
	}
}

// authRefusal answers a key that could not be checked (retryable) or was
// refused (permanent).
func authRefusal(err error) exportRefusal {
	if errors.Is(err, errAuthUnavailable) {
		return newRefusal(codes.Unavailable, storageRetryDelay, "%s", err.Error())
	}
	return newRefusal(codes.Unauthenticated, 0, "%s", err.Error())
}

func newRefusal(code codes.Code, retryAfter time.Duration, format string, args ...any) exportRefusal {
	return exportRefusal{Code: code, HTTP: httpStatusOf(code), RetryAfter: retryAfter, Message: fmt.Sprintf(format, args...)}
}

// httpRefusal is a refusal only OTLP/HTTP has (wrong method, media type,
// encoding or size); the status body names InvalidArgument for what the
// client must change in the request, Unknown otherwise.
func httpRefusal(httpStatus int, format string, args ...any) exportRefusal {
	code := codes.Unknown
	switch httpStatus {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		code = codes.InvalidArgument
	}
	return exportRefusal{Code: code, HTTP: httpStatus, Message: fmt.Sprintf(format, args...)}
}

// httpStatusOf is OTLP/HTTP's status for a gRPC code, after the OTLP
// specification's failure tables (opentelemetry-proto
// docs/specification.md, "Failures"): retryable codes map to 503 and 429.
func httpStatusOf(code codes.Code) int {
	switch code {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return http.StatusServiceUnavailable
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// Outcome is the refusal's outcome label on tokenpath_ingest_requests_total.
func (f exportRefusal) Outcome() string {
	switch f.Code {
	case codes.ResourceExhausted:
		return "overloaded"
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.InvalidArgument:
		return "invalid"
	}
	return "error"
}

// GRPCStatus is the refusal as a gRPC status error. OTLP exporters retry
// RESOURCE_EXHAUSTED only when the status carries RetryInfo; without it
// they drop the data.
func (f exportRefusal) GRPCStatus() error {
	st := status.New(f.Code, f.Message)
	if f.Code == codes.ResourceExhausted && f.RetryAfter > 0 {
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(f.RetryAfter)}); err == nil {
			return withInfo.Err()
		}
	}
	return st.Err()
}
