package web

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// chartPart is one part of a request on the component chart.
type chartPart struct {
	key, label, color, swatch, hint string
}

// chartParts are the parts of a request, bottom to top.
var chartParts = []chartPart{
	{diagnose.ComponentPreInference, "Pre-inference", "--c-pre", "sw-pre", "app work before the call"},
	{diagnose.ComponentColdStartWait, "Cold-start wait", "--c-cold", "sw-cold", "held for a new instance"},
	{diagnose.ComponentQueue, "Queue", "--c-queue", "sw-queue", "waiting for a slot on the server"},
	{diagnose.ComponentPrefill, "Prefill", "--c-prefill", "sw-prefill", "reading the prompt"},
	{diagnose.ComponentNetwork, "Network", "--c-network", "sw-network", "server to client, gateways"},
	{diagnose.ComponentDecode, "Decode", "--c-decode", "sw-decode", "writing the answer"},
}

func diagnoseCharts(d diagnose.Diagnosis) []views.DiagChart {
	if len(d.Series) == 0 {
		return nil
	}
	width := time.Duration(d.BucketSeconds * float64(time.Second))
	per := views.HumanDuration(width)
	xs := make([]*float64, len(d.Series))
	for i, b := range d.Series {
		xs[i] = telemetry.Ptr(float64(b.Start.Unix()))
	}
	markers := chartMarkers(d.Series)

	// One line per part at p95, with TTFT p95 drawn thick over them. Lines,
	// not a stack: p95s of parts do not add up, and a stack of them is
	// dominated by its largest part (decode, often a minute) and flattens
	// the queue that grew from 20 ms to 2 s. A line that rises with TTFT
	// names the cause. Decode is after the first token, so it starts
	// hidden (one click in the legend) unless it is the verdict.
	parts := views.DiagChart{ID: "chart-parts", Title: "What grew: TTFT p95 and the p95 of each part",
		Caption: "p95 of each part per " + per + " bucket, one line each, with TTFT p95 drawn thick. A part whose line rises with TTFT explains it. " +
			"Decode (after the first token) is hidden until you click it in the legend. Dashed lines mark scaling events and new instances.",
		Spec: views.DiagChartSpec{YLabel: "p95", YUnit: "ms", Markers: markers, Data: [][]*float64{xs}}}
	parts.TableCaption = "Table: p95 of each part per " + per + " bucket"
	parts.Head = []string{"Bucket (UTC)", "Requests"}
	var used []chartPart
	for _, cp := range chartParts {
		col := make([]*float64, len(d.Series))
		seen := false
		for i, b := range d.Series {
			if v, ok := b.P95[cp.key]; ok {
				col[i], seen = telemetry.Ptr(v), true
			}
		}
		if !seen {
			continue
		}
		used = append(used, cp)
		hidden := cp.key == diagnose.ComponentDecode && d.Verdict != diagnose.VerdictDecode
		parts.Spec.Series = append(parts.Spec.Series, views.DiagSeries{Label: cp.label, Color: cp.color, Axis: 1, Hidden: hidden})
		parts.Spec.Data = append(parts.Spec.Data, col)
		parts.Head = append(parts.Head, cp.label+" p95")
	}
	ttftP95 := make([]*float64, len(d.Series))
	for i, b := range d.Series {
		ttftP95[i] = b.TTFT.P95
	}
	parts.Spec.Series = append(parts.Spec.Series, views.DiagSeries{Label: "TTFT p95", Color: "--ink", Axis: 1, Bold: true})
	parts.Spec.Data = append(parts.Spec.Data, ttftP95)
	parts.Head = append(parts.Head, "TTFT p95")
	for _, b := range d.Series {
		row := []string{bucketClock(b.Start, d.BucketSeconds), views.HumanInt(b.Requests)}
		for _, cp := range used {
			row = append(row, msOrDash(b.P95, cp.key))
		}
		row = append(row, views.HumanMsPtr(b.TTFT.P95))
		parts.Rows = append(parts.Rows, row)
	}

	// TTFT with the pressure gauges, each on its own right axis: a
	// percentage and a count share no scale.
	ttft := views.DiagChart{ID: "chart-ttft", Title: "TTFT p99 against KV cache and waiting requests",
		Caption: "Left axis: time to first token per " + per + " bucket. Right axes: the inference server's KV-cache usage (0–100 %) and requests waiting (a count), the highest sample in the bucket.",
		Spec: views.DiagChartSpec{YLabel: "TTFT", YUnit: "ms", Y2Label: "KV cache %", Y2Unit: "pct", Y3Label: "waiting", Y3Unit: "count", Markers: markers,
			Series: []views.DiagSeries{
				{Label: "TTFT p99", Color: "--accent", Axis: 1},
				{Label: "TTFT p50", Color: "--c-pre", Axis: 1, Dash: true},
			}}}
	p99 := make([]*float64, len(d.Series))
	p50 := make([]*float64, len(d.Series))
	kv := make([]*float64, len(d.Series))
	wait := make([]*float64, len(d.Series))
	hasKV, hasWait := false, false
	for i, b := range d.Series {
		p99[i], p50[i] = b.TTFT.P99, b.TTFT.P50
		if b.KVCacheUsage != nil {
			kv[i], hasKV = telemetry.Ptr(math.Round(*b.KVCacheUsage*1000)/10), true
		}
		if b.RequestsWaiting != nil {
			wait[i], hasWait = b.RequestsWaiting, true
		}
	}
	ttft.Spec.Data = [][]*float64{xs, p99, p50}
	if hasKV {
		ttft.Spec.Series = append(ttft.Spec.Series, views.DiagSeries{Label: "KV cache %", Color: "--c-queue", Axis: 2})
		ttft.Spec.Data = append(ttft.Spec.Data, kv)
	}
	if hasWait {
		ttft.Spec.Series = append(ttft.Spec.Series, views.DiagSeries{Label: "Requests waiting", Color: "--c-network", Axis: 3, Dash: true})
		ttft.Spec.Data = append(ttft.Spec.Data, wait)
	}
	if !hasKV {
		ttft.Spec.Y2Label, ttft.Spec.Y2Unit = "", ""
	}
	if !hasWait {
		ttft.Spec.Y3Label, ttft.Spec.Y3Unit = "", ""
	}
	if !hasKV && !hasWait {
		ttft.Caption += " No KV-cache or waiting-request metrics were recorded for this service (scrape the inference server's /metrics, or it is a managed API)."
	}
	ttft.TableCaption = "Table: TTFT, KV cache and waiting requests per " + per + " bucket"
	ttft.Head = []string{"Bucket (UTC)", "Requests", "TTFT p50", "TTFT p99", "KV cache", "Waiting", "Running", "Replicas", "Cold starts"}
	for _, b := range d.Series {
		row := []string{bucketClock(b.Start, d.BucketSeconds), views.HumanInt(b.Requests), views.HumanMsPtr(b.TTFT.P50), views.HumanMsPtr(b.TTFT.P99),
			gaugePct(b.KVCacheUsage), gaugeCount(b.RequestsWaiting), gaugeCount(b.RequestsRunning), replicasText(b.Replicas), views.HumanInt(b.ColdStarts)}
		ttft.Rows = append(ttft.Rows, row)
	}
	return []views.DiagChart{parts, ttft}
}

func msOrDash(m map[string]float64, key string) string {
	if v, ok := m[key]; ok {
		return views.HumanMs(v)
	}
	return views.NoValue
}

func gaugePct(p *float64) string {
	if p == nil {
		return views.NoValue
	}
	return views.HumanPct(*p)
}

func gaugeCount(p *float64) string {
	if p == nil {
		return views.NoValue
	}
	return views.HumanCount(*p)
}

func replicasText(p *int32) string {
	if p == nil {
		return views.NoValue
	}
	return views.HumanInt(int(*p))
}

// maxMarkers keeps the chart legible; the event list has them all.
const maxMarkers = 12

// chartMarkers marks scale events, started instances and the first cold
// starts of a run of buckets without an instance event.
func chartMarkers(series []diagnose.Bucket) []views.DiagMarker {
	var out []views.DiagMarker
	prevCold := false
	for _, b := range series {
		instanceEvent := false
		for _, e := range b.Events {
			label := markerLabel(e)
			if label == "" {
				continue
			}
			instanceEvent = instanceEvent || e.Kind == telemetry.EventInstanceStarted || e.Kind == telemetry.EventScale
			out = append(out, views.DiagMarker{T: float64(e.Time.Unix()), Label: label})
		}
		cold := b.ColdStarts > 0
		if cold && !prevCold && !instanceEvent {
			out = append(out, views.DiagMarker{T: float64(b.Start.Unix()), Label: "cold starts"})
		}
		prevCold = cold
	}
	if len(out) > maxMarkers {
		out = out[:maxMarkers]
	}
	return out
}

func markerLabel(e diagnose.EventMark) string {
	switch e.Kind {
	case telemetry.EventScale:
		if e.FromReplicas != nil && e.ToReplicas != nil {
			return fmt.Sprintf("scale %d→%d", *e.FromReplicas, *e.ToReplicas)
		}
		return "scale"
	case telemetry.EventInstanceStarted:
		if e.Instance != "" {
			return "new " + shortInstance(e.Instance)
		}
		return "new instance"
	}
	return ""
}

// shortInstance keeps a chart label short: a pod name's last part
// ("vllm-llama-kb2w5twskc-d7dnc" → "…d7dnc"); the event list has it whole.
func shortInstance(name string) string {
	if len(name) <= 14 {
		return name
	}
	if i := strings.LastIndexByte(name, '-'); i >= 0 && len(name)-i > 2 {
		return "…" + name[i+1:]
	}
	return "…" + name[len(name)-8:]
}

// bucketClock names a bucket by its start: to the second when buckets
// are shorter than a minute, so a table's rows read alike.
func bucketClock(t time.Time, widthSeconds float64) string {
	if widthSeconds < 60 {
		return views.HumanClockSeconds(t)
	}
	return views.HumanClock(t)
}

// maxEventLines bounds the event list under the charts.
const maxEventLines = 30

func eventLines(series []diagnose.Bucket) []string {
	var out []string
	for _, b := range series {
		for _, e := range b.Events {
			var line string
			switch e.Kind {
			case telemetry.EventScale:
				line = fmt.Sprintf("%s — scaled %s → %s replicas", views.HumanClockSeconds(e.Time), replicasText(e.FromReplicas), replicasText(e.ToReplicas))
			case telemetry.EventInstanceStarted:
				line = fmt.Sprintf("%s — instance %s started", views.HumanClockSeconds(e.Time), textOr(e.Instance, "(unnamed)"))
			default:
				line = fmt.Sprintf("%s — %s event", views.HumanClockSeconds(e.Time), e.Kind)
				if e.Instance != "" {
					line += " on " + e.Instance
				}
			}
			if e.Reason != "" {
				line += " (" + e.Reason + ")"
			}
			out = append(out, line)
		}
	}
	if n := len(out); n > maxEventLines {
		out = append(out[:maxEventLines-1], fmt.Sprintf("… and %d more", n-maxEventLines+1))
	}
	return out
}
