package normalize

import (
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// maxSeconds bounds an attribute duration: it keeps the nanosecond
// conversion far from int64 overflow, and no single request runs a week.
const maxSeconds = 7 * 24 * 3600

// maxCount bounds a token count to what a float64 still holds exactly.
const maxCount = 1 << 53

// spanView is what the convention rules need to know about one span.
type spanView struct {
	attrs         map[string]*commonpb.AnyValue // convention keys only
	server        bool                          // has a gen_ai.latency.* attribute
	name          string
	start         time.Time
	end           time.Time
	events        []spanEvent
	droppedEvents uint32
}

type spanEvent struct {
	name string
	time time.Time
}

// text is attribute k as a trimmed string of at most n bytes, "" if absent.
func (v *spanView) text(k string, n int) string {
	val, ok := v.attrs[k]
	if !ok {
		return ""
	}
	return strings.TrimSpace(valueString(val, n))
}

// role classifies the span: not an LLM call, the client's or the server's.
func (v *spanView) role() telemetry.LLMRole {
	if v.server {
		return telemetry.LLMServer
	}
	for _, m := range serverMarkers {
		switch {
		case m.Event != "":
			if (m.Name == "" || v.name == m.Name) && v.event(m.Event, 0) >= 0 {
				return telemetry.LLMServer
			}
		case v.name == m.Name:
			if _, ok := v.attrs[m.Attr]; ok {
				return telemetry.LLMServer
			}
		}
	}
	for _, r := range notModelCalls {
		if r.vetoes(v) {
			return telemetry.NotLLM
		}
	}
	for _, mk := range llmMarkers {
		if _, ok := v.attrs[mk.Attr]; !ok {
			continue
		}
		if mk.Value == "" || strings.EqualFold(v.text(mk.Attr, 64), mk.Value) {
			return telemetry.LLMClient
		}
	}
	return telemetry.NotLLM
}

func (r *notModelCall) vetoes(v *spanView) bool {
	if r.NamePrefix != "" {
		return len(v.name) >= len(r.NamePrefix) && strings.EqualFold(v.name[:len(r.NamePrefix)], r.NamePrefix)
	}
	if _, ok := v.attrs[r.Attr]; !ok {
		return false
	}
	val := strings.ToLower(v.text(r.Attr, 64))
	for _, c := range r.Calls {
		if val == c {
			return false
		}
	}
	return true
}

// producer names the producer where a rule depends on it ("sglang"), else "".
func (v *spanView) producer() string {
	if strings.HasPrefix(v.text(sglangModuleAttr, 64), sglangModulePrefix) {
		return "sglang"
	}
	return ""
}

// streamed reports whether the client asked for a stream.
func (v *spanView) streamed() bool {
	for _, k := range streamAttrs {
		val, ok := v.attrs[k]
		if !ok {
			continue
		}
		if b, ok := val.GetValue().(*commonpb.AnyValue_BoolValue); ok {
			return b.BoolValue
		}
		return strings.EqualFold(v.text(k, 8), "true")
	}
	return false
}

// event is the index of the first event named name at or after index from,
// or -1.
func (v *spanView) event(name string, from int) int {
	for i := from; i < len(v.events); i++ {
		if v.events[i].name == name {
			return i
		}
	}
	return -1
}

// llmCall applies the conventions table to one span.
func (v *spanView) llmCall() telemetry.LLMCall {
	call := telemetry.LLMCall{Role: v.role()}
	if call.Role == telemetry.NotLLM {
		return call
	}
	producer := v.producer()
	for _, rule := range conventions {
		if rule.Side == clientSide && call.Role != telemetry.LLMClient ||
			rule.Side == serverSide && call.Role != telemetry.LLMServer {
			continue
		}
		for _, k := range rule.Keys {
			if k.NotFor != "" && k.NotFor == producer || k.StreamOnly && !v.streamed() {
				continue
			}
			if v.apply(&call, rule.Field, k) {
				if rule.Field == fieldClientTTFT {
					call.TTFTSource = ttftSource(k)
				}
				break
			}
		}
	}
	call.ErrorType = v.errorType()
	return call
}

// ttftSource names the key a client TTFT came from (telemetry.LLMCall.TTFTSource).
func ttftSource(k wireKey) string {
	src := k.Attr
	switch {
	case k.Unit == firstEvent && k.Event != "":
		src = "event:" + k.Event
	case k.Unit == firstEvent:
		src = "event:first token"
	}
	if k.AfterHeaders {
		src += telemetry.TTFTAfterHeaders
	}
	return src
}

// apply reads one wire key into field f; it reports whether a usable value
// was found.
func (v *spanView) apply(call *telemetry.LLMCall, f field, k wireKey) bool {
	switch k.Unit {
	case firstEvent:
		return v.applyFirstEvent(call, f, k)
	case eventGap:
		i := v.event(k.From, 0)
		if i < 0 {
			return false
		}
		j := v.event(k.Event, i)
		if j < 0 || v.events[j].time.Before(v.events[i].time) {
			return false
		}
		setDuration(call, f, v.events[j].time.Sub(v.events[i].time))
		return true
	case eventWait:
		var wait time.Duration
		found := false
		for i, e := range v.events {
			if e.name != k.From && e.name != k.Also {
				continue
			}
			j := v.event(k.Event, i+1)
			if j < 0 || v.events[j].time.Before(e.time) {
				continue
			}
			wait += v.events[j].time.Sub(e.time)
			found = true
		}
		if !found {
			return false
		}
		setDuration(call, f, wait)
		return true
	case eventCount:
		if v.event(k.From, 0) < 0 {
			return false
		}
		var n int64
		for i := v.event(k.Event, 0); i >= 0; i = v.event(k.Event, i+1) {
			n++
		}
		setCount(call, f, n)
		return true
	}
	val, ok := v.attrs[k.Attr]
	if !ok {
		return false
	}
	switch k.Unit {
	case text, lowerText:
		s := strings.TrimSpace(valueString(val, maxNameBytes))
		if s == "" {
			return false
		}
		if k.Unit == lowerText {
			s = strings.ToLower(s)
		}
		setText(call, f, s)
		return true
	case count:
		var n int64
		if k.UsageSide != "" {
			n, ok = usageCount(val, k.UsageSide)
		} else {
			n, ok = readCount(val)
		}
		if !ok {
			return false
		}
		setCount(call, f, n)
		return true
	case port:
		n, ok := readCount(val)
		if !ok || n < 1 || n > 65535 {
			return false
		}
		call.ServerPort = uint16(n)
		return true
	case endpoint:
		host, p, ok := readEndpoint(val)
		if !ok {
			return false
		}
		if f == fieldServerPort {
			call.ServerPort = p
		} else {
			setText(call, f, host)
		}
		return true
	case seconds, durationText:
		var d time.Duration
		if k.Unit == seconds {
			d, ok = readSeconds(val)
		} else {
			d, ok = readDurationText(val)
		}
		if !ok {
			return false
		}
		setDuration(call, f, d)
		return true
	case timestamp:
		t, ok := readTimestamp(val)
		if !ok {
			return false
		}
		d, ok := v.sinceStart(t)
		if !ok {
			return false
		}
		setDuration(call, f, d)
		return true
	}
	return false
}

// applyFirstEvent reads the first event named k.Event (any first-token
// event when k.Event is empty) as a time since span start.
func (v *spanView) applyFirstEvent(call *telemetry.LLMCall, f field, k wireKey) bool {
	if k.Complete && v.droppedEvents > 0 {
		return false
	}
	for _, e := range v.events {
		if k.Event != "" && e.name != k.Event || k.Event == "" && !isFirstTokenEvent(e.name) {
			continue
		}
		// Only the first matching event counts; if its time is corrupt
		// there is no TTFT rather than a later guess.
		d, ok := v.sinceStart(e.time)
		if !ok {
			return false
		}
		setDuration(call, f, d)
		return true
	}
	return false
}

// sinceStart is t − span start, when t lies within the span: a first token
// before the request or after its end is a broken clock, not a figure.
func (v *spanView) sinceStart(t time.Time) (time.Duration, bool) {
	if t.Before(v.start) || t.After(v.end) {
		return 0, false
	}
	return t.Sub(v.start), true
}

func isFirstTokenEvent(name string) bool {
	n := strings.ToLower(name)
	i := strings.Index(n, "first")
	if i < 0 {
		return false
	}
	rest := n[i+len("first"):]
	return strings.Contains(rest, "token") || strings.Contains(rest, "chunk")
}

func setText(c *telemetry.LLMCall, f field, s string) {
	switch f {
	case fieldModel:
		c.Model = s
	case fieldProvider:
		c.Provider = s
	case fieldOperation:
		c.Operation = s
	case fieldResponseID:
		c.ResponseID = s
	case fieldServerAddress:
		c.ServerAddress = s
	}
}

func setCount(c *telemetry.LLMCall, f field, n int64) {
	switch f {
	case fieldInputTokens:
		c.InputTokens = &n
	case fieldOutputTokens:
		c.OutputTokens = &n
	case fieldPreemptions:
		c.Preemptions = &n
	}
}

func setDuration(c *telemetry.LLMCall, f field, d time.Duration) {
	switch f {
	case fieldClientTTFT:
		c.ClientTTFT = &d
	case fieldQueueTime:
		c.QueueTime = &d
	case fieldPrefillTime:
		c.PrefillTime = &d
	case fieldServerTTFT:
		c.ServerTTFT = &d
	case fieldDecodeTime:
		c.DecodeTime = &d
	case fieldServerE2E:
		c.ServerE2E = &d
	}
}
