package web

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/assemble"
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

// In an agent loop the trace view draws a call's pre-inference as the
// app's own stretches since the root started, with the earlier model calls
// between them marked apart (and counted once where they ran in parallel),
// as the assembler measured it.
func TestAgentLoopPreInference(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ttft := 100 * time.Millisecond
	span := func(id, parent string, from, to int, role telemetry.LLMRole) telemetry.Span {
		s := telemetry.Span{ProjectID: 1, TraceID: "t1", SpanID: id, ParentSpanID: parent, Service: "agent", Name: id, Start: at(from), End: at(to)}
		if role != telemetry.NotLLM {
			s.LLM = telemetry.LLMCall{Role: role, Model: "gpt-4o", ClientTTFT: &ttft}
		}
		return s
	}
	for _, c := range []struct {
		name    string
		spans   []telemetry.Span
		last    string  // the call checked
		pre     float64 // its pre-inference, ms
		own     []string
		earlier []string
		note    string
	}{
		{
			name: "sequential calls",
			spans: []telemetry.Span{span("root", "", 0, 1000, telemetry.NotLLM), span("c1", "root", 100, 300, telemetry.LLMClient),
				span("tool", "root", 300, 400, telemetry.NotLLM), span("c2", "root", 400, 600, telemetry.LLMClient),
				span("c3", "root", 700, 900, telemetry.LLMClient)},
			last: "c3", pre: 300,
			own:     []string{`x="0.000%" y="3" width="10.000%"`, `x="30.000%" y="3" width="10.000%"`, `x="60.000%" y="3" width="10.000%"`},
			earlier: []string{`x="10.000%" y="3" width="20.000%"`, `x="40.000%" y="3" width="20.000%"`},
			note:    "without the 2 earlier model calls before it (400 ms)",
		},
		{
			name: "parallel calls count once",
			spans: []telemetry.Span{span("root", "", 0, 1000, telemetry.NotLLM), span("p1", "root", 100, 500, telemetry.LLMClient),
				span("p2", "root", 200, 600, telemetry.LLMClient), span("c3", "root", 800, 900, telemetry.LLMClient)},
			last: "c3", pre: 300,
			own:     []string{`x="0.000%" y="3" width="10.000%"`, `x="60.000%" y="3" width="20.000%"`},
			earlier: []string{`x="10.000%" y="3" width="50.000%"`},
			note:    "without the 2 earlier model calls before it (500 ms)",
		},
	} {
		reqs := assemble.Trace(c.spans, nil, assemble.Options{})
		v := traceDetailView("t1", c.spans, reqs, at(2000), false)
		var row *views.WaterfallRow
		for i := range v.Rows {
			if v.Rows[i].Anchor == "span-"+c.last {
				row = &v.Rows[i]
			}
		}
		if row == nil {
			t.Fatalf("%s: no row for %s", c.name, c.last)
		}
		var own, earlier []string
		for _, s := range row.Segments {
			pos := `x="` + s.X + `" y="3" width="` + s.W + `"`
			switch s.Class {
			case "seg-pre":
				own = append(own, pos)
			case "seg-earlier":
				earlier = append(earlier, pos)
			}
		}
		if !slices.Equal(own, c.own) || !slices.Equal(earlier, c.earlier) {
			t.Errorf("%s: own %v, earlier %v; want %v and %v", c.name, own, earlier, c.own, c.earlier)
		}
		call := v.Calls[len(v.Calls)-1]
		if call.Components[0].Name != "Pre-inference" || call.Components[0].Value != views.HumanMs(c.pre) || !strings.Contains(call.Components[0].Note, c.note) {
			t.Errorf("%s: pre-inference figure %+v, want %s noting %q", c.name, call.Components[0], views.HumanMs(c.pre), c.note)
		}
	}
}
