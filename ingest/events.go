package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/telemetry"
)

// EventInput is the wire shape of POST /api/v1/events (one object or an
// array of them).
type EventInput struct {
	Time         string            `json:"time"`
	Kind         string            `json:"kind"`
	Service      string            `json:"service"`
	Instance     string            `json:"instance"`
	FromReplicas *int32            `json:"from_replicas"`
	ToReplicas   *int32            `json:"to_replicas"`
	Reason       string            `json:"reason"`
	Source       string            `json:"source"`
	Attributes   map[string]string `json:"attributes"`
}

// MaxEventsPerRequest bounds one webhook call.
const MaxEventsPerRequest = 10_000

// ParseEvents validates a webhook body. Every problem is reported with the
// index of the event, and nothing is accepted from a body with errors, so a
// client can fix and resend the whole body.
func ParseEvents(body []byte, project uint32, now time.Time) ([]telemetry.Event, error) {
	body = bytes.TrimSpace(body)
	var in []EventInput
	dec := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(body))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			return err
		}
		// Decode stops after one value: newline-delimited objects would
		// store the first and silently drop the rest.
		if _, err := d.Token(); err != io.EOF {
			return errors.New("unexpected data after the JSON value: send one object or one array")
		}
		return nil
	}
	switch {
	case len(body) == 0:
		return nil, fmt.Errorf("empty body: send an event object or an array of them")
	case body[0] == '[':
		if err := dec(&in); err != nil {
			return nil, fmt.Errorf("invalid events JSON: %w", err)
		}
	default:
		var one EventInput
		if err := dec(&one); err != nil {
			return nil, fmt.Errorf("invalid event JSON: %w", err)
		}
		in = []EventInput{one}
	}
	if len(in) > MaxEventsPerRequest {
		return nil, fmt.Errorf("%d events in one request; the limit is %d", len(in), MaxEventsPerRequest)
	}
	out := make([]telemetry.Event, 0, len(in))
	for i, e := range in {
		ev, err := e.event(project, now)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// errEventFieldTooLong refuses an event over the webhook's field limits.
var errEventFieldTooLong = errors.New("a field is too long (service/instance ≤ 256, kind/source ≤ 64, reason ≤ 4096 bytes, ≤ 128 attributes)")

func (e EventInput) event(project uint32, now time.Time) (telemetry.Event, error) {
	// What the pages show is cleaned as OTLP names are (normalize.CleanText).
	clean := func(s string) string { return normalize.CleanText(s, len(s)) }
	ev := telemetry.Event{ProjectID: project, Kind: strings.TrimSpace(clean(e.Kind)), Service: strings.TrimSpace(clean(e.Service)),
		Instance: clean(e.Instance), FromReplicas: e.FromReplicas, ToReplicas: e.ToReplicas, Reason: clean(e.Reason), Source: clean(e.Source)}
	if n := len(e.Attributes); n > 0 && n <= 128 {
		ev.Attributes = make(map[string]string, n)
		for k, v := range e.Attributes {
			ev.Attributes[clean(k)] = clean(v)
		}
	}
	if len(e.Attributes) > 128 {
		return ev, errEventFieldTooLong
	}
	if ev.Kind == "" {
		ev.Kind = telemetry.EventScale
	}
	if ev.Service == "" {
		return ev, fmt.Errorf("service is required")
	}
	if len(ev.Service) > 256 || len(ev.Instance) > 256 || len(ev.Kind) > 64 || len(ev.Reason) > 4096 || len(ev.Source) > 64 {
		return ev, errEventFieldTooLong
	}
	if e.Time == "" {
		ev.Time = now
	} else {
		t, err := time.Parse(time.RFC3339Nano, e.Time)
		if err != nil {
			return ev, fmt.Errorf("time %q is not RFC 3339 (e.g. 2026-12-02T14:02:10Z)", e.Time)
		}
		ev.Time = t.UTC()
	}
	if ev.Time.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) || ev.Time.After(now.Add(24*time.Hour)) {
		return ev, fmt.Errorf("time %s is out of range", ev.Time.Format(time.RFC3339))
	}
	for _, r := range []*int32{ev.FromReplicas, ev.ToReplicas} {
		if r != nil && (*r < 0 || *r > 100000) {
			return ev, fmt.Errorf("replica counts must be between 0 and 100000")
		}
	}
	if ev.Kind == telemetry.EventScale && ev.ToReplicas == nil {
		return ev, fmt.Errorf("a scale event needs to_replicas")
	}
	return ev, nil
}

// SubmitEvents makes webhook events durable like any export.
func (r *Receiver) SubmitEvents(ctx context.Context, project uint32, events []telemetry.Event) error {
	payload, err := json.Marshal(events)
	if err != nil {
		return err
	}
	return r.Pipeline.Submit(ctx, Record{Kind: KindEvents, ProjectID: project, Received: r.now(), Payload: payload}, Rows{Events: events})
}

// SubmitScrape makes one scrape's points and histograms durable.
func (r *Receiver) SubmitScrape(ctx context.Context, project uint32, e normalize.Exposition) error {
	payload, err := json.Marshal(scrapeRecord{Points: e.Points, Histograms: e.Histograms})
	if err != nil {
		return err
	}
	return r.Pipeline.Submit(ctx, Record{Kind: KindScrape, ProjectID: project, Received: r.now(), Payload: payload},
		Rows{Points: e.Points, Histograms: e.Histograms})
}

// scrapeRecord is a KindScrape record's payload.
type scrapeRecord struct {
	Points     []telemetry.MetricPoint
	Histograms []telemetry.HistogramPoint
}

// SubmitPoints makes scraped metric points durable.
func (r *Receiver) SubmitPoints(ctx context.Context, project uint32, points []telemetry.MetricPoint) error {
	payload, err := json.Marshal(points)
	if err != nil {
		return err
	}
	return r.Pipeline.Submit(ctx, Record{Kind: KindPoints, ProjectID: project, Received: r.now(), Payload: payload}, Rows{Points: points})
}

// IntakeEvents parses a webhook body and makes its events durable; it
// returns how many were accepted. Parse errors wrap ErrInvalidEvents.
func (r *Receiver) IntakeEvents(ctx context.Context, project uint32, body []byte) (int, error) {
	evs, err := ParseEvents(body, project, r.now())
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalidEvents, err)
	}
	if err := r.SubmitEvents(ctx, project, evs); err != nil {
		return 0, err
	}
	return len(evs), nil
}

// ErrInvalidEvents marks a webhook body the client must fix.
var ErrInvalidEvents = errors.New("invalid events")
