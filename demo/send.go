package demo

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Batch sizes per export request, about what an SDK's batch processor or
// the Collector sends.
const (
	spansPerExport   = 2000
	pointsPerExport  = 5000
	eventsPerRequest = 500
)

// Retry policy for transient failures (429, 502–504, timeouts):
// exponential backoff, Retry-After honoured. The OTLP exporters and the
// events requests share it.
const (
	retryInitial  = 250 * time.Millisecond
	retryMaxDelay = 10 * time.Second
	retryMaxTotal = 2 * time.Minute
	// requestTimeout bounds one attempt.
	requestTimeout = 30 * time.Second
)

// sender exports through the OTel Go SDK's OTLP/HTTP exporters and posts
// scale events to the events API.
type sender struct {
	cfg     Config
	spans   *otlptrace.Exporter
	metrics *otlpmetrichttp.Exporter
	client  *http.Client // events API
}

// newSender sets up the exporters: gzip, the Bearer key, retries on; each
// export call is synchronous, so nothing waits in a queue that could
// overflow or be lost at exit.
func newSender(ctx context.Context, cfg Config) (*sender, error) {
	headers := map[string]string{}
	if cfg.APIKey != "" {
		headers["Authorization"] = "Bearer " + cfg.APIKey
	}
	spans, err := otlptracehttp.New(ctx,
		otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint+"/v1/traces"),
		otlptracehttp.WithHeaders(headers),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
		otlptracehttp.WithTimeout(requestTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{
			Enabled: true, InitialInterval: retryInitial, MaxInterval: retryMaxDelay, MaxElapsedTime: retryMaxTotal,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("trace exporter: %w", err)
	}
	metrics, err := otlpmetrichttp.New(ctx,
		otlpmetrichttp.WithEndpointURL(cfg.OTLPEndpoint+"/v1/metrics"),
		otlpmetrichttp.WithHeaders(headers),
		otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression),
		otlpmetrichttp.WithTimeout(requestTimeout),
		otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{
			Enabled: true, InitialInterval: retryInitial, MaxInterval: retryMaxDelay, MaxElapsedTime: retryMaxTotal,
		}),
	)
	if err != nil {
		_ = spans.Shutdown(ctx)
		return nil, fmt.Errorf("metric exporter: %w", err)
	}
	return &sender{cfg: cfg, spans: spans, metrics: metrics, client: &http.Client{Timeout: requestTimeout}}, nil
}

// close shuts the exporters down under its own short deadline: Run closes
// after its context was cancelled.
func (sn *sender) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = sn.spans.Shutdown(ctx)
	_ = sn.metrics.Shutdown(ctx)
	sn.client.CloseIdleConnections()
}

// Send emits the scenario through the public wire: scale events to
// /api/v1/events first (so a cold start can be recognized the moment its
// spans arrive), then metrics and spans through the OTel Go SDK's
// OTLP/HTTP exporters. It returns when the server acknowledged every
// request; spans or points the server reports as rejected (partial
// success) make it fail.
func (s *Scenario) Send(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	sn, err := newSender(ctx, cfg)
	if err != nil {
		return err
	}
	defer sn.close()
	return sn.send(ctx, s)
}

func (sn *sender) send(ctx context.Context, s *Scenario) error {
	if err := sn.sendEvents(ctx, s.Events); err != nil {
		return err
	}
	var errs exportErrors
	sn.sendMetrics(ctx, s.Metrics, &errs)
	sn.sendSpans(ctx, s.Spans, &errs)
	return errs.join()
}

// exportErrors gathers what the server refused. After a partial success
// (the rest of that request was taken) sending goes on; any other failure
// (the retry budget spent, a permanent error) stops it.
type exportErrors struct {
	errs   []error
	failed bool
}

func (e *exportErrors) add(err error) {
	e.errs = append(e.errs, err)
	// The SDK keeps its partial-success error type internal; what it
	// exposes is the message, "OTLP partial success: … (N spans rejected)".
	if !strings.Contains(err.Error(), "OTLP partial success") {
		e.failed = true
	}
}

func (e *exportErrors) join() error { return errors.Join(e.errs...) }

func (sn *sender) sendSpans(ctx context.Context, spans []Span, errs *exportErrors) {
	for i := 0; i < len(spans) && !errs.failed; i += spansPerExport {
		batch := readOnlySpans(spans[i:min(i+spansPerExport, len(spans))])
		if err := sn.spans.ExportSpans(ctx, batch); err != nil {
			errs.add(fmt.Errorf("export spans %d–%d of %d: %w", i+1, i+len(batch), len(spans), err))
		}
	}
}

func (sn *sender) sendMetrics(ctx context.Context, points []telemetry.MetricPoint, errs *exportErrors) {
	for i := 0; i < len(points) && !errs.failed; i += pointsPerExport {
		// The OTLP metric exporter sends one resource per request.
		for _, rm := range resourceMetrics(points[i:min(i+pointsPerExport, len(points))]) {
			if err := sn.metrics.Export(ctx, rm); err != nil {
				errs.add(fmt.Errorf("export metrics: %w", err))
				if errs.failed {
					return
				}
			}
		}
	}
}

// EventJSON is the body of POST /api/v1/events for one scale event.
type EventJSON struct {
	Time         time.Time `json:"time"`
	Kind         string    `json:"kind"`
	Service      string    `json:"service"`
	FromReplicas *int32    `json:"from_replicas,omitempty"`
	ToReplicas   *int32    `json:"to_replicas,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Source       string    `json:"source,omitempty"`
}

func (sn *sender) sendEvents(ctx context.Context, events []telemetry.Event) error {
	for i := 0; i < len(events); i += eventsPerRequest {
		batch := make([]EventJSON, 0, eventsPerRequest)
		for _, e := range events[i:min(i+eventsPerRequest, len(events))] {
			batch = append(batch, EventJSON{
				Time: e.Time.UTC(), Kind: e.Kind, Service: e.Service,
				FromReplicas: e.FromReplicas, ToReplicas: e.ToReplicas,
				Reason: e.Reason, Source: e.Source,
			})
		}
		body, err := json.Marshal(batch)
		if err != nil {
			return fmt.Errorf("encode events: %w", err)
		}
		if _, err := sn.post(ctx, sn.cfg.APIBase+"/api/v1/events", "application/json", body); err != nil {
			return fmt.Errorf("post events: %w", err)
		}
	}
	return nil
}

// statusError is a response the server refused.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("server answered %d %s: %s", e.code, http.StatusText(e.code), e.body)
}

func retryable(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// post sends a gzip-compressed body with the Bearer key to the events API
// and returns the response body of a 2xx answer, retrying transient
// failures as the exporters do.
func (sn *sender) post(ctx context.Context, url, contentType string, body []byte) ([]byte, error) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	if _, err := zw.Write(body); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(retryMaxTotal)
	delay := retryInitial
	for {
		resp, wait, err := sn.try(ctx, url, contentType, zipped.Bytes())
		if err == nil {
			return resp, nil
		}
		var se *statusError
		if errors.As(err, &se) && !retryable(se.code) || ctx.Err() != nil {
			return nil, err
		}
		if wait <= 0 {
			wait = delay
			delay = min(delay*2, retryMaxDelay)
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("gave up after %v: %w", retryMaxTotal, err)
		}
		sn.cfg.Log.Debug("demo: export failed, retrying", "url", url, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// try makes one attempt; wait is the server's Retry-After, if any.
func (sn *sender) try(ctx context.Context, url, contentType string, body []byte) (resp []byte, wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Content-Encoding", "gzip")
	if sn.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+sn.cfg.APIKey)
	}
	res, err := sn.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, 0, err
	}
	if res.StatusCode/100 == 2 {
		return data, 0, nil
	}
	return nil, retryAfter(res.Header.Get("Retry-After")), &statusError{code: res.StatusCode, body: string(bytes.TrimSpace(data[:min(len(data), 300)]))}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if secs, err := strconv.Atoi(h); err == nil && secs >= 0 {
		return min(time.Duration(secs)*time.Second, 30*time.Second)
	}
	if t, err := http.ParseTime(h); err == nil {
		return min(max(time.Until(t), 0), 30*time.Second)
	}
	return 0
}
