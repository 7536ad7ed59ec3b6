package web

import (
	"fmt"
	"math"
	"time"

	"github.com/tokenpath/tokenpath/analysis/assemble"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// beforeCall is what happened between a trace's root start and one call's
// start: the stretches spent in earlier model calls of the trace (busy),
// and how many of those calls there were. Pre-inference is the rest, the
// app's own time (DESIGN.md, "Decomposition").
type beforeCall struct {
	root  time.Time
	busy  []assemble.Interval
	calls int
}

// callsBefore lays out, for every call whose pre-inference the trace's
// root explains, the earlier calls it excludes, as the assembler measured
// them (assemble.Busy over the calls' extents). A call whose own time does
// not match the stored pre-inference (its root is not the trace's first
// parentless span) is left out and drawn as one stretch before the call.
func callsBefore(root *telemetry.Span, reqs []telemetry.LLMRequest) map[string]beforeCall {
	if root == nil || len(reqs) < 2 {
		return nil
	}
	extents := make([]assemble.Interval, 0, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		end := r.Start
		if r.E2E != nil {
			end = r.Start.Add(msDuration(*r.E2E))
		}
		extents = append(extents, assemble.Interval{From: r.Start, To: end})
	}
	out := map[string]beforeCall{}
	for i := range reqs {
		r := &reqs[i]
		if r.PreInference == nil {
			continue
		}
		busy := assemble.Busy(nil, root.Start, r.Start, extents)
		own := r.Start.Sub(root.Start) - assemble.Length(busy)
		if len(busy) == 0 || math.Abs(ms(own)-*r.PreInference) > 1 {
			continue
		}
		n := 0
		for j := range reqs {
			if reqs[j].Start.Before(r.Start) && extents[j].To.After(root.Start) {
				n++
			}
		}
		out[r.SpanID] = beforeCall{root: root.Start, busy: busy, calls: n}
	}
	return out
}

// preInferenceSegments draws a call's pre-inference on its row: the app's
// own stretches between the root's start and the call, and the earlier
// model calls between them (seg-earlier), which pre-inference excludes.
func preInferenceSegments(row *views.WaterfallRow, call *telemetry.LLMRequest, before beforeCall, pct func(time.Time) float64) {
	if before.busy == nil {
		if call.PreInference != nil && *call.PreInference > 0 {
			addSegment(row, pct, "seg-pre", "Pre-inference", call.Start.Add(-msDuration(*call.PreInference)), call.PreInference)
		}
		return
	}
	own := func(from, to time.Time) {
		if d := ms(to.Sub(from)); d > 0 {
			addSegment(row, pct, "seg-pre", "Own time before the call", from, &d)
		}
	}
	pos := before.root
	for _, b := range before.busy {
		own(pos, b.From)
		d := ms(b.To.Sub(b.From))
		addSegment(row, pct, "seg-earlier", "Earlier model calls", b.From, &d)
		pos = b.To
	}
	own(pos, call.Start)
}

// earlierCallsNote says what a call's pre-inference leaves out.
func earlierCallsNote(before beforeCall) string {
	if before.busy == nil {
		return "app work before the call (retrieval, tools); not part of E2E"
	}
	return fmt.Sprintf("the app's own time before the call (retrieval, tools), without the %s before it (%s); not part of E2E",
		pluralCalls(before.calls), diagnose.FormatMs(ms(assemble.Length(before.busy))))
}

func pluralCalls(n int) string {
	if n == 1 {
		return "earlier model call"
	}
	return fmt.Sprintf("%d earlier model calls", n)
}
