package web

import (
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// An inference server's span draws its split where it fell in the span:
// queue and prefill from its start, decode from its first token, or
// ending with the span when the server did not say when that came.
func TestServerSegments(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	pct := func(x time.Time) float64 { return float64(x.Sub(t0)) / float64(time.Second) * 100 } // a 1 s trace
	d := func(ms int) *time.Duration { v := time.Duration(ms) * time.Millisecond; return &v }
	for _, c := range []struct {
		name string
		llm  telemetry.LLMCall
		want []views.Segment
	}{
		{"vLLM's whole split", telemetry.LLMCall{QueueTime: d(100), PrefillTime: d(150), ServerTTFT: d(300), DecodeTime: d(500)},
			[]views.Segment{{Class: "seg-queue", X: "10.000%", W: "10.000%"}, {Class: "seg-prefill", X: "20.000%", W: "15.000%"}, {Class: "seg-decode", X: "40.000%", W: "50.000%"}}},
		{"prefill from TTFT − queue", telemetry.LLMCall{QueueTime: d(100), ServerTTFT: d(300), DecodeTime: d(500)},
			[]views.Segment{{Class: "seg-queue", X: "10.000%", W: "10.000%"}, {Class: "seg-prefill", X: "20.000%", W: "20.000%"}, {Class: "seg-decode", X: "40.000%", W: "50.000%"}}},
		{"no first token: decode ends with the span", telemetry.LLMCall{QueueTime: d(100), DecodeTime: d(400)},
			[]views.Segment{{Class: "seg-queue", X: "10.000%", W: "10.000%"}, {Class: "seg-decode", X: "60.000%", W: "40.000%"}}},
		{"nothing timed", telemetry.LLMCall{}, nil},
	} {
		c.llm.Role = telemetry.LLMServer
		s := &telemetry.Span{Start: t0.Add(100 * time.Millisecond), End: t0.Add(time.Second), LLM: c.llm}
		var row views.WaterfallRow
		serverSegments(&row, s, pct)
		if len(row.Segments) != len(c.want) {
			t.Errorf("%s: %d segments %+v, want %+v", c.name, len(row.Segments), row.Segments, c.want)
			continue
		}
		for i, w := range c.want {
			if g := row.Segments[i]; g.Class != w.Class || g.X != w.X || g.W != w.W {
				t.Errorf("%s: segment %d is %s at %s, %s wide; want %s at %s, %s wide", c.name, i, g.Class, g.X, g.W, w.Class, w.X, w.W)
			}
		}
	}
}
