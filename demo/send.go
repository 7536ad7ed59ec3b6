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
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Batch sizes per export request, about what an SDK's batch processor or
// the Collector sends.
const (
	spansPerExport   = 2000
	pointsPerExport  = 5000
	eventsPerRequest = 500
)

// Retry policy for transient failures (429, 502–504, connection refused
// while the server starts): exponential backoff, Retry-After honoured.
const (
	retryInitial  = 250 * time.Millisecond
	retryMaxDelay = 10 * time.Second
	retryMaxTotal = 2 * time.Minute
)

// sender posts to the OTLP/HTTP receiver and the events API.
type sender struct {
	cfg    Config
	client *http.Client
}

func newSender(cfg Config) *sender {
	return &sender{cfg: cfg, client: &http.Client{Timeout: 30 * time.Second}}
}

// Send emits the scenario through the public wire: scale events to
// /api/v1/events first (so a cold start can be recognized the moment its
// spans arrive), then metrics and spans as OTLP/HTTP protobuf. It returns
// when the server acknowledged every request; spans or points the server
// reports as rejected (partial success) make it fail.
func (s *Scenario) Send(ctx context.Context, cfg Config) error {
	return newSender(cfg.withDefaults()).send(ctx, s)
}

func (sn *sender) send(ctx context.Context, s *Scenario) error {
	if err := sn.sendEvents(ctx, s.Events); err != nil {
		return err
	}
	if err := sn.sendMetrics(ctx, s.Metrics); err != nil {
		return err
	}
	return sn.sendSpans(ctx, s.Spans)
}

func (sn *sender) sendSpans(ctx context.Context, spans []Span) error {
	var rejected int64
	var firstReason string
	for i := 0; i < len(spans); i += spansPerExport {
		body, err := proto.Marshal(encodeTraces(spans[i:min(i+spansPerExport, len(spans))]))
		if err != nil {
			return fmt.Errorf("encode spans: %w", err)
		}
		resp, err := sn.post(ctx, sn.cfg.OTLPEndpoint+"/v1/traces", "application/x-protobuf", body)
		if err != nil {
			return fmt.Errorf("export spans: %w", err)
		}
		var ack coltracepb.ExportTraceServiceResponse
		if proto.Unmarshal(resp, &ack) == nil && ack.GetPartialSuccess().GetRejectedSpans() > 0 {
			rejected += ack.GetPartialSuccess().GetRejectedSpans()
			if firstReason == "" {
				firstReason = ack.GetPartialSuccess().GetErrorMessage()
			}
		}
	}
	if rejected > 0 {
		return fmt.Errorf("export spans: server rejected %d of %d spans: %s", rejected, len(spans), firstReason)
	}
	return nil
}

func (sn *sender) sendMetrics(ctx context.Context, points []telemetry.MetricPoint) error {
	var rejected int64
	var firstReason string
	for i := 0; i < len(points); i += pointsPerExport {
		body, err := proto.Marshal(encodeMetrics(points[i:min(i+pointsPerExport, len(points))]))
		if err != nil {
			return fmt.Errorf("encode metrics: %w", err)
		}
		resp, err := sn.post(ctx, sn.cfg.OTLPEndpoint+"/v1/metrics", "application/x-protobuf", body)
		if err != nil {
			return fmt.Errorf("export metrics: %w", err)
		}
		var ack colmetricspb.ExportMetricsServiceResponse
		if proto.Unmarshal(resp, &ack) == nil && ack.GetPartialSuccess().GetRejectedDataPoints() > 0 {
			rejected += ack.GetPartialSuccess().GetRejectedDataPoints()
			if firstReason == "" {
				firstReason = ack.GetPartialSuccess().GetErrorMessage()
			}
		}
	}
	if rejected > 0 {
		return fmt.Errorf("export metrics: server rejected %d of %d points: %s", rejected, len(points), firstReason)
	}
	return nil
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

// post sends a gzip-compressed body with the Bearer key and returns the
// response body of a 2xx answer, retrying transient failures.
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
