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

// SpansBatch lays spans out as columns of the spans table. Spans with a
// ResourceHash store it instead of their resource map: insert their
// resources (ResourcesBatch) before them. It is a Foreground batch: the
// assembler reads spans by inserted_at and stays behind the inserts still
// under way (ingest.Pipeline.WritingSince), so on a cluster the insert must
// not return while its rows are still queued for their shards.
func SpansBatch(spans []telemetry.Span) *Batch {
	n := len(spans)
	var (
		project                               = make([]uint32, n)
		traceID, spanID, parent, statusMsg    = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		service, instance, name, kind, status = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		role, provider, model, operation      = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		start, end                            = make([]time.Time, n), make([]time.Time, n)
		duration                              = make([]int64, n)
		inTok, outTok, ttft, queue, prefill   = make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n), make([]*int64, n)
		serverTTFT, decode, serverE2E         = make([]*int64, n), make([]*int64, n), make([]*int64, n)
		attrs, res                            = make([]map[string]string, n), make([]map[string]string, n)
		resHash                               = make([]uint64, n)
		eventNames                            = make([][]string, n)
		eventTimes                            = make([][]time.Time, n)
		route, tenant                         = make([]string, n), make([]string, n)
		responseID, serverAddr                = make([]string, n), make([]string, n)
		serverPort                            = make([]uint16, n)
		ttftSource, errorType                 = make([]string, n), make([]string, n)
		preemptions                           = make([]*int64, n)
	)
	for i := range spans {
		s := &spans[i]
		project[i] = s.ProjectID
		traceID[i], spanID[i], parent[i] = s.TraceID, s.SpanID, s.ParentSpanID
		service[i], instance[i], name[i], kind[i] = s.Service, s.Instance, s.Name, s.Kind
		start[i], end[i], duration[i] = s.Start, s.End, int64(s.Duration())
		status[i], statusMsg[i] = s.StatusCode, s.StatusMessage
		role[i], provider[i], model[i], operation[i] = s.LLM.Role.String(), s.LLM.Provider, s.LLM.Model, s.LLM.Operation
		inTok[i], outTok[i] = s.LLM.InputTokens, s.LLM.OutputTokens
		ttft[i], queue[i], prefill[i] = nanos(s.LLM.ClientTTFT), nanos(s.LLM.QueueTime), nanos(s.LLM.PrefillTime)
		serverTTFT[i], decode[i], serverE2E[i] = nanos(s.LLM.ServerTTFT), nanos(s.LLM.DecodeTime), nanos(s.LLM.ServerE2E)
		attrs[i], res[i], resHash[i] = orEmpty(s.Attributes), orEmpty(inlineResource(s)), s.ResourceHash
		eventNames[i], eventTimes[i] = s.EventNames, s.EventTimes
		route[i], tenant[i] = s.Attributes[telemetry.RouteAttribute], telemetry.SpanTenant(s.Attributes)
		responseID[i], serverAddr[i] = s.LLM.ResponseID, s.LLM.ServerAddress
		serverPort[i], ttftSource[i], preemptions[i] = s.LLM.ServerPort, s.LLM.TTFTSource, s.LLM.Preemptions
		errorType[i] = s.LLM.ErrorType
		if eventNames[i] == nil {
			eventNames[i] = []string{}
		}
		if eventTimes[i] == nil {
			eventTimes[i] = []time.Time{}
		}
	}
	const lc, dt, ni = "LowCardinality(String)", "DateTime64(9, 'UTC')", "Nullable(Int64)"
	return &Batch{Table: "spans", Foreground: true, Columns: []BatchColumn{
		{"project_id", "UInt32", project},
		{"trace_id", "String", traceID},
		{"span_id", "String", spanID},
		{"parent_span_id", "String", parent},
		{"service", lc, service},
		{"instance", lc, instance},
		{"name", lc, name},
		{"kind", lc, kind},
		{"start", dt, start},
		{"end_time", dt, end},
		{"duration_ns", "Int64", duration},
		{"status_code", lc, status},
		{"status_message", "String", statusMsg},
		{"llm_role", lc, role},
		{"provider", lc, provider},
		{"model", lc, model},
		{"operation", lc, operation},
		{"input_tokens", ni, inTok},
		{"output_tokens", ni, outTok},
		{"client_ttft_ns", ni, ttft},
		{"queue_ns", ni, queue},
		{"prefill_ns", ni, prefill},
		{"server_ttft_ns", ni, serverTTFT},
		{"decode_ns", ni, decode},
		{"server_e2e_ns", ni, serverE2E},
		{"attributes", "Map(LowCardinality(String), String)", attrs},
		{"resource", "Map(LowCardinality(String), String)", res},
		{"resource_hash", "UInt64", resHash},
		{"event_names", "Array(String)", eventNames},
		{"event_times", "Array(DateTime64(9, 'UTC'))", eventTimes},
		{"route", lc, route},
		{"tenant", "String", tenant},
		{"response_id", "String", responseID},
		{"server_address", lc, serverAddr},
		{"server_port", "UInt16", serverPort},
		{"ttft_source", lc, ttftSource},
		{"preemptions", ni, preemptions},
		{"error_type", lc, errorType},
	}}
}

// SpanColumns is the select list that ScanSpans reads.
const SpanColumns = `project_id, trace_id, span_id, parent_span_id, service, instance, name, kind,
	start, end_time, status_code, status_message, llm_role, provider, model, operation,
	input_tokens, output_tokens, client_ttft_ns, queue_ns, prefill_ns, server_ttft_ns, decode_ns, server_e2e_ns,
	response_id, server_address, server_port, ttft_source, preemptions, error_type,
	attributes, resource, resource_hash, event_names, event_times`

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

// SpanCoreColumns are the typed span columns SpanCore reads: what the
// assembler needs, without the attribute maps.
const SpanCoreColumns = `project_id, trace_id, span_id, parent_span_id, service, instance, name, start, end_time, status_code,
	llm_role, provider, model, operation, input_tokens, output_tokens,
	client_ttft_ns, queue_ns, prefill_ns, server_ttft_ns, decode_ns, server_e2e_ns,
	response_id, server_address, server_port, ttft_source, preemptions, error_type`

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
