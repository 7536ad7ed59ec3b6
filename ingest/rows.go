package ingest

import (
	"encoding/json"
	"fmt"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Rows are normalized telemetry ready for ClickHouse.
type Rows struct {
	Spans  []telemetry.Span
	Points []telemetry.MetricPoint
	// Histograms as received (cumulative or delta): the writer turns them
	// into intervals (HistogramDeltas) in log order as it inserts them.
	Histograms []telemetry.HistogramPoint
	Events     []telemetry.Event
	// spanAttrs holds the attributes of Spans, whose Attributes maps are
	// then nil, when the wire reader gave them as one list
	// (normalize.TracesWireAttrs): Submit encodes them from it, or fills
	// the maps for a store that takes rows.
	spanAttrs *normalize.Attrs
}

// materializeAttrs fills the spans' Attributes maps from spanAttrs.
func (r *Rows) materializeAttrs() {
	if r.spanAttrs == nil {
		return
	}
	res := normalize.TraceResult{Spans: r.Spans, Attrs: r.spanAttrs}
	res.MaterializeAttrs()
	r.spanAttrs = nil
}

func (r *Rows) add(o Rows) {
	o.materializeAttrs()
	r.Spans = append(r.Spans, o.Spans...)
	r.Points = append(r.Points, o.Points...)
	r.Histograms = append(r.Histograms, o.Histograms...)
	r.Events = append(r.Events, o.Events...)
}

func (r *Rows) count() int { return len(r.Spans) + len(r.Points) + len(r.Histograms) + len(r.Events) }

// DecodeRecord turns a WAL record back into rows.
func DecodeRecord(rec Record, lim normalize.Limits) (Rows, error) {
	switch rec.Kind {
	case KindTraces:
		res, err := tracesFromProtobuf(rec.ProjectID, rec.Payload, rec.Received, lim)
		if err != nil {
			return Rows{}, err
		}
		return Rows{Spans: res.Spans}, nil
	case KindMetrics:
		var req colmetricspb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(rec.Payload, &req); err != nil {
			return Rows{}, err
		}
		res := normalize.Metrics(rec.ProjectID, &req, rec.Received, lim)
		return Rows{Points: res.Points, Histograms: res.Histograms}, nil
	case KindLogs:
		var req collogspb.ExportLogsServiceRequest
		if err := proto.Unmarshal(rec.Payload, &req); err != nil {
			return Rows{}, err
		}
		return Rows{Events: normalize.Logs(rec.ProjectID, &req, rec.Received, lim).Events}, nil
	case KindEvents:
		var evs []telemetry.Event
		err := json.Unmarshal(rec.Payload, &evs)
		return Rows{Events: evs}, err
	case KindPoints:
		var pts []telemetry.MetricPoint
		err := json.Unmarshal(rec.Payload, &pts)
		return Rows{Points: pts}, err
	case KindScrape:
		var s scrapeRecord
		err := json.Unmarshal(rec.Payload, &s)
		return Rows{Points: s.Points, Histograms: s.Histograms}, err
	}
	return Rows{}, fmt.Errorf("unknown record kind %d", rec.Kind)
}
