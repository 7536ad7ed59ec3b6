package clickhouse

import (
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

func nanos(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	n := int64(*d)
	return &n
}

func durationOf(n *int64) *time.Duration {
	if n == nil {
		return nil
	}
	d := time.Duration(*n)
	return &d
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// inlineResource is the resource map a span row stores itself: none when
// the span references a row of the resources table (ResourceHash ≠ 0), which
// the caller writes first (ResourcesBatch).
func inlineResource(s *telemetry.Span) map[string]string {
	if s.ResourceHash != 0 {
		return nil
	}
	return s.Resource
}

// ScanSpans reads rows selected with SpanColumns.
func ScanSpans(r *Result) []telemetry.Span {
	out := make([]telemetry.Span, r.Len())
	for i := range out {
		w := r.Row(i)
		out[i] = SpanCore(w)
		out[i].Kind, out[i].StatusMessage = w.String("kind"), w.String("status_message")
		out[i].Attributes, out[i].Resource = w.StringMap("attributes"), w.StringMap("resource")
		out[i].ResourceHash = uint64(w.Int("resource_hash"))
		out[i].EventNames, out[i].EventTimes = w.Strings("event_names"), w.Times("event_times")
	}
	return out
}

// SpanCore reads a span's typed columns (SpanCoreColumns) from a row.
func SpanCore(w Row) telemetry.Span {
	return telemetry.Span{
		ProjectID: uint32(w.Int("project_id")), TraceID: w.String("trace_id"), SpanID: w.String("span_id"),
		ParentSpanID: w.String("parent_span_id"), Service: w.String("service"), Instance: w.String("instance"),
		Name: w.String("name"), Start: w.Time("start"), End: w.Time("end_time"), StatusCode: w.String("status_code"),
		LLM: telemetry.LLMCall{
			Role: telemetry.ParseLLMRole(w.String("llm_role")), Provider: w.String("provider"),
			Model: w.String("model"), Operation: w.String("operation"),
			InputTokens: w.IntPtr("input_tokens"), OutputTokens: w.IntPtr("output_tokens"),
			ClientTTFT: durationOf(w.IntPtr("client_ttft_ns")), QueueTime: durationOf(w.IntPtr("queue_ns")),
			PrefillTime: durationOf(w.IntPtr("prefill_ns")), ServerTTFT: durationOf(w.IntPtr("server_ttft_ns")),
			DecodeTime: durationOf(w.IntPtr("decode_ns")), ServerE2E: durationOf(w.IntPtr("server_e2e_ns")),
			ResponseID:    w.String("response_id"),
			ServerAddress: w.String("server_address"), ServerPort: uint16(w.Int("server_port")),
			TTFTSource: w.String("ttft_source"), Preemptions: w.IntPtr("preemptions"),
			ErrorType: w.String("error_type"),
		},
	}
}

// MetricsBatch lays metric points out as metric_points columns.
func MetricsBatch(points []telemetry.MetricPoint) *Batch {
	n := len(points)
	project := make([]uint32, n)
	ts := make([]time.Time, n)
	service, instance, name := make([]string, n), make([]string, n), make([]string, n)
	labels := make([]map[string]string, n)
	value := make([]float64, n)
	for i, p := range points {
		project[i], ts[i], service[i], instance[i], name[i] = p.ProjectID, p.Time, p.Service, p.Instance, p.Name
		labels[i], value[i] = orEmpty(p.Labels), p.Value
	}
	const lc = "LowCardinality(String)"
	return &Batch{Table: "metric_points", Columns: []BatchColumn{
		{"project_id", "UInt32", project},
		{"time", "DateTime64(9, 'UTC')", ts},
		{"service", lc, service},
		{"instance", lc, instance},
		{"name", lc, name},
		{"labels", "Map(LowCardinality(String), String)", labels},
		{"value", "Float64", value},
	}}
}

// HistogramsBatch lays histogram intervals out as histogram_points columns.
func HistogramsBatch(points []telemetry.HistogramPoint) *Batch {
	n := len(points)
	project := make([]uint32, n)
	ts, start := make([]time.Time, n), make([]time.Time, n)
	service, instance, name := make([]string, n), make([]string, n), make([]string, n)
	labels := make([]map[string]string, n)
	bounds, counts := make([][]float64, n), make([][]uint64, n)
	count, sum := make([]uint64, n), make([]float64, n)
	for i, p := range points {
		project[i], ts[i], start[i], service[i], instance[i], name[i] = p.ProjectID, p.Time, p.Start, p.Service, p.Instance, p.Name
		if p.Start.IsZero() {
			start[i] = p.Time
		}
		labels[i], bounds[i], counts[i], count[i], sum[i] = orEmpty(p.Labels), orEmptyOf(p.Bounds), orEmptyOf(p.Counts), p.Count, p.Sum
	}
	const lc = "LowCardinality(String)"
	return &Batch{Table: "histogram_points", Columns: []BatchColumn{
		{"project_id", "UInt32", project},
		{"time", "DateTime64(9, 'UTC')", ts},
		{"start", "DateTime64(9, 'UTC')", start},
		{"service", lc, service},
		{"instance", lc, instance},
		{"name", lc, name},
		{"labels", "Map(LowCardinality(String), String)", labels},
		{"bounds", "Array(Float64)", bounds},
		{"counts", "Array(UInt64)", counts},
		{"count", "UInt64", count},
		{"sum", "Float64", sum},
	}}
}

func orEmptyOf[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// EventsBatch lays events out as events columns.
func EventsBatch(events []telemetry.Event) *Batch {
	n := len(events)
	project := make([]uint32, n)
	ts := make([]time.Time, n)
	kind, service, instance, reason, source := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	from, to := make([]*int32, n), make([]*int32, n)
	attrs := make([]map[string]string, n)
	for i, e := range events {
		project[i], ts[i], kind[i], service[i], instance[i] = e.ProjectID, e.Time, e.Kind, e.Service, e.Instance
		from[i], to[i], reason[i], source[i], attrs[i] = e.FromReplicas, e.ToReplicas, e.Reason, e.Source, orEmpty(e.Attributes)
	}
	const lc = "LowCardinality(String)"
	return &Batch{Table: "events", Columns: []BatchColumn{
		{"project_id", "UInt32", project},
		{"time", "DateTime64(9, 'UTC')", ts},
		{"kind", lc, kind},
		{"service", lc, service},
		{"instance", lc, instance},
		{"from_replicas", "Nullable(Int32)", from},
		{"to_replicas", "Nullable(Int32)", to},
		{"reason", "String", reason},
		{"source", lc, source},
		{"attributes", "Map(LowCardinality(String), String)", attrs},
	}}
}

// EventColumns is the select list that ScanEvents reads.
const EventColumns = `project_id, time, kind, service, instance, from_replicas, to_replicas, reason, source, attributes`

// ScanEvents reads rows selected with EventColumns.
func ScanEvents(r *Result) []telemetry.Event {
	out := make([]telemetry.Event, r.Len())
	for i := range out {
		w := r.Row(i)
		e := telemetry.Event{ProjectID: uint32(w.Int("project_id")), Time: w.Time("time"), Kind: w.String("kind"),
			Service: w.String("service"), Instance: w.String("instance"), Reason: w.String("reason"),
			Source: w.String("source"), Attributes: w.StringMap("attributes")}
		if p := w.IntPtr("from_replicas"); p != nil {
			e.FromReplicas = telemetry.Ptr(int32(*p))
		}
		if p := w.IntPtr("to_replicas"); p != nil {
			e.ToReplicas = telemetry.Ptr(int32(*p))
		}
		out[i] = e
	}
	return out
}
