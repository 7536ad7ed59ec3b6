package normalize

import (
	"math"
	"slices"
	"time"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tokenpath/tokenpath/telemetry"
)

// TracesWire is Traces over a protobuf-encoded ExportTraceServiceRequest,
// read straight from the wire (protowire) instead of through the generated
// structs: a span's ~20 attributes cost a key lookup and one value string
// each, not three structs and two strings. Resources, scopes, events and
// links (a few per export) still go through the generated decoder.
//
// ok is false for bodies it leaves to the generated decoder: malformed
// protobuf, invalid UTF-8 in a string field, a field with an unexpected
// wire type, a singular message or oneof member sent twice (which
// protobuf merges). The caller then runs proto.Unmarshal and Traces. For
// every body TracesWire accepts, its result equals theirs
// (TestTracesWireMatchesGenerated and FuzzTracesWire check it).
func TracesWire(projectID uint32, body []byte, now time.Time, lim Limits) (TraceResult, bool) {
	res, ok := TracesWireAttrs(projectID, body, now, lim)
	if ok {
		res.MaterializeAttrs()
	}
	return res, ok
}

// TracesWireAttrs is TracesWire with the spans' attributes in res.Attrs,
// one list for the whole export, instead of a map per span (their
// Attributes are nil): what a caller that only encodes the spans for
// ClickHouse needs, without building and walking ~1000 maps an export.
// res.MaterializeAttrs turns them into the maps TracesWire returns.
func TracesWireAttrs(projectID uint32, body []byte, now time.Time, lim Limits) (TraceResult, bool) {
	lim = lim.withDefaults()
	w := wireReader{lim: lim, now: now, project: projectID, keys: map[string]attrKey{}, ids: map[string]uint32{}}
	w.res.Attrs = newAttrs(len(body))
	// Sized once: grown span by span, the slice of ~1000 spans (~400 KiB
	// of pointers for the collector) was allocated and copied ten times.
	if n := min(countSpans(body), len(body)/minSpanBytes); n > 0 {
		w.res.Spans = make([]telemetry.Span, 0, n)
		w.res.Attrs.Ends = slices.Grow(w.res.Attrs.Ends, n)
	}
	read := eachField(body, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		if num != 1 {
			return true // unknown field: skipped, as proto.Unmarshal keeps it aside
		}
		return typ == protowire.BytesType && w.resourceSpans(v)
	})
	if !read {
		w.res.Attrs.Release() // nothing refers to it
		return TraceResult{}, false
	}
	if len(w.res.Spans) == 0 {
		w.res.Spans = nil // as the generated path leaves it when every span is rejected
	}
	w.res.Rejected, w.res.Errors = w.errs.rejected, w.errs.reasons
	return w.res, true
}

// wireReader holds one TracesWire call's state.
type wireReader struct {
	lim     Limits
	now     time.Time
	project uint32
	res     TraceResult
	errs    errorLog
	// keys interns attribute keys (an export repeats the same few dozen)
	// with what the convention rules need to know of each.
	keys map[string]attrKey
	// ids numbers the distinct stored keys (after clamping; Attrs.Names
	// by id), so a span's repeated keys are found without a map: seen[id]
	// is the span that last had the key (gen), slot[id] its entry.
	ids  map[string]uint32
	seen []uint32
	slot []int32
	gen  uint32
	// byPos[i] holds the keys last read at position i of a span
	// (keyValue).
	byPos []posKeys
	// scratch, reused span to span
	kvs   []wireKV
	attrs [][]byte
	// conv holds the current span's convention attributes for the rules
	// (spanView.attrs), and values the AnyValues they point to: the rules
	// keep neither past the span, so both are refilled span to span
	// instead of allocating a map and two structs an attribute.
	conv   map[string]*commonpb.AnyValue
	values anyValues
}

// wireKV is one attribute as read from the wire: its key and a value that
// is either a scalar (kind + fields) or a message left to the generated
// decoder (array, kvlist).
type wireKV struct {
	key   attrKey
	kind  int8 // 0: no value field; else the AnyValue field number
	value *commonpb.AnyValue
	str   []byte
	num   uint64
	set   bool // the KeyValue had a value message (possibly empty)
}

// eachField calls fn for every field of msg; it reports false when msg is
// malformed or fn returned false.
func eachField(msg []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) bool) bool {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 || num > protowire.MaxValidNumber {
			return false
		}
		msg = msg[n:]
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return false
		}
		if typ == protowire.EndGroupType {
			return false
		}
		v := msg[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if !fn(num, typ, v) {
			return false
		}
		msg = msg[m:]
	}
	return true
}

// minSpanBytes is the least wire size of a span that is not rejected:
// its trace and span ids with their tags and lengths. It bounds what
// countSpans may make TracesWireAttrs allocate for a body of empty spans.
const minSpanBytes = 2 + 16 + 2 + 8

// countSpans is the number of spans in an ExportTraceServiceRequest, read
// from the tags alone; a malformed body counts what comes before the fault.
func countSpans(body []byte) int {
	n := 0
	inside := func(field protowire.Number, count func(v []byte)) func(protowire.Number, protowire.Type, []byte) bool {
		return func(num protowire.Number, typ protowire.Type, v []byte) bool {
			if num == field && typ == protowire.BytesType {
				count(v)
			}
			return true
		}
	}
	eachField(body, inside(1, func(rs []byte) { // resource_spans
		eachField(rs, inside(2, func(ss []byte) { // scope_spans
			eachField(ss, inside(2, func([]byte) { n++ })) // spans
		}))
	}))
	return n
}

// resourceSpans reads one ResourceSpans message into w.res.
func (w *wireReader) resourceSpans(msg []byte) bool {
	var (
		resource     []byte
		seenResource bool
		scopes       [][]byte
	)
	ok := eachField(msg, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case 1: // resource
			if typ != protowire.BytesType || seenResource {
				return false
			}
			resource, seenResource = v, true
		case 2: // scope_spans
			if typ != protowire.BytesType {
				return false
			}
			scopes = append(scopes, v)
		case 3: // schema_url
			return typ == protowire.BytesType && utf8.Valid(v)
		}
		return true
	})
	if !ok {
		return false
	}
	// The resource is one per batch of spans: the generated decoder and
	// the helpers Traces uses read it, exactly as there.
	var rpb *resourcepb.Resource
	if seenResource {
		rpb = &resourcepb.Resource{}
		if proto.Unmarshal(resource, rpb) != nil {
			return false
		}
	}
	service, instance := serviceOf(rpb), instanceOf(rpb)
	var resAttrs map[string]string
	var resHash uint64
	for _, ss := range scopes {
		ok := eachField(ss, func(num protowire.Number, typ protowire.Type, v []byte) bool {
			switch num {
			case 1: // scope: validated only
				return typ == protowire.BytesType && proto.Unmarshal(v, &commonpb.InstrumentationScope{}) == nil
			case 2: // spans
				return typ == protowire.BytesType
			case 3: // schema_url
				return typ == protowire.BytesType && utf8.Valid(v)
			}
			return true
		})
		if !ok {
			return false
		}
		// A second pass takes the spans, now that the scope is known valid.
		ok = eachField(ss, func(num protowire.Number, _ protowire.Type, v []byte) bool {
			if num != 2 {
				return true
			}
			span, reason, ok := w.span(v)
			if !ok {
				return false
			}
			if reason != "" {
				w.errs.reject(reason)
				return true
			}
			if resAttrs == nil {
				resAttrs = resourceAttributes(rpb, w.lim)
				resHash = telemetry.ResourceHash(w.project, resAttrs)
			}
			span.ProjectID = w.project
			span.Service = service
			span.Instance = instance
			span.Resource = resAttrs
			span.ResourceHash = resHash
			w.res.Spans = append(w.res.Spans, span)
			w.res.Attrs.Ends = append(w.res.Attrs.Ends, len(w.res.Attrs.Keys))
			return true
		})
		if !ok {
			return false
		}
	}
	return true
}

// span reads one Span message: the span, or the reason it is rejected.
func (w *wireReader) span(msg []byte) (telemetry.Span, string, bool) {
	var (
		f                    spanFields
		attrs                = w.attrs[:0]
		seenStatus           bool
		statusMsg            []byte
		traceID, spanID, par []byte
	)
	ok := eachField(msg, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case 1, 2, 4: // trace_id, span_id, parent_span_id: the last one wins
			if typ != protowire.BytesType {
				return false
			}
			switch num {
			case 1:
				traceID = v
			case 2:
				spanID = v
			default:
				par = v
			}
		case 3: // trace_state
			return typ == protowire.BytesType && utf8.Valid(v)
		case 5: // name
			if typ != protowire.BytesType || !utf8.Valid(v) {
				return false
			}
			f.name = string(v)
		case 6: // kind
			if typ != protowire.VarintType {
				return false
			}
			x, _ := protowire.ConsumeVarint(v)
			f.kind = tracepb.Span_SpanKind(int32(x))
		case 7, 8: // start, end
			if typ != protowire.Fixed64Type {
				return false
			}
			x, _ := protowire.ConsumeFixed64(v)
			if num == 7 {
				f.startNs = x
			} else {
				f.endNs = x
			}
		case 9: // attributes
			if typ != protowire.BytesType {
				return false
			}
			attrs = append(attrs, v)
		case 12: // dropped_events_count: a first-chunk event may be gone
			if typ != protowire.VarintType {
				return false
			}
			x, _ := protowire.ConsumeVarint(v)
			f.droppedEvents = uint32(x)
		case 10, 14: // dropped counts
			return typ == protowire.VarintType
		case 11: // events: few, through the generated decoder
			if typ != protowire.BytesType {
				return false
			}
			e := &tracepb.Span_Event{}
			if proto.Unmarshal(v, e) != nil {
				return false
			}
			f.events = append(f.events, e)
		case 13: // links: validated only
			return typ == protowire.BytesType && proto.Unmarshal(v, &tracepb.Span_Link{}) == nil
		case 15: // status
			if typ != protowire.BytesType || seenStatus {
				return false
			}
			seenStatus = true
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) bool {
				switch num {
				case 2:
					if typ != protowire.BytesType || !utf8.Valid(v) {
						return false
					}
					statusMsg = v
				case 3:
					if typ != protowire.VarintType {
						return false
					}
					x, _ := protowire.ConsumeVarint(v)
					f.statusCode = tracepb.Status_StatusCode(int32(x))
				}
				return true
			})
		case 16: // flags
			return typ == protowire.Fixed32Type
		}
		return true
	})
	w.attrs = attrs
	if !ok {
		return telemetry.Span{}, "", false
	}
	// Attributes are read (and validated) before the span is judged, as
	// proto.Unmarshal would refuse the whole request for a bad one.
	w.kvs = w.kvs[:0]
	for i, a := range attrs {
		kv, ok := w.keyValue(a, i)
		if !ok {
			return telemetry.Span{}, "", false
		}
		w.kvs = append(w.kvs, kv)
	}
	f.traceID, f.spanID, f.parentID = traceID, spanID, par
	if reason := checkSpanFields(traceID, spanID, par, f.startNs, f.endNs, w.now); reason != "" {
		return telemetry.Span{}, "span " + idHex(spanID) + ": " + reason, true
	}
	f.statusMessage = string(statusMsg)

	// As convertSpan: convention keys from all attributes, then the map.
	// Most spans have none: their view needs no map.
	var view spanView
	w.values.reset()
	for i := range w.kvs {
		kv := &w.kvs[i]
		if kv.key.convention {
			if view.attrs == nil {
				if w.conv == nil {
					w.conv = make(map[string]*commonpb.AnyValue, 8)
				}
				clear(w.conv)
				view.attrs = w.conv
			}
			view.attrs[kv.key.name] = w.values.of(kv)
		}
		view.server = view.server || kv.key.latency
	}
	if !w.appendAttrs() {
		return telemetry.Span{}, "", false
	}
	return buildSpan(f, &view, nil, w.lim), "", true
}

// appendAttrs adds the current span's attributes (w.kvs) to res.Attrs as
// flattenAttributes would put them in its map: in wire order, a repeated
// key's value replacing the first one's, keys past MaxAttributes dropped.
// It reports false when the export's values outgrow Attrs' offsets.
func (w *wireReader) appendAttrs() bool {
	a := w.res.Attrs
	w.gen++
	from := len(a.Keys)
	for i := range w.kvs {
		kv := &w.kvs[i]
		start := len(a.Values)
		a.Values = kv.appendValue(a.Values, w.lim.MaxValueBytes)
		if len(a.Values) > math.MaxUint32 {
			return false
		}
		id := kv.key.id
		if w.seen[id] == w.gen {
			// A repeated key: its last value wins, in the first one's place.
			j := w.slot[id]
			a.Bounds[2*j], a.Bounds[2*j+1] = uint32(start), uint32(len(a.Values))
			continue
		}
		if len(a.Keys)-from >= w.lim.MaxAttributes {
			a.Values = a.Values[:start]
			continue
		}
		w.seen[id], w.slot[id] = w.gen, int32(len(a.Keys))
		a.Keys = append(a.Keys, id)
		a.Bounds = append(a.Bounds, uint32(start), uint32(len(a.Values)))
	}
	return true
}
