package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// HTTPHandler serves OTLP/HTTP: /v1/traces, /v1/metrics and /v1/logs, in
// protobuf or JSON, optionally gzip-compressed, answering in the request's
// encoding as the OTLP specification asks.
func (r *Receiver) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	// Protobuf trace bodies are decoded by exportTraces (the wire reader).
	mux.HandleFunc("/v1/traces", r.handle("traces", func() proto.Message { return &coltracepb.ExportTraceServiceRequest{} }, true,
		func(ctx context.Context, p uint32, m proto.Message, raw []byte) (proto.Message, error) {
			req, _ := m.(*coltracepb.ExportTraceServiceRequest) // nil for protobuf
			return r.exportTraces(ctx, p, req, raw, "http")
		}))
	mux.HandleFunc("/v1/metrics", r.handle("metrics", func() proto.Message { return &colmetricspb.ExportMetricsServiceRequest{} }, false,
		func(ctx context.Context, p uint32, m proto.Message, raw []byte) (proto.Message, error) {
			return r.exportMetrics(ctx, p, m.(*colmetricspb.ExportMetricsServiceRequest), raw, "http")
		}))
	mux.HandleFunc("/v1/logs", r.handle("logs", func() proto.Message { return &collogspb.ExportLogsServiceRequest{} }, false,
		func(ctx context.Context, p uint32, m proto.Message, raw []byte) (proto.Message, error) {
			return r.exportLogs(ctx, p, m.(*collogspb.ExportLogsServiceRequest), raw, "http")
		}))
	return mux
}

type encoding int

const (
	encProto encoding = iota
	encJSON
)

// encodingName names an encoding in error messages.
var encodingName = map[encoding]string{encProto: "protobuf", encJSON: "JSON"}

// handle serves one signal. With lazyProto, a protobuf body is not decoded
// here: export gets a nil message and decodes raw itself, returning a
// malformedError when it cannot.
func (r *Receiver) handle(signal string, newReq func() proto.Message, lazyProto bool, export func(context.Context, uint32, proto.Message, []byte) (proto.Message, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		t0 := time.Now()
		enc := encProto
		mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
		if mt == "application/json" {
			enc = encJSON
		}
		// The method first: a GET carries no Content-Type and must hear 405,
		// not 415.
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			r.fail(w, enc, signal, httpRefusal(http.StatusMethodNotAllowed, "use POST"))
			return
		}
		switch mt {
		case "application/x-protobuf", "application/protobuf", "application/json":
		default:
			r.fail(w, enc, signal, httpRefusal(http.StatusUnsupportedMediaType, "unsupported Content-Type %q: send application/x-protobuf or application/json", mt))
			return
		}
		// OTLP/HTTP answers in the request's media type.
		if enc == encProto {
			w.Header().Set("Content-Type", mt)
		}
		project, err := r.authenticate(req.Context(), req.Header.Get("Authorization"))
		if err != nil {
			r.fail(w, enc, signal, authRefusal(err))
			return
		}
		if r.Pipeline.Saturated() {
			r.fail(w, enc, signal, refusalOf(signal, encodingName[enc], ErrOverloaded))
			return
		}
		body, code, err := r.readBody(w, req)
		if err != nil {
			r.fail(w, enc, signal, httpRefusal(code, "%s", err.Error()))
			return
		}
		var msg proto.Message
		if enc != encProto || !lazyProto {
			msg = newReq()
			if err := unmarshal(enc, body, msg); err != nil {
				r.fail(w, enc, signal, refusalOf(signal, encodingName[enc], malformedError{err}))
				return
			}
		}
		// A protobuf body goes to the write-ahead log as received.
		var raw []byte
		if enc == encProto {
			raw = body
		}
		resp, err := export(req.Context(), project, msg, raw)
		if err != nil {
			f := refusalOf(signal, encodingName[enc], err)
			if f.Outcome() == "error" {
				r.Log.Error("otlp export failed", "signal", signal, "err", err)
			}
			r.fail(w, enc, signal, f)
			return
		}
		r.Pipeline.Metrics.Requests.WithLabelValues(signal, "http", "ok").Inc()
		r.Pipeline.Metrics.observeAck(signal, "http", time.Since(t0))
		r.write(w, enc, http.StatusOK, resp)
	}
}

// readBody reads at most MaxBodyBytes, before and after gzip, so neither a
// huge body nor a gzip bomb can exhaust memory.
func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) ([]byte, int, error) {
	limit := r.MaxBodyBytes
	if limit <= 0 {
		limit = 16 << 20
	}
	var src io.Reader = http.MaxBytesReader(w, req.Body, limit)
	switch ce := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, tooLargeOr(err, http.StatusBadRequest), fmt.Errorf("invalid gzip body: %w", err)
		}
		defer zr.Close()
		src = zr
	default:
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("unsupported Content-Encoding %q: send gzip or none", ce)
	}
	// Sized from Content-Length when the body is not compressed: a 1 MB
	// export read by io.ReadAll is copied several times over as its buffer
	// grows in steps.
	size := int64(bytes.MinRead)
	if req.ContentLength > 0 && req.Header.Get("Content-Encoding") == "" {
		size = min(req.ContentLength, limit) + bytes.MinRead
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(io.LimitReader(src, limit+1))
	body := buf.Bytes()
	if err != nil {
		return nil, tooLargeOr(err, http.StatusBadRequest), fmt.Errorf("read body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body exceeds %d bytes after decompression (TOKENPATH_MAX_BODY_BYTES)", limit)
	}
	return body, 0, nil
}

func tooLargeOr(err error, code int) int {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	return code
}

func unmarshal(enc encoding, body []byte, msg proto.Message) error {
	if enc == encProto {
		return proto.Unmarshal(body, msg)
	}
	fixed, err := hexIDsToBase64(body)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(fixed, msg)
}

// OTLP/JSON writes trace and span ids as hex, while protojson expects bytes
// fields in base64; rewrite those fields before decoding.
var idFields = map[string]int{"traceId": 16, "spanId": 8, "parentSpanId": 8}

func hexIDsToBase64(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	// Decode stops after one value; junk after it is a malformed body.
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	if err := fixIDs(v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func fixIDs(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if n, ok := idFields[k]; ok {
				if s, ok := e.(string); ok && s != "" {
					b, err := hex.DecodeString(s)
					if err != nil || len(b) != n {
						return fmt.Errorf("%s %q is not %d hex-encoded bytes", k, s, n)
					}
					x[k] = base64.StdEncoding.EncodeToString(b)
				}
				continue
			}
			if err := fixIDs(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := fixIDs(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Receiver) write(w http.ResponseWriter, enc encoding, code int, msg proto.Message) {
	var (
		out []byte
		err error
	)
	if enc == encJSON {
		w.Header().Set("Content-Type", "application/json")
		out, err = protojson.Marshal(msg)
	} else {
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/x-protobuf")
		}
		out, err = proto.Marshal(msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(code)
	_, _ = w.Write(out)
}

// fail answers a refused export with a google.rpc.Status body, as
// OTLP/HTTP specifies, and a Retry-After when it is worth retrying.
func (r *Receiver) fail(w http.ResponseWriter, enc encoding, signal string, f exportRefusal) {
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(f.RetryAfter/time.Second)))
	}
	r.Pipeline.Metrics.Requests.WithLabelValues(signal, "http", f.Outcome()).Inc()
	r.write(w, enc, f.HTTP, &status.Status{Code: int32(f.Code), Message: f.Message})
}
