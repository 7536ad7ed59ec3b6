package share

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/telemetry"
)

// SnapshotVersion is the layout of Snapshot; bump it when a field changes
// meaning, and keep reading the older versions.
const SnapshotVersion = 1

// Snapshot kinds: which page a snapshot renders as.
const (
	KindDiagnose = "diagnose"
	KindCompare  = "compare"
	KindTrace    = "trace"
)

// SlowestShown is how many slowest requests a diagnosis lists.
const SlowestShown = 10

// Snapshot is a page's data frozen at TakenAt, stored as JSON in
// share_links.snapshot. Exactly one of Diagnose, Compare, Trace is set, as
// Kind says.
type Snapshot struct {
	Version int       `json:"version"`
	Kind    string    `json:"kind"`
	Path    string    `json:"path"` // the page with absolute times
	TakenAt time.Time `json:"taken_at"`
	// AssembledThrough is set when assembly trailed the spans received
	// (analysis.AssemblyBehind) as the snapshot was taken: requests from spans that
	// arrived after it are missing from the page, and a reader of the link
	// days later must be told, as the live page told its viewer.
	AssembledThrough *time.Time `json:"assembled_through,omitempty"`

	Diagnose *DiagnoseData `json:"diagnose,omitempty"`
	Compare  *CompareData  `json:"compare,omitempty"`
	Trace    *TraceData    `json:"trace,omitempty"`
}

// DiagnoseData is everything the diagnosis page shows.
//
// Requests (Slowest here, TraceData.Requests) are stored as
// telemetry.LLMRequest with its Go field names, not in the API's request
// JSON (clickhouse.RequestFields): links already shared hold that layout
// and must keep opening, and the pages render LLMRequest, so the snapshot
// stays a copy of what the page read (TestStoredSnapshotRequests).
type DiagnoseData struct {
	Params    DiagnoseParams         `json:"params"`
	Diagnosis diagnose.Diagnosis     `json:"diagnosis"`
	Slowest   []telemetry.LLMRequest `json:"slowest"` // by TTFT, at most SlowestShown
	// Guard is how the default baseline and objective were chosen.
	Guard analysis.BaselineGuard `json:"guard"`
	// Coverage is the window's coverage of the diagnosed service (of every
	// service without one).
	Coverage []analysis.ServiceCoverage `json:"coverage,omitempty"`
}

// CompareData is everything the compare page shows.
type CompareData struct {
	Params     CompareParams       `json:"params"`
	Comparison diagnose.Comparison `json:"comparison"`
}

// TraceData is everything a trace page shows.
type TraceData struct {
	TraceID  string                 `json:"trace_id"`
	Spans    []telemetry.Span       `json:"spans"`
	Requests []telemetry.LLMRequest `json:"requests"`
}

// Title is the link's headline: the verdict sentence of a diagnosis, the
// summary of a comparison, what a trace did.
func (s Snapshot) Title() string {
	switch {
	case s.Diagnose != nil:
		return s.Diagnose.Diagnosis.Summary
	case s.Compare != nil:
		who := s.Compare.Params.Service
		if who == "" {
			who = "all services"
		}
		return "Compare " + who + ": " + CompareSentence(s.Compare.Comparison)
	case s.Trace != nil:
		return s.Trace.Summary()
	}
	return "Tokenpath snapshot"
}

// Description is what a chat unfurl shows under the title: the first lines
// of evidence, or the figures behind a summary.
func (s Snapshot) Description() string {
	var parts []string
	switch {
	case s.Diagnose != nil:
		for i, e := range s.Diagnose.Diagnosis.Evidence {
			if i == 2 {
				break
			}
			parts = append(parts, fmt.Sprintf("%d. %s", e.N, e.Text))
		}
		if len(parts) == 0 {
			parts = append(parts, diagnose.Plural(s.Diagnose.Diagnosis.Requests, "request")+" diagnosed.")
		}
	case s.Compare != nil:
		c := s.Compare.Comparison
		parts = append(parts, fmt.Sprintf("%s before, %d after.", diagnose.Plural(c.BeforeRequests, "request"), c.AfterRequests))
		if len(c.Worse) > 0 {
			parts = append(parts, "Worse: "+diagnose.MetricLabel(strings.Join(c.Worse, ", "))+".")
		}
		if len(c.Better) > 0 {
			parts = append(parts, "Better: "+diagnose.MetricLabel(strings.Join(c.Better, ", "))+".")
		}
	case s.Trace != nil:
		seen := map[string]bool{}
		var services []string
		for _, sp := range s.Trace.Spans {
			if !seen[sp.Service] {
				seen[sp.Service] = true
				services = append(services, sp.Service)
			}
		}
		parts = append(parts, fmt.Sprintf("%s across %s.", diagnose.Plural(len(s.Trace.Spans), "span"), strings.Join(services, ", ")))
		for _, r := range s.Trace.Requests {
			if r.TTFT != nil && r.Queue != nil && r.Prefill != nil {
				parts = append(parts, fmt.Sprintf("%s: TTFT %s (queue %s, prefill %s).", r.Model, diagnose.FormatMs(*r.TTFT), diagnose.FormatMs(*r.Queue), diagnose.FormatMs(*r.Prefill)))
				break
			}
		}
	}
	d := strings.Join(parts, " ")
	if r := []rune(d); len(r) > 300 {
		d = string(r[:299]) + "…"
	}
	return d
}

// Summary says in one line what the trace did.
func (t *TraceData) Summary() string {
	n := len(t.Requests)
	var slowest float64
	for i := range t.Requests {
		if v := t.Requests[i].TTFT; v != nil && *v > slowest {
			slowest = *v
		}
	}
	calls := "LLM calls"
	if n == 1 {
		calls = "LLM call"
	}
	s := fmt.Sprintf("Trace %s…: %d %s", t.TraceID[:min(8, len(t.TraceID))], n, calls)
	if slowest > 0 {
		s += ", slowest TTFT " + diagnose.FormatMs(slowest)
	}
	return s
}

// CompareSentence says in one short sentence what changed between two
// windows: the headline latency, then what got worse and better by name.
// (Comparison.Summary quotes every figure; the page's tables do that.)
func CompareSentence(c diagnose.Comparison) string {
	head := ""
	for _, name := range []string{diagnose.ComponentTTFT, diagnose.ComponentE2E} {
		for _, ch := range c.Changes {
			if ch.Name == name && ch.Before.P95 != nil && ch.After.P95 != nil {
				head = fmt.Sprintf("%s p95 %s → %s", diagnose.MetricLabel(name), diagnose.FormatMs(*ch.Before.P95), diagnose.FormatMs(*ch.After.P95))
				break
			}
		}
		if head != "" {
			break
		}
	}
	better, worse := nameList(c.Better), nameList(c.Worse)
	var body string
	switch {
	case better == "" && worse == "":
		body = "Nothing changed beyond noise"
	case worse == "":
		body = "Better: " + better + "; nothing got worse"
	case better == "":
		body = "Worse: " + worse + "; nothing got better"
	default:
		body = "Better: " + better + "; but worse elsewhere: " + worse
	}
	if head == "" {
		return body + "."
	}
	return head + ". " + body + "."
}

// nameList names metrics in words: "queue, prefill, decode and 9 more".
func nameList(names []string) string {
	const shown = 3
	var ws []string
	for i, n := range names {
		if i == shown {
			break
		}
		ws = append(ws, diagnose.MetricLabel(n))
	}
	switch {
	case len(names) > shown:
		return strings.Join(ws, ", ") + fmt.Sprintf(" and %d more", len(names)-shown)
	case len(ws) > 1:
		return strings.Join(ws[:len(ws)-1], ", ") + " and " + ws[len(ws)-1]
	}
	return strings.Join(ws, "")
}
