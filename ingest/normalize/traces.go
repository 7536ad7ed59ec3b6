package normalize

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TraceResult is the outcome of normalizing one trace export request.
type TraceResult struct {
	Spans []telemetry.Span
	// Attrs holds the spans' attributes instead of their Attributes maps
	// when the result comes from TracesWireAttrs; nil otherwise.
	Attrs    *Attrs
	Rejected int64
	// Errors holds the first few reject reasons, for
	// partial_success.error_message.
	Errors []string
}

// Traces normalizes every span of req, LLM or not (app spans give the
// pre-inference time). Corrupt spans are rejected and counted; oversized
// attributes are clamped to lim. now bounds how far in the future a
// timestamp may lie. Spans of one resource share one Resource map: treat it
// as read-only.
func Traces(projectID uint32, req *coltracepb.ExportTraceServiceRequest, now time.Time, lim Limits) TraceResult {
	lim = lim.withDefaults()
	var (
		res  TraceResult
		errs errorLog
	)
	for _, rs := range req.GetResourceSpans() {
		resource := rs.GetResource()
		service, instance := serviceOf(resource), instanceOf(resource)
		var resAttrs map[string]string // built once, shared by the batch's spans
		var resHash uint64
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				if sp == nil {
					continue
				}
				if reason := checkSpan(sp, now); reason != "" {
					errs.reject(fmt.Sprintf("span %s: %s", idHex(sp.SpanId), reason))
					continue
				}
				if resAttrs == nil {
					resAttrs = resourceAttributes(resource, lim)
					resHash = telemetry.ResourceHash(projectID, resAttrs)
				}
				span := convertSpan(sp, lim)
				span.ProjectID = projectID
				span.Service = service
				span.Instance = instance
				span.Resource = resAttrs
				span.ResourceHash = resHash
				res.Spans = append(res.Spans, span)
			}
		}
	}
	res.Rejected, res.Errors = errs.rejected, errs.reasons
	return res
}

// checkSpan returns why sp cannot be stored, or "".
func checkSpan(sp *tracepb.Span, now time.Time) string {
	return checkSpanFields(sp.TraceId, sp.SpanId, sp.ParentSpanId, sp.StartTimeUnixNano, sp.EndTimeUnixNano, now)
}

func checkSpanFields(traceID, spanID, parentID []byte, startNs, endNs uint64, now time.Time) string {
	if len(traceID) != 16 || allZero(traceID) {
		return "trace_id must be 16 bytes, not all zero"
	}
	if len(spanID) != 8 || allZero(spanID) {
		return "span_id must be 8 bytes, not all zero"
	}
	if n := len(parentID); n != 0 && n != 8 {
		return "parent_span_id must be empty or 8 bytes"
	}
	start, end := unixNanos(startNs), unixNanos(endNs)
	if r := checkTime("start time", start, now); r != "" {
		return r
	}
	if end.Before(start) {
		// Clamping would invent a zero-length span and a wrong E2E.
		return "end time before start time"
	}
	if r := checkTime("end time", end, now); r != "" {
		return r
	}
	return ""
}

// spanFields are the parts of a span besides its attributes, as both
// decoders (generated structs, wire reader) hand them over.
type spanFields struct {
	traceID, spanID, parentID []byte
	name                      string
	kind                      tracepb.Span_SpanKind
	droppedEvents             uint32 // beside kind: fills its padding
	startNs, endNs            uint64
	statusCode                tracepb.Status_StatusCode
	statusMessage             string
	events                    []*tracepb.Span_Event
}

// convertSpan maps a validated span; identity fields are set by the caller.
func convertSpan(sp *tracepb.Span, lim Limits) telemetry.Span {
	view := spanView{attrs: map[string]*commonpb.AnyValue{}}
	// One pass picks out the convention keys from all attributes, even
	// those past MaxAttributes: the canonical fields must not depend on
	// where an SDK happened to put them.
	for _, kv := range sp.Attributes {
		k := kv.GetKey()
		if _, ok := conventionKeys[k]; ok {
			view.attrs[k] = kv.GetValue()
		}
		if strings.HasPrefix(k, serverLatencyPrefix) {
			view.server = true
		}
	}
	return buildSpan(spanFields{
		traceID: sp.TraceId, spanID: sp.SpanId, parentID: sp.ParentSpanId,
		name: sp.Name, kind: sp.Kind, startNs: sp.StartTimeUnixNano, endNs: sp.EndTimeUnixNano,
		statusCode: sp.GetStatus().GetCode(), statusMessage: sp.GetStatus().GetMessage(), events: sp.Events,
		droppedEvents: sp.DroppedEventsCount,
	}, &view, flattenAttributes(sp.Attributes, lim), lim)
}

// buildSpan finishes a span from its fields, the convention attributes
// picked out in view and the flattened attribute map.
func buildSpan(f spanFields, view *spanView, attrs map[string]string, lim Limits) telemetry.Span {
	view.start, view.end = unixNanos(f.startNs), unixNanos(f.endNs)
	events := f.events
	if len(events) > lim.MaxAttributes {
		events = events[:lim.MaxAttributes]
	}
	var names []string
	var times []time.Time
	for _, e := range events {
		if e == nil {
			continue
		}
		name := cleanString(e.Name, maxNameBytes)
		t := unixNanos(e.TimeUnixNano)
		names = append(names, name)
		times = append(times, t)
		view.events = append(view.events, spanEvent{name: name, time: t})
	}
	view.droppedEvents = f.droppedEvents
	if len(f.events) > len(events) {
		view.droppedEvents += uint32(len(f.events) - len(events))
	}
	traceID, spanID, parent := hexIDs(f.traceID, f.spanID, f.parentID)
	name := cleanString(f.name, maxNameBytes)
	view.name = name
	return telemetry.Span{
		TraceID:       traceID,
		SpanID:        spanID,
		ParentSpanID:  parent,
		Name:          name,
		Kind:          spanKind(f.kind),
		Start:         view.start,
		End:           view.end,
		StatusCode:    statusCode(f.statusCode),
		StatusMessage: cleanString(f.statusMessage, lim.MaxValueBytes),
		LLM:           view.llmCall(),
		Attributes:    attrs,
		EventNames:    names,
		EventTimes:    times,
	}
}

// hexIDs renders a validated span's ids (16 and 8 bytes, the parent empty
// or 8) as lowercase hex, all three in one allocation; an all-zero parent
// is no parent.
func hexIDs(traceID, spanID, parentID []byte) (string, string, string) {
	withParent := len(parentID) == 8 && !allZero(parentID)
	n := 2 * (len(traceID) + len(spanID))
	if withParent {
		n += 2 * len(parentID)
	}
	buf := make([]byte, n)
	t := hex.Encode(buf, traceID)
	s := hex.Encode(buf[t:], spanID)
	if withParent {
		hex.Encode(buf[t+s:], parentID)
	}
	all := string(buf)
	return all[:t], all[t : t+s], all[t+s:]
}

// spanKind names the kind as stored; UNSPECIFIED and unknown values are
// internal, as the OTel spec allows receivers to assume.
func spanKind(k tracepb.Span_SpanKind) string {
	switch k {
	case tracepb.Span_SPAN_KIND_SERVER:
		return "server"
	case tracepb.Span_SPAN_KIND_CLIENT:
		return "client"
	case tracepb.Span_SPAN_KIND_PRODUCER:
		return "producer"
	case tracepb.Span_SPAN_KIND_CONSUMER:
		return "consumer"
	}
	return "internal"
}

func statusCode(c tracepb.Status_StatusCode) string {
	switch c {
	case tracepb.Status_STATUS_CODE_OK:
		return "ok"
	case tracepb.Status_STATUS_CODE_ERROR:
		return "error"
	}
	return "unset"
}
