package normalize

import (
	"sync"
)

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
