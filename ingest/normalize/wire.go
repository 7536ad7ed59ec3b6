package normalize

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Attrs are the attributes of a TraceResult's spans (TracesWireAttrs) as
// one list in wire order: span i's are the entries from Ends[i-1] (0 for
// the first span) to Ends[i]; entry j is the key Names[Keys[j]] with the
// value Values[Bounds[2j]:Bounds[2j+1]]. They are exactly what the span's
// Attributes map would hold: keys and values clamped to the limits, each
// key once (a repeated key's last value, in its first place), at most
// MaxAttributes keys. Names holds each distinct key once.
type Attrs struct {
	Ends   []int
	Names  []string
	Keys   []uint32
	Bounds []uint32
	Values []byte
}

// attrsPool keeps released Attrs' buffers for the next export.
var attrsPool sync.Pool

// newAttrs returns empty Attrs, sized for an export of body bytes when
// none is pooled (~24 wire bytes an attribute).
func newAttrs(body int) *Attrs {
	if a, ok := attrsPool.Get().(*Attrs); ok {
		return a
	}
	n := body / 24
	return &Attrs{Keys: make([]uint32, 0, n), Bounds: make([]uint32, 0, 2*n), Values: make([]byte, 0, body/2)}
}

// Release hands a's buffers to the next TracesWireAttrs call: neither a
// nor anything read from it without copying (Values) may be used after.
func (a *Attrs) Release() {
	if cap(a.Values) > 16<<20 {
		return // an outsized export's buffers are left to the GC
	}
	clear(a.Names)
	*a = Attrs{Ends: a.Ends[:0], Names: a.Names[:0], Keys: a.Keys[:0], Bounds: a.Bounds[:0], Values: a.Values[:0]}
	attrsPool.Put(a)
}

// Len is the number of spans a holds attributes for.
func (a *Attrs) Len() int { return len(a.Ends) }

// Map returns span i's attributes as the map Traces builds; values share
// one string per call.
func (a *Attrs) Map(i int) map[string]string {
	from := 0
	if i > 0 {
		from = a.Ends[i-1]
	}
	to := a.Ends[i]
	out := make(map[string]string, to-from)
	if to == from {
		return out
	}
	lo, hi := a.Bounds[2*from], a.Bounds[2*from+1]
	for j := from; j < to; j++ {
		lo, hi = min(lo, a.Bounds[2*j]), max(hi, a.Bounds[2*j+1])
	}
	values := string(a.Values[lo:hi])
	for j := from; j < to; j++ {
		out[a.Names[a.Keys[j]]] = values[a.Bounds[2*j]-lo : a.Bounds[2*j+1]-lo]
	}
	return out
}

// MaterializeAttrs moves Attrs into each span's Attributes map, then
// releases Attrs (Release) and clears it; a result without Attrs is left
// as it is.
func (r *TraceResult) MaterializeAttrs() {
	if r.Attrs == nil {
		return
	}
	for i := range r.Spans {
		r.Spans[i].Attributes = r.Attrs.Map(i)
	}
	r.Attrs.Release()
	r.Attrs = nil
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

// posKeys are the last distinct keys read at one position of a span's
// attributes. The spans of an export repeat a few shapes (a root, a
// retrieval, a client and a server span each list the same keys in the
// same order), so comparing the key's bytes with these mostly finds it,
// cheaper than hashing it for the intern map (and than checking its UTF-8
// again).
type posKeys struct {
	keys [4]attrKey
	n    uint8 // slots filled
	next uint8 // the slot add replaces once all are filled
}

// find returns the key whose name is key, or nil.
func (p *posKeys) find(key []byte) *attrKey {
	for i := range p.n {
		if string(key) == p.keys[i].name {
			return &p.keys[i]
		}
	}
	return nil
}

func (p *posKeys) add(k attrKey) {
	if p.n < uint8(len(p.keys)) {
		p.keys[p.n] = k
		p.n++
		return
	}
	p.keys[p.next] = k
	p.next = (p.next + 1) % uint8(len(p.keys))
}

// attrKey is an interned attribute key.
type attrKey struct {
	name       string
	stored     string // name clamped to MaxKeyBytes: the key as stored
	id         uint32 // numbers stored: Attrs.Names[id] == stored
	convention bool   // one of conventionKeys
	latency    bool   // starts with serverLatencyPrefix
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

// keyValue reads one KeyValue message, the pos-th attribute of its span.
func (w *wireReader) keyValue(msg []byte, pos int) (wireKV, bool) {
	var kv wireKV
	key, ok := fastKeyValue(&kv, msg)
	if !ok {
		kv, key = wireKV{}, nil
		if !w.slowKeyValue(&kv, &key, msg) {
			return wireKV{}, false
		}
	}
	if pos < len(w.byPos) {
		if k := w.byPos[pos].find(key); k != nil {
			kv.key = *k
			return kv, true
		}
	}
	if ok && !utf8.Valid(key) {
		return wireKV{}, false
	}
	return w.internKey(kv, key, pos)
}

// fastKeyValue reads a KeyValue in the layout every SDK writes: the key
// (field 1), then the value (field 2) with at most one scalar member
// (string, bool, int or double), and nothing else. It reports false, with
// kv possibly half-filled, for any other layout, which slowKeyValue reads
// field by field. The key's UTF-8 is left to the caller.
func fastKeyValue(kv *wireKV, msg []byte) (key []byte, ok bool) {
	if len(msg) < 2 || msg[0] != 0x0a { // field 1, bytes
		return nil, false
	}
	key, msg, ok = consumeLen(msg[1:])
	if !ok || len(msg) < 2 || msg[0] != 0x12 { // field 2, bytes
		return nil, false
	}
	v, rest, ok := consumeLen(msg[1:])
	if !ok || len(rest) != 0 {
		return nil, false
	}
	kv.set = true
	if len(v) == 0 {
		return key, true
	}
	switch v[0] {
	case 0x0a: // string_value
		s, rest, ok := consumeLen(v[1:])
		if !ok || len(rest) != 0 || !utf8.Valid(s) {
			return nil, false
		}
		kv.kind, kv.str = 1, s
	case 0x10, 0x18: // bool_value, int_value
		x, n := protowire.ConsumeVarint(v[1:])
		if n < 0 || 1+n != len(v) {
			return nil, false
		}
		kv.kind, kv.num = int8(v[0]>>3), x
	case 0x21: // double_value
		if len(v) != 9 {
			return nil, false
		}
		kv.kind, kv.num = 4, binary.LittleEndian.Uint64(v[1:])
	default:
		return nil, false
	}
	return key, true
}

// consumeLen reads a length-delimited value: its bytes and what follows.
func consumeLen(b []byte) (v, rest []byte, ok bool) {
	var n uint64
	var m int
	if len(b) > 0 && b[0] < 0x80 {
		n, m = uint64(b[0]), 1
	} else if n, m = protowire.ConsumeVarint(b); m < 0 {
		return nil, nil, false
	}
	if n > uint64(len(b)-m) {
		return nil, nil, false
	}
	return b[m : m+int(n)], b[m+int(n):], true
}

// slowKeyValue reads a KeyValue field by field, whatever its layout.
func (w *wireReader) slowKeyValue(kv *wireKV, key *[]byte, msg []byte) bool {
	return eachField(msg, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case 1: // key
			if typ != protowire.BytesType || !utf8.Valid(v) {
				return false
			}
			*key = v
		case 2: // value
			if typ != protowire.BytesType || kv.set {
				return false
			}
			kv.set = true
			return w.anyValue(kv, v)
		case 3: // key_strindex (profiles only)
			return typ == protowire.VarintType
		}
		return true
	})
}

// internKey gives kv the interned key for key bytes, read at position pos
// of the span's attributes.
func (w *wireReader) internKey(kv wireKV, key []byte, pos int) (wireKV, bool) {
	k, interned := w.keys[string(key)]
	if !interned {
		k.name = string(key)
		_, k.convention = conventionKeys[k.name]
		k.latency = strings.HasPrefix(k.name, serverLatencyPrefix)
		k.stored = k.name
		if len(k.stored) > w.lim.MaxKeyBytes || hasHidden(k.stored) {
			k.stored = cleanString(k.stored, w.lim.MaxKeyBytes)
		}
		id, known := w.ids[k.stored]
		if !known {
			id = uint32(len(w.ids))
			w.ids[k.stored] = id
			w.seen = append(w.seen, 0)
			w.slot = append(w.slot, 0)
			w.res.Attrs.Names = append(w.res.Attrs.Names, k.stored)
		}
		k.id = id
		w.keys[k.name] = k
	}
	if pos == len(w.byPos) {
		w.byPos = append(w.byPos, posKeys{})
	}
	if pos < len(w.byPos) {
		w.byPos[pos].add(k)
	}
	kv.key = k
	return kv, true
}

// anyValue reads an AnyValue message into kv: scalars as wire fields,
// arrays and kvlists through the generated decoder.
func (w *wireReader) anyValue(kv *wireKV, msg []byte) bool {
	return eachField(msg, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		if num < 1 || num > 8 {
			return true // unknown field
		}
		if kv.kind != 0 {
			return false // a second oneof member: protobuf's last-wins/merge rules, left to it
		}
		kv.kind = int8(num)
		switch num {
		case 1, 7: // string, bytes
			if typ != protowire.BytesType || num == 1 && !utf8.Valid(v) {
				return false
			}
			kv.str = v
		case 2, 3, 8: // bool, int, string_value_strindex
			if typ != protowire.VarintType {
				return false
			}
			kv.num, _ = protowire.ConsumeVarint(v)
		case 4: // double
			if typ != protowire.Fixed64Type {
				return false
			}
			kv.num, _ = protowire.ConsumeFixed64(v)
		case 5, 6: // array, kvlist
			if typ != protowire.BytesType {
				return false
			}
			// Re-read the whole AnyValue: same field, same bytes.
			kv.value = &commonpb.AnyValue{}
			return proto.Unmarshal(protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v), kv.value) == nil
		}
		return true
	})
}

// anyValues hands out the AnyValues of one span's convention attributes,
// from slices reused span to span.
type anyValues struct {
	n       int
	values  []commonpb.AnyValue
	strs    []commonpb.AnyValue_StringValue
	ints    []commonpb.AnyValue_IntValue
	doubles []commonpb.AnyValue_DoubleValue
	bools   []commonpb.AnyValue_BoolValue
}

// reset makes every value handed out so far free to be handed out again.
func (a *anyValues) reset() {
	a.n = 0
	a.strs, a.ints, a.doubles, a.bools = a.strs[:0], a.ints[:0], a.doubles[:0], a.bools[:0]
}

// of is kv's value as the generated decoder builds it (nil when the
// KeyValue had none). The common scalars come from the reused slices
// once they have grown; a string is still copied, as the rules' results
// keep it.
func (a *anyValues) of(kv *wireKV) *commonpb.AnyValue {
	if !kv.set {
		return nil
	}
	switch kv.kind {
	case 1, 2, 3, 4:
	case 5, 6:
		return kv.value
	case 7:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: append([]byte{}, kv.str...)}}
	case 8:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValueStrindex{StringValueStrindex: int32(kv.num)}}
	default:
		return &commonpb.AnyValue{}
	}
	if a.n == len(a.values) {
		// Grown, not appended to: earlier values are pointed to.
		a.values = make([]commonpb.AnyValue, max(2*len(a.values), 16))
	}
	v := &a.values[a.n]
	a.n++
	switch kv.kind {
	case 1:
		a.strs = append(a.strs, commonpb.AnyValue_StringValue{StringValue: string(kv.str)})
		*v = commonpb.AnyValue{Value: &a.strs[len(a.strs)-1]}
	case 2:
		a.bools = append(a.bools, commonpb.AnyValue_BoolValue{BoolValue: kv.num != 0})
		*v = commonpb.AnyValue{Value: &a.bools[len(a.bools)-1]}
	case 3:
		a.ints = append(a.ints, commonpb.AnyValue_IntValue{IntValue: int64(kv.num)})
		*v = commonpb.AnyValue{Value: &a.ints[len(a.ints)-1]}
	case 4:
		a.doubles = append(a.doubles, commonpb.AnyValue_DoubleValue{DoubleValue: math.Float64frombits(kv.num)})
		*v = commonpb.AnyValue{Value: &a.doubles[len(a.doubles)-1]}
	}
	return v
}

// appendValue appends valueString of kv's value to b without building
// the AnyValue.
func (kv *wireKV) appendValue(b []byte, max int) []byte {
	switch kv.kind {
	case 1:
		if len(kv.str) <= max && !hasHidden(kv.str) {
			return append(b, kv.str...) // valid UTF-8, checked when read
		}
		return append(b, cleanString(string(kv.str), max)...)
	case 2:
		return strconv.AppendBool(b, kv.num != 0)
	case 3:
		return strconv.AppendInt(b, int64(kv.num), 10)
	case 4:
		return strconv.AppendFloat(b, math.Float64frombits(kv.num), 'g', -1, 64)
	case 5, 6:
		return append(b, valueString(kv.value, max)...)
	case 7:
		return append(b, cleanString(base64.StdEncoding.EncodeToString(kv.str), max)...)
	}
	return b
}
