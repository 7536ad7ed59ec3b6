package normalize

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

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
