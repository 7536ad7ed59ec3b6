package apptest

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The clients tests use to talk to a Server as an application and a user
// would: the OTel SDK's OTLP/HTTP exporters and the REST API, both with Key.

// TraceExporter is the OTel SDK's OTLP/HTTP span exporter sending to the
// server's receiver.
func (s *Server) TraceExporter(t testing.TB) sdktrace.SpanExporter {
	t.Helper()
	e, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(s.OTLPHTTPAddr), otlptracehttp.WithInsecure(),
		otlptracehttp.WithHeaders(map[string]string{"Authorization": "Bearer " + Key}))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// MetricExporter is the OTel SDK's OTLP/HTTP metric exporter sending to
// the server's receiver, with opts after the endpoint and key.
func (s *Server) MetricExporter(t testing.TB, opts ...otlpmetrichttp.Option) sdkmetric.Exporter {
	t.Helper()
	e, err := otlpmetrichttp.New(context.Background(), append([]otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(s.OTLPHTTPAddr),
		otlpmetrichttp.WithInsecure(), otlpmetrichttp.WithHeaders(map[string]string{"Authorization": "Bearer " + Key})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// GetJSON GETs an API path (with its query) and decodes the answer into
// out; an answer other than 200 fails the test.
func (s *Server) GetJSON(t testing.TB, path string, out any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
