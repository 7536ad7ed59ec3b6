// Package assemble turns the spans of traces into decomposed LLM requests: it
// pairs every LLM client span with the inference-server span below it and
// splits the call into pre-inference, queue, prefill, network and decode time
// (DESIGN.md, "Decomposition"). It is pure Go over rows: the output depends
// only on the set of spans and the instance history, never on the order in
// which spans arrived, so a trace re-assembled with more spans simply
// replaces its old rows.
package assemble

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// InstanceHistory tells when each inference instance was first seen and
// which scaling events happened; the caller builds it from stored spans and
// events. A nil history disables cold-start detection.
type InstanceHistory struct {
	// FirstSeen is keyed by InstanceKey(service, instance) of the inference
	// server (the server span's Service and Instance).
	FirstSeen map[string]time.Time
	// Events holds scale and instance_started events, in any order. They
	// are matched on ProjectID and Service, so set ProjectID as stored.
	Events []telemetry.Event
}

// InstanceKey is the FirstSeen key of an inference instance.
func InstanceKey(service, instance string) string { return service + "\x00" + instance }

// Options tune cold-start detection; zero values take the defaults.
type Options struct {
	// ColdStartWindow: a server span that starts within this of its
	// instance's first sighting, or after a scale-up of its service, may be
	// a cold start. Default DefaultColdStartWindow.
	ColdStartWindow time.Duration
	// MinHold is the smallest gap between client span start and server span
	// start that counts as a request held while an instance came up.
	// Default DefaultMinHold.
	MinHold time.Duration
}

// Defaults for Options.
const (
	DefaultColdStartWindow = 2 * time.Minute
	DefaultMinHold         = 500 * time.Millisecond
)

// skewTolerance is how far below zero a cross-clock difference may fall and
// still read as 0; beyond it the clocks disagree too much to say anything.
const skewTolerance = 5 * time.Millisecond

// WithDefaults fills the options left zero with their defaults.
func (o Options) WithDefaults() Options {
	if o.ColdStartWindow <= 0 {
		o.ColdStartWindow = DefaultColdStartWindow
	}
	if o.MinHold <= 0 {
		o.MinHold = DefaultMinHold
	}
	return o
}

// Trace assembles the spans of one trace (any order, any mix of services
// and export batches, duplicates allowed) into one LLMRequest per LLM call,
// in call order (CallIndex 0, 1, …). Spans of other traces, if passed, are
// assembled separately as Traces does. spans is not modified.
func Trace(spans []telemetry.Span, hist *InstanceHistory, opt Options) []telemetry.LLMRequest {
	return Traces(spans, hist, opt)
}

// Traces groups spans by (project, trace id), assembles each trace as Trace
// does, and returns all requests sorted by (Start, SpanID), then TraceID and
// ProjectID so equal starts still sort the same way every time. spans is not
// modified.
func Traces(spans []telemetry.Span, hist *InstanceHistory, opt Options) []telemetry.LLMRequest {
	return traces(spans, hist, opt, nil, nil)
}

// traces is Traces with pairings across traces applied (joins, may be nil)
// and, when halves is not nil, the unpaired halves collected into it.
func traces(spans []telemetry.Span, hist *InstanceHistory, opt Options, joins *Joins, halves *[]Half) []telemetry.LLMRequest {
	set := make([]*telemetry.Span, len(spans))
	llmSpans := 0
	for i := range spans {
		set[i] = &spans[i]
		if spans[i].LLM.Role != telemetry.NotLLM {
			llmSpans++
		}
	}
	// Sorting by (project, trace, span) groups traces, makes parent lookups
	// a binary search, and puts duplicates (retried exports) side by side.
	slices.SortFunc(set, compareSpans)
	set = dedupe(set)

	a := newAssembler(hist, opt, len(set))
	a.joins, a.halves = joins, halves
	out := make([]telemetry.LLMRequest, 0, llmSpans)
	for i := 0; i < len(set); {
		j := i + 1
		for j < len(set) && set[j].ProjectID == set[i].ProjectID && set[j].TraceID == set[i].TraceID {
			j++
		}
		out = a.trace(set[i:j], out)
		i = j
	}
	slices.SortFunc(out, compareRequests)
	return out
}

// compareSpans orders by identity first; the remaining keys only break ties
// between duplicates of one span so that the same copy is always kept. The
// early returns matter: this comparator dominates the cost of Traces.
func compareSpans(a, b *telemetry.Span) int {
	if a.ProjectID != b.ProjectID {
		return cmp.Compare(a.ProjectID, b.ProjectID)
	}
	if c := strings.Compare(a.TraceID, b.TraceID); c != 0 {
		return c
	}
	if c := strings.Compare(a.SpanID, b.SpanID); c != 0 {
		return c
	}
	return cmp.Or(
		a.Start.Compare(b.Start),
		a.End.Compare(b.End),
		strings.Compare(a.ParentSpanID, b.ParentSpanID),
		strings.Compare(a.Service, b.Service),
		strings.Compare(a.Instance, b.Instance),
		strings.Compare(a.Name, b.Name),
		strings.Compare(a.StatusCode, b.StatusCode),
		cmp.Compare(a.LLM.Role, b.LLM.Role),
	)
}

// dedupe keeps the first of each run of spans with the same identity.
// OTLP exporters retry whole batches, so the same span can arrive twice.
func dedupe(set []*telemetry.Span) []*telemetry.Span {
	return slices.CompactFunc(set, func(a, b *telemetry.Span) bool {
		return a.SpanID == b.SpanID && a.TraceID == b.TraceID && a.ProjectID == b.ProjectID
	})
}

func compareRequests(a, b telemetry.LLMRequest) int {
	if c := a.Start.Compare(b.Start); c != 0 {
		return c
	}
	if c := strings.Compare(a.SpanID, b.SpanID); c != 0 {
		return c
	}
	if c := strings.Compare(a.TraceID, b.TraceID); c != 0 {
		return c
	}
	return cmp.Compare(a.ProjectID, b.ProjectID)
}
