package main

import (
	"encoding/hex"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestTemplatePatch: a patched export carries the send's trace ids and
// every span's times moved by the time since the template was built,
// all else as built.
func TestTemplatePatch(t *testing.T) {
	base := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	templates, err := buildTemplates(2, 200, 7, base)
	if err != nil {
		t.Fatal(err)
	}
	tpl := templates[1]
	var orig coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(tpl.body, &orig); err != nil {
		t.Fatal(err)
	}
	const shift = 95 * time.Second
	var got coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(tpl.patch(nil, 0x0102030405060708, base.Add(shift)), &got); err != nil {
		t.Fatal(err)
	}
	spans := 0
	for i, rs := range got.ResourceSpans {
		for j, ss := range rs.ScopeSpans {
			for k, sp := range ss.Spans {
				o := orig.ResourceSpans[i].ScopeSpans[j].Spans[k]
				spans++
				if d := time.Duration(sp.StartTimeUnixNano - o.StartTimeUnixNano); d != shift {
					t.Fatalf("span %x: start moved by %s, want %s", sp.SpanId, d, shift)
				}
				if d := time.Duration(sp.EndTimeUnixNano - o.EndTimeUnixNano); d != shift {
					t.Fatalf("span %x: end moved by %s, want %s", sp.SpanId, d, shift)
				}
				if id := hex.EncodeToString(sp.TraceId[8:]); id != "0102030405060708" {
					t.Fatalf("trace id tail %s, want the send sequence", id)
				}
				if start := time.Unix(0, int64(o.StartTimeUnixNano)); start.After(base.Add(2*time.Minute)) || start.Before(base.Add(-time.Minute)) {
					// requests start in the half minute before base; a cold
					// start can delay the server span by a minute or so
					t.Fatalf("template span starts at %s, want near %s", start, base)
				}
				sp.StartTimeUnixNano, sp.EndTimeUnixNano = o.StartTimeUnixNano, o.EndTimeUnixNano
				copy(sp.TraceId[8:], o.TraceId[8:])
				if !proto.Equal(sp, o) {
					t.Fatalf("span %x changed beyond its ids and times", sp.SpanId)
				}
			}
		}
	}
	if spans != tpl.spans {
		t.Fatalf("%d spans, template has %d", spans, tpl.spans)
	}
	// A clock behind the template's build moves nothing.
	if err := proto.Unmarshal(tpl.patch(nil, 1, base.Add(-time.Hour)), &got); err != nil {
		t.Fatal(err)
	}
	if s, o := got.ResourceSpans[0].ScopeSpans[0].Spans[0].StartTimeUnixNano, orig.ResourceSpans[0].ScopeSpans[0].Spans[0].StartTimeUnixNano; s != o {
		t.Fatalf("start moved by %s for a clock behind the build", time.Duration(s-o))
	}
}
