package normalize

import (
	"strings"
	"unicode/utf8"
)

// cleanString makes s valid UTF-8, strips the hidden characters
// (hiddenRune) and cuts it to at most max bytes on a rune boundary.
// Every name and value stored from telemetry passes through it, and the
// wire reader's shortcuts (wire.go) keep a string as sent only when
// hasHidden finds nothing, so both readers store the same text.
func cleanString(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if hasHidden(s) {
		s = stripHidden(s)
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// CleanText is cleanString for text that reaches the pages by another
// road than OTLP (the events webhook): valid UTF-8 without hidden
// characters, at most max bytes.
func CleanText(s string, max int) string { return cleanString(s, max) }

// hiddenRune reports the characters no stored name or value keeps: C0
// controls but tab, newline and carriage return (prompts and stack traces
// need them; a page shows them as spaces), DEL and C1 controls, the bidi
// embeddings, overrides, isolates and marks, and the invisible zero-width
// space, word joiner and byte-order mark. Telemetry with these could hide
// text or reorder what a page shows beside it (TestCleanStringStripsHidden).
// ZWNJ and ZWJ (U+200C, U+200D) stay: Persian and Indic scripts and emoji
// sequences need them, and they move nothing.
func hiddenRune(r rune) bool {
	switch {
	case r < 0x20:
		return r != '\t' && r != '\n' && r != '\r'
	case r < 0x7f:
		return false
	case r <= 0x9f: // DEL, C1
		return true
	}
	switch r {
	case 0x061c, // Arabic letter mark
		0x200b, 0x200e, 0x200f, // zero-width space, LRM, RLM
		0x202a, 0x202b, 0x202c, 0x202d, 0x202e, // embeddings, pop, overrides
		0x2060,                         // word joiner
		0x2066, 0x2067, 0x2068, 0x2069, // isolates
		0xfeff: // byte-order mark
		return true
	}
	return false
}

// hiddenLead marks the bytes that start a hidden character in UTF-8:
// the controls themselves, and the lead bytes of the multi-byte ones
// (C2 for C1, D8 for U+061C, E2 for U+20xx, EF for U+FEFF).
var hiddenLead = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = c != '\t' && c != '\n' && c != '\r'
	}
	t[0x7f], t[0xc2], t[0xd8], t[0xe2], t[0xef] = true, true, true, true, true
	return t
}()

// hasHidden reports whether valid UTF-8 s holds a hidden character. It
// reads bytes, allocating nothing, so the wire reader can keep a clean
// value as sent (BenchmarkTracesWire).
func hasHidden[T ~string | ~[]byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if !hiddenLead[s[i]] {
			continue
		}
		c := s[i]
		if c < 0x80 {
			return true
		}
		if i+1 >= len(s) {
			return false
		}
		b1 := s[i+1]
		switch c {
		case 0xc2: // U+0080–U+009F
			if b1 <= 0x9f {
				return true
			}
		case 0xd8: // U+061C
			if b1 == 0x9c {
				return true
			}
		case 0xe2, 0xef:
			if i+2 >= len(s) {
				return false
			}
			if hiddenRune(rune(c&0x0f)<<12 | rune(b1&0x3f)<<6 | rune(s[i+2]&0x3f)) {
				return true
			}
		}
	}
	return false
}

// stripHidden returns valid UTF-8 s without its hidden characters.
func stripHidden(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if !hiddenRune(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}
