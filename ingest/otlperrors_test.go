package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Both protocols answer from one classification: the gRPC code, the
// OTLP/HTTP status derived from it, whether and when to retry, and the
// outcome counted.
func TestRefusalOf(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		code       codes.Code
		http       int
		retryAfter time.Duration
		outcome    string
		message    string
	}{
		{"malformed", malformedError{errors.New("bad wire type")}, codes.InvalidArgument, http.StatusBadRequest, 0, "invalid",
			"malformed OTLP traces protobuf: bad wire type"},
		{"overloaded", fmt.Errorf("submit: %w", ErrOverloaded), codes.ResourceExhausted, http.StatusTooManyRequests, overloadRetryDelay, "overloaded", ""},
		{"storage", errors.New("write log: no space left on device"), codes.Unavailable, http.StatusServiceUnavailable, storageRetryDelay, "error",
			"could not store the export: write log: no space left on device"},
	}
	for _, tc := range tests {
		f := refusalOf("traces", "protobuf", tc.err)
		if f.Code != tc.code || f.HTTP != tc.http || f.RetryAfter != tc.retryAfter || f.Outcome() != tc.outcome {
			t.Errorf("%s: %+v outcome %s, want %v/%d/%v/%s", tc.name, f, f.Outcome(), tc.code, tc.http, tc.retryAfter, tc.outcome)
		}
		if tc.message != "" && f.Message != tc.message {
			t.Errorf("%s: message %q, want %q", tc.name, f.Message, tc.message)
		}
		st, _ := status.FromError(f.GRPCStatus())
		if st.Code() != tc.code || st.Message() != f.Message {
			t.Errorf("%s: gRPC status %v %q", tc.name, st.Code(), st.Message())
		}
		var info *errdetails.RetryInfo
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				info = ri
			}
		}
		// Exporters retry RESOURCE_EXHAUSTED only with RetryInfo.
		if wantInfo := tc.code == codes.ResourceExhausted; (info != nil) != wantInfo ||
			(info != nil && info.GetRetryDelay().AsDuration() != tc.retryAfter) {
			t.Errorf("%s: RetryInfo %v", tc.name, info)
		}
	}

	for _, tc := range []struct {
		err     error
		code    codes.Code
		retry   bool
		outcome string
	}{
		{errUnauthenticated, codes.Unauthenticated, false, "unauthenticated"},
		{errAuthUnavailable, codes.Unavailable, true, "error"},
	} {
		f := authRefusal(tc.err)
		if f.Code != tc.code || f.HTTP != httpStatusOf(tc.code) || (f.RetryAfter > 0) != tc.retry || f.Outcome() != tc.outcome {
			t.Errorf("auth %v: %+v", tc.err, f)
		}
	}
	for status, code := range map[int]codes.Code{
		http.StatusMethodNotAllowed:      codes.Unknown,
		http.StatusUnsupportedMediaType:  codes.InvalidArgument,
		http.StatusRequestEntityTooLarge: codes.InvalidArgument,
	} {
		if f := httpRefusal(status, "x"); f.Code != code || f.HTTP != status || f.RetryAfter != 0 {
			t.Errorf("HTTP %d: %+v", status, f)
		}
	}
}
