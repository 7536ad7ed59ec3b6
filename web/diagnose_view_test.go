package web

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/share"
	"github.com/tokenpath/tokenpath/telemetry"
	"github.com/tokenpath/tokenpath/web/views"
)

// A sampled window says so next to its counts; a complete one does not.
func TestDiagnoseViewNamesTheSample(t *testing.T) {
	now := time.Now().UTC()
	w := diagnose.Range{From: now.Add(-time.Hour), To: now}
	data := func(total, analyzed int) *share.DiagnoseData {
		return &share.DiagnoseData{Params: share.DiagnoseParams{Window: w},
			Diagnosis: diagnose.Diagnosis{Window: w, Baseline: diagnose.DefaultBaseline(w), Requests: total, BaselineRequests: 3 * total,
				AnalyzedRequests: analyzed, Verdict: diagnose.VerdictHealthy}}
	}
	sampled := diagnoseView(data(1_234_567, 50_000), true).CountsText
	if !strings.Contains(sampled, "uniform sample of 50\u202f000") {
		t.Errorf("sampled counts text: %q", sampled)
	}
	if full := diagnoseView(data(900, 900), true).CountsText; strings.Contains(full, "sample") {
		t.Errorf("complete window mentions a sample: %q", full)
	}
}

// TestJoinSentences: a trace snapshot's notice has one space between its
// sentences, whichever of them are empty.
func TestJoinSentences(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"Snapshot taken.", "Expires in 1 day.", "", "Requests are behind."}, "Snapshot taken. Expires in 1 day. Requests are behind."},
		{[]string{"Snapshot taken.", "", " ", ""}, "Snapshot taken."},
		{[]string{"", "A. "}, "A."},
	} {
		if got := joinSentences(c.in...); got != c.want {
			t.Errorf("joinSentences(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A part only one side of the comparison has gets its own verdict, not
// the comparison over every request: a few requests held for a cold
// start leave the p95 of all at 0 ("same"), which must not read "no
// change" beside the held requests' 26 s p95; held on both sides, the
// cold-start wait is judged on the held requests' p95s it shows.
func TestComponentRowsPartOnOneSide(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	d := diagnose.Diagnosis{
		Components: map[string]diagnose.ComponentStats{
			diagnose.ComponentColdStartWait: {P50: f(19_200), P95: f(26_200), P99: f(26_900), Count: 27},
			diagnose.ComponentQueue:         {P95: f(40), BaselineP95: f(35), Count: 900, BaselineCount: 2700},
			diagnose.ComponentNetwork:       {BaselineP95: f(30), BaselineCount: 300},
			diagnose.ComponentPrefill:       {P95: f(200), BaselineP95: f(100), Count: 900, BaselineCount: 2700},
		},
		Answers: diagnose.Answers{Compare: &diagnose.Comparison{Changes: []diagnose.Change{
			{Name: diagnose.ComponentColdStartWait, Direction: "same"},
			{Name: diagnose.ComponentQueue, Direction: "same"},
			{Name: diagnose.ComponentNetwork, Direction: "same"},
			{Name: diagnose.ComponentPrefill, Direction: "same"},
		}}},
	}
	got := map[string][2]string{}
	for _, r := range componentRows(d) {
		got[r.Name] = [2]string{r.Direction, r.DirectionWords}
	}
	// Held on both sides: 26 s → 38 s is worse, though the p95 of every
	// request stayed 0.
	both := d
	both.Components = map[string]diagnose.ComponentStats{
		diagnose.ComponentColdStartWait: {P95: f(38_000), BaselineP95: f(26_000), Count: 45, BaselineCount: 12},
	}
	for _, r := range componentRows(both) {
		if r.Name == "Cold-start wait" && (r.Direction != "worse" || r.DirectionWords != "worse") {
			t.Errorf("cold-start wait held 26 s → 38 s: verdict %q %q, want worse", r.Direction, r.DirectionWords)
		}
	}
	for name, want := range map[string][2]string{
		"Cold-start wait": {"worse", "new in this window"},
		"Queue":           {"same", "no change"},
		"Network":         {"better", "gone in this window"},
		"Prefill":         {"same", "no change"}, // the comparison's verdict stands for other parts
	} {
		if got[name] != want {
			t.Errorf("%s: verdict %q, want %q", name, got[name], want)
		}
	}
}

// A baseline whose requests start late in it says where they start: the
// demo's first hour diagnosed against a 3 h baseline with 2 min of data.
func TestDiagnoseViewSaysWhereBaselineDataStarts(t *testing.T) {
	w := diagnose.Range{From: time.Date(2026, 12, 5, 10, 26, 0, 0, time.UTC), To: time.Date(2026, 12, 5, 11, 26, 0, 0, time.UTC)}
	from := time.Date(2026, 12, 5, 10, 24, 12, 0, time.UTC)
	data := &share.DiagnoseData{Params: share.DiagnoseParams{Window: w},
		Diagnosis: diagnose.Diagnosis{Window: w, Baseline: diagnose.DefaultBaseline(w), Requests: 7707, BaselineRequests: 240,
			BaselineDataFrom: &from, Verdict: diagnose.VerdictQueueing}}
	if got, want := diagnoseView(data, true).BaselineText, "(the 3 h before; its requests start at 10:24:12)"; !strings.HasSuffix(got, want) {
		t.Errorf("baseline text %q, want it to end %q", got, want)
	}
	onTheMinute := time.Date(2026, 12, 5, 10, 24, 0, 0, time.UTC)
	data.Diagnosis.BaselineDataFrom = &onTheMinute
	if got, want := diagnoseView(data, true).BaselineText, "its requests start at 10:24:00)"; !strings.HasSuffix(got, want) {
		t.Errorf("baseline text %q, want it to end %q, to the second as compare says it", got, want)
	}
	data.Diagnosis.BaselineDataFrom = nil
	if got := diagnoseView(data, true).BaselineText; strings.Contains(got, "start") {
		t.Errorf("a full baseline's text says where requests start: %q", got)
	}
}

// The event list under the charts gives every line its seconds, so an
// event on the minute does not read "10:32" among "10:31:27" lines; a
// bucket table does the same when its buckets are under a minute.
func TestEventAndBucketTimesLineUp(t *testing.T) {
	at := func(m, s int) time.Time { return time.Date(2026, 12, 5, 10, m, s, 0, time.UTC) }
	three, one := int32(3), int32(1)
	lines := eventLines([]diagnose.Bucket{{Start: at(31, 0), Events: []diagnose.EventMark{
		{Time: at(31, 27), Kind: telemetry.EventScale, FromReplicas: &three, ToReplicas: &one},
		{Time: at(32, 0), Kind: telemetry.EventInstanceStarted, Instance: "vllm-0"},
	}}})
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "10:31:27 — scaled 3 → 1") || !strings.HasPrefix(lines[1], "10:32:00 — instance vllm-0") {
		t.Errorf("event lines %q", lines)
	}
	if got := bucketClock(at(32, 0), 30); got != "10:32:00" {
		t.Errorf("a 30 s bucket at 10:32 reads %q", got)
	}
	if got := bucketClock(at(32, 0), 60); got != "10:32" {
		t.Errorf("a 1 min bucket at 10:32 reads %q", got)
	}
}

// The compare page's counts say where a side's requests start when they
// start well inside its window.
func TestCompareViewSaysWhereDataStarts(t *testing.T) {
	from := time.Date(2026, 12, 5, 10, 24, 12, 0, time.UTC)
	data := &share.CompareData{Comparison: diagnose.Comparison{BeforeRequests: 765, AfterRequests: 7667, BeforeDataFrom: &from}}
	v := compareView(data, true)
	if v.BeforeCount != "before: 765 requests from 10:24:12" || v.AfterCount != "after: 7\u202f667 requests" {
		t.Errorf("counts %q and %q", v.BeforeCount, v.AfterCount)
	}
}

// A metrics-only diagnosis says on the page that its parts are the
// server's histograms, over the window, and shows the width of the bucket
// each p95 lies in; the part the calls measured themselves carries no
// such mark.
func TestComponentTableSaysServerMetrics(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	d := diagnose.Diagnosis{
		Components: map[string]diagnose.ComponentStats{
			diagnose.ComponentQueue: {P95: f(3100), BaselineP95: f(240), Count: 200, BaselineCount: 600},
			diagnose.ComponentTTFT:  {P95: f(3400), BaselineP95: f(300), Count: 200, BaselineCount: 600},
		},
		ServerMetrics: &diagnose.ServerMetricsFigures{Servers: []string{"vllm-llama"}, Endpoints: []string{"10.0.0.5:8000"},
			Components: map[string]diagnose.ServerComponent{
				diagnose.ComponentQueue: {Histogram: diagnose.HistQueue, P95: f(3100), BaselineP95: f(240), ResolutionMs: f(2500), Count: 200},
				diagnose.ComponentTTFT:  {Histogram: diagnose.HistTTFT, P95: f(3350), BaselineP95: f(290), ResolutionMs: f(2500), Count: 200},
			}},
	}
	rows := map[string]string{}
	for _, r := range componentRows(d) {
		rows[r.Name] = r.Hint + "|" + r.Resolution
	}
	bucket := "within a " + views.HumanMs(2500) + " bucket"
	if rows["Queue"] != "server histogram|"+bucket || strings.Contains(rows["TTFT"], "server histogram") {
		t.Errorf("rows %v; want the queue marked with its bucket, TTFT (the calls' own) not", rows)
	}
	var b strings.Builder
	v := views.DiagnoseView{Components: componentRows(d), ServerMetricsNote: serverMetricsNote(d)}
	if err := views.DiagnoseResults(v).Render(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No server spans", "vllm-llama", "tied to the calls to 10.0.0.5:8000", bucket, "interpolated within"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table does not say %q:\n%s", want, b.String())
		}
	}
	if serverMetricsNote(diagnose.Diagnosis{}) != "" {
		t.Error("a diagnosis with server spans got the metrics note")
	}
}
