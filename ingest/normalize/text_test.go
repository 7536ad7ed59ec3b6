package normalize

import (
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// hostileText holds every kind of hidden character: C0, DEL, C1, bidi
// overrides, embeddings, isolates and marks, zero-width space, word
// joiner and byte-order mark.
const hostileText = "a\x00b\x1bc\x7fd\u0085e\u009bf\u202eg\u202ah\u202ci\u2066j\u2069k\u200el\u200fm\u061cn\u200bo\u2060p\ufeffq"

func TestCleanStringStripsHidden(t *testing.T) {
	tests := []struct{ in, want string }{
		{hostileText, "abcdefghijklmnopq"},
		{"gpt-4o\u202e\u2066evil", "gpt-4oevil"},
		// Kept: tab and newlines, ZWNJ/ZWJ (scripts, emoji), other
		// non-ASCII text, U+FFFD for invalid bytes.
		{"line 1\nline 2\r\n\tx", "line 1\nline 2\r\n\tx"},
		{"می\u200cخواهم 👩\u200d💻", "می\u200cخواهم 👩\u200d💻"},
		{"ünïcødé — ✓ \u00a0nbsp \u2028", "ünïcødé — ✓ \u00a0nbsp \u2028"},
		{"bad\xff\x00byte", "bad\uFFFDbyte"},
		{"\u202e", ""},
	}
	for _, tc := range tests {
		if got := cleanString(tc.in, 1024); got != tc.want {
			t.Errorf("cleanString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// The cut counts the cleaned bytes: hidden characters cost nothing.
	if got := cleanString(strings.Repeat("\u202e", 100)+"abcdef", 4); got != "abcd" {
		t.Errorf("cut after stripping = %q, want abcd", got)
	}
	// Every rune up to U+FFFF: hasHidden (bytes) and hiddenRune agree.
	for r := rune(0); r <= 0xffff; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue
		}
		s := "x" + string(r) + "y"
		if hasHidden(s) != hiddenRune(r) || hasHidden([]byte(s)) != hiddenRune(r) {
			t.Fatalf("U+%04X: hasHidden %v, hiddenRune %v", r, hasHidden(s), hiddenRune(r))
		}
	}
}

// TestTracesStripHidden: a hostile export stores no hidden character in
// the names the pages show (service, span, model, event names), nor in
// attribute keys and values, whichever reader takes it.
func TestTracesStripHidden(t *testing.T) {
	s := newSpan("chat "+hostileText, str("gen_ai.request.model", "gpt\u202e-4o"), str("gen_ai.provider.name", "openai"),
		str("k\x1b[31m", "v\u2066x"), kv("list", arr(sv("\u202e"), sv("\x00"))))
	s.Events = []*tracepb.Span_Event{{Name: "first\u200btoken", TimeUnixNano: ns(start)}}
	req := traceRequest([]*commonpb.KeyValue{str("service.name", "\u202echat-api")}, s)
	got := Traces(1, req, now, Limits{}).Spans[0]
	if got.Name != "chat abcdefghijklmnopq" || got.Service != "chat-api" || got.LLM.Model != "gpt-4o" ||
		got.EventNames[0] != "firsttoken" || got.Attributes["k[31m"] != "vx" || got.Attributes["list"] != `["","\u0000"]` {
		t.Errorf("name=%q service=%q model=%q events=%q attrs=%q", got.Name, got.Service, got.LLM.Model, got.EventNames, got.Attributes)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	wire, ok := TracesWire(1, body, now, Limits{})
	if !ok {
		t.Fatal("the wire reader left a hostile but well-formed export to the generated decoder")
	}
	if w := wire.Spans[0]; w.Name != got.Name || w.Attributes["k[31m"] != "vx" || w.LLM.Model != got.LLM.Model {
		t.Errorf("wire reader: name=%q model=%q attrs=%q", w.Name, w.LLM.Model, w.Attributes)
	}
}
