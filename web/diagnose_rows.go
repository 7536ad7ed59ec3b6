package web

import (
	"fmt"
	"maps"
	"net/url"
	"strings"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/share"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

func textOr(s, word string) string {
	if s == "" {
		return word
	}
	return s
}

// componentRows lists the parts (with their chart colour) and then the
// headline latencies, each now and against the baseline.
func componentRows(d diagnose.Diagnosis) []views.PartRow {
	dirs := map[string]string{}
	if d.Answers.Compare != nil {
		for _, ch := range d.Answers.Compare.Changes {
			dirs[ch.Name] = ch.Direction
		}
	}
	type row struct {
		key, name, hint, swatch string
		headline                bool
	}
	var rows []row
	for _, cp := range chartParts {
		rows = append(rows, row{cp.key, cp.label, cp.hint, cp.swatch, false})
	}
	rows = append(rows,
		row{diagnose.ComponentTTFT, "TTFT", "time to first token", "", true},
		row{diagnose.ComponentE2E, "End to end", "the whole model call", "", true},
		row{diagnose.ComponentITL, "ITL", "time per output token", "", true},
	)
	hasBase := d.Answers.Compare != nil
	var out []views.PartRow
	for _, r := range rows {
		st, ok := d.Components[r.key]
		if !ok || (st.Count == 0 && st.BaselineCount == 0) {
			continue
		}
		cr := views.PartRow{Name: r.name, Hint: r.hint, Swatch: r.swatch, Headline: r.headline,
			P50: views.HumanMsPtr(st.P50), P95: views.HumanMsPtr(st.P95), P99: views.HumanMsPtr(st.P99),
			BaselineP95: views.HumanMsPtr(st.BaselineP95), Delta: views.NoValue}
		if sc, ok := fromServerMetrics(d, r.key); ok {
			cr.Hint = "server histogram"
			if sc.ResolutionMs != nil {
				cr.Resolution = "within a " + views.HumanMs(*sc.ResolutionMs) + " bucket"
			}
		}
		if st.P95 != nil && st.BaselineP95 != nil {
			cr.Delta = views.HumanDeltaMs(*st.P95 - *st.BaselineP95)
			if *st.BaselineP95 > 0 {
				cr.Delta += " (" + views.HumanRatio(*st.P95 / *st.BaselineP95) + ")"
			}
		}
		if hasBase {
			cr.Direction = dirs[r.key]
			if cr.Direction == "" {
				cr.Direction = "unknown"
			}
			cr.DirectionWords = directionWords(cr.Direction)
			// The comparison judges the p95 of every request, which need
			// not move where the row's figures do: 2 % of requests held
			// 26 s leave the p95 of all at 0, and read "no change" beside
			// a 26 s p95. The cold-start wait's row shows the held
			// requests, so it is judged on theirs; a part only one side
			// has (a cold start's wait, a first self-hosted model) has no
			// p95 to set against and is new or gone.
			switch {
			case r.key == diagnose.ComponentColdStartWait && st.P95 != nil && st.BaselineP95 != nil:
				cr.Direction = diagnose.ComponentDirection(r.key, *st.BaselineP95, *st.P95)
				cr.DirectionWords = directionWords(cr.Direction)
			case st.Count > 0 && st.BaselineCount == 0:
				cr.Direction, cr.DirectionWords = "worse", "new in this window"
			case st.Count == 0 && st.BaselineCount > 0:
				cr.Direction, cr.DirectionWords = "better", "gone in this window"
			}
		}
		out = append(out, cr)
	}
	return out
}

// fromServerMetrics returns the server histogram a component's figures
// were read from, when they were (no server spans: the requests did not
// measure it themselves).
func fromServerMetrics(d diagnose.Diagnosis, key string) (diagnose.ServerComponent, bool) {
	if d.ServerMetrics == nil {
		return diagnose.ServerComponent{}, false
	}
	sc, ok := d.ServerMetrics.Components[key]
	st := d.Components[key]
	if !ok || sc.P95 == nil || st.P95 == nil || *sc.P95 != *st.P95 {
		return diagnose.ServerComponent{}, false
	}
	return sc, true
}

// serverMetricsNote says where a metrics-only split comes from; "" when
// the requests carry their own.
func serverMetricsNote(d diagnose.Diagnosis) string {
	sm := d.ServerMetrics
	if sm == nil {
		return ""
	}
	note := "No server spans: the parts marked “server histogram” are the inference server's own metrics (" + strings.Join(sm.Servers, ", ") + ")"
	if len(sm.Endpoints) > 0 {
		note += ", tied to the calls to " + strings.Join(sm.Endpoints, ", ")
	}
	return note + ", over the window rather than per request. Their quantiles are interpolated within the histogram's buckets: the exact p95 lies within the bucket shown under it."
}

func directionWords(dir string) string {
	switch dir {
	case "worse":
		return "worse"
	case "better":
		return "better"
	case "same":
		return "no change"
	case "changed":
		return "changed"
	}
	return "no data"
}

// bubbleParams are the requests list's parameters for bubble-up keys.
var bubbleParams = map[string]string{diagnose.KeyInstance: "instance", diagnose.KeyModel: "model", diagnose.KeyTenant: "tenant",
	diagnose.KeyRoute: "route", diagnose.KeyPromptLength: "prompt_length", diagnose.KeyColdStart: "cold_start"}

// bubbleHref lists the window's slow requests holding an attribution's
// value (slow: the query of them all), "" for a value the requests list
// cannot filter by (a raw span attribute, not a cold start).
func bubbleHref(slow url.Values, b diagnose.Attribution) string {
	param := bubbleParams[b.Key]
	if param == "" || (b.Key == diagnose.KeyColdStart && b.Value != "true") {
		return ""
	}
	q := maps.Clone(slow)
	q.Set(param, b.Value)
	return "/requests?" + q.Encode()
}

func bubbleRows(bs []diagnose.Attribution) []views.BubbleRow {
	var out []views.BubbleRow
	for _, b := range bs {
		r := views.BubbleRow{Attribute: attributeLabel(b.Key), Value: attributeValue(b.Key, b.Value),
			Slow: views.HumanPct(b.SlowShare), Fast: views.HumanPct(b.FastShare), Base: views.NoValue, SlowCount: b.SlowCount}
		if b.BaselineShare != nil {
			r.Base = views.HumanPct(*b.BaselineShare)
		}
		r.Sentence = fmt.Sprintf("%s of slow requests %s, against %s of the rest", views.HumanPct(b.SlowShare), attributePhrase(b.Key, b.Value), views.HumanPct(b.FastShare))
		out = append(out, r)
	}
	return out
}

func attributeLabel(key string) string {
	switch key {
	case diagnose.KeyInstance:
		return "Instance"
	case diagnose.KeyModel:
		return "Model"
	case diagnose.KeyTenant:
		return "Tenant"
	case diagnose.KeyRoute:
		return "Route"
	case diagnose.KeyPromptLength:
		return "Prompt length"
	case diagnose.KeyColdStart:
		return "Cold start"
	}
	return key
}

func attributeValue(key, value string) string {
	switch key {
	case diagnose.KeyPromptLength:
		return value + " tokens"
	case diagnose.KeyColdStart:
		if value == "true" {
			return "yes"
		}
		return "no"
	}
	return value
}

func attributePhrase(key, value string) string {
	switch key {
	case diagnose.KeyInstance:
		return "hit instance " + value
	case diagnose.KeyModel:
		return "used model " + value
	case diagnose.KeyTenant:
		return "came from tenant " + value
	case diagnose.KeyRoute:
		return "came through route " + value
	case diagnose.KeyPromptLength:
		return "had " + value + " token prompts"
	case diagnose.KeyColdStart:
		if value == "true" {
			return "were cold starts"
		}
		return "were not cold starts"
	}
	return fmt.Sprintf("had %s = %s", key, value)
}

func slowRow(r telemetry.LLMRequest) views.SlowRequestRow {
	row := views.SlowRequestRow{Start: r.Start.UTC().Format("15:04:05.000"), TraceID: r.TraceID, TraceHref: share.TracePath(r.TraceID),
		Service: r.Service, Instance: textOr(r.Instance, "unknown instance"),
		TTFT: views.HumanMsPtr(r.TTFT), Queue: views.HumanMsPtr(r.Queue), Prefill: views.HumanMsPtr(r.Prefill),
		Network: views.HumanMsPtr(r.Network), Decode: views.HumanMsPtr(r.Decode),
		InputTokens: views.NoValue, ColdStart: r.ColdStart, Error: r.Error}
	if r.InputTokens != nil {
		row.InputTokens = views.HumanTokens(float64(*r.InputTokens))
	}
	return row
}

// coverageRows lays out the window's coverage per service.
func coverageRows(cov []analysis.ServiceCoverage) []views.CoverageRow {
	rows := make([]views.CoverageRow, 0, len(cov))
	pct := func(c analysis.ServiceCoverage, n int64) string { return humanPct(c.Share(n)) }
	for _, c := range cov {
		producers := strings.Join(c.Producers, ", ")
		if producers == "" {
			producers = noValue
		}
		rows = append(rows, views.CoverageRow{Service: c.Service, Producers: producers, Requests: views.HumanInt(int(c.Requests)),
			ClientTTFT: pct(c, c.ClientTTFT), ServerSplit: pct(c, c.ServerSplit),
			Joined:    fmt.Sprintf("%d / %d / %d", c.JoinedBy["trace"], c.JoinedBy["id"], c.JoinedBy["match"]),
			Unmatched: views.HumanInt(int(c.UnmatchedServer)), Advice: c.Advice})
	}
	return rows
}
