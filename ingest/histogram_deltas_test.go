package ingest

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

func cumulative(start, at time.Time, counts ...uint64) telemetry.HistogramPoint {
	var n uint64
	for _, c := range counts {
		n += c
	}
	return telemetry.HistogramPoint{ProjectID: 1, Service: "vllm", Instance: "10.0.0.7:8000", Name: "queue_seconds",
		Labels: map[string]string{"model_name": "llama"}, Start: start, Time: at,
		Bounds: []float64{0.5, 1, 5}, Counts: counts, Count: n, Sum: float64(n), Cumulative: true}
}

// Cumulative exports become the intervals between them: a fresh series
// keeps its first interval, an old one only seeds, a fall in the counts or
// a later start is a restart, a repeated export adds nothing, and the state
// moves only on commit.
func TestHistogramDeltas(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var d HistogramDeltas
	run := func(pts ...telemetry.HistogramPoint) []telemetry.HistogramPoint {
		out, commit := d.Convert(pts)
		commit()
		return out
	}
	// A server started 30 s before its first export: that interval counts.
	out := run(cumulative(at(-30), at(0), 1, 2, 0, 0))
	if len(out) != 1 || !slices.Equal(out[0].Counts, []uint64{1, 2, 0, 0}) || !out[0].Start.Equal(at(-30)) || out[0].Cumulative {
		t.Fatalf("fresh series: %+v", out)
	}
	out = run(cumulative(at(-30), at(15), 1, 5, 4, 1))
	if len(out) != 1 || !slices.Equal(out[0].Counts, []uint64{0, 3, 4, 1}) || out[0].Count != 8 || !out[0].Start.Equal(at(0)) || !out[0].Time.Equal(at(15)) || out[0].Sum != 8 {
		t.Fatalf("second interval: %+v", out)
	}
	// The same export again (a retry) and an interval without observations.
	if out := run(cumulative(at(-30), at(15), 1, 5, 4, 1), cumulative(at(-30), at(30), 1, 5, 4, 1)); len(out) != 0 {
		t.Fatalf("retry and idle interval gave %+v", out)
	}
	// A restart without start times: the counts fell.
	p := cumulative(time.Time{}, at(45), 0, 2, 0, 0)
	if out := run(p); len(out) != 1 || !slices.Equal(out[0].Counts, []uint64{0, 2, 0, 0}) || !out[0].Start.Equal(at(30)) {
		t.Fatalf("reset: %+v", out)
	}
	// A restart the start time reveals although the count grew.
	if out := run(cumulative(at(50), at(60), 9, 9, 9, 9)); len(out) != 1 || out[0].Count != 36 || !out[0].Start.Equal(at(50)) {
		t.Fatalf("restart by start time: %+v", out)
	}
	// A series that ran for days before Tokenpath saw it only seeds.
	old := cumulative(at(-86400), at(0), 100, 0, 0, 0)
	old.Instance = "10.0.0.8:8000"
	if out := run(old); len(out) != 0 {
		t.Fatalf("old series' first point gave %+v", out)
	}
	// Without commit (a failed insert) the same points convert the same way.
	next := old
	next.Time, next.Counts, next.Count = at(15), []uint64{101, 0, 0, 0}, 101
	a, _ := d.Convert([]telemetry.HistogramPoint{next})
	b, commit := d.Convert([]telemetry.HistogramPoint{next})
	commit()
	if len(a) != 1 || len(b) != 1 || a[0].Count != 1 || b[0].Count != 1 {
		t.Fatalf("uncommitted conversion not repeatable: %+v then %+v", a, b)
	}
	// Delta temporality passes through.
	delta := cumulative(at(0), at(15), 0, 1, 0, 0)
	delta.Cumulative = false
	if out := run(delta); len(out) != 1 || out[0].Count != 1 {
		t.Fatalf("delta point: %+v", out)
	}
}

// Exponential histograms grow their range and lower their scale between
// exports; the interval is still exact where the earlier buckets allow.
func TestHistogramDeltasChangingBounds(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	prev := telemetry.HistogramPoint{Start: t0, Time: t0.Add(10 * time.Second), Name: "ttft_seconds", Cumulative: true,
		Bounds: []float64{0, 1, 2}, Counts: []uint64{0, 3, 1, 0}, Count: 4}
	// Range grew to 4 and 8: prev had nothing above 2.
	next := prev
	next.Time = t0.Add(20 * time.Second)
	next.Bounds, next.Counts, next.Count = []float64{0, 1, 2, 4, 8}, []uint64{0, 4, 1, 2, 1, 0}, 8
	got, ok := subtractBuckets(&next, &prev)
	if !ok || !slices.Equal(got, []uint64{0, 1, 0, 2, 1, 0}) {
		t.Fatalf("grown range: %v %v", got, ok)
	}
	// A coarser layout whose bound 1.5 cuts a populated bucket of prev.
	bad := next
	bad.Bounds, bad.Counts = []float64{0, 1.5, 8}, []uint64{0, 5, 3, 0}
	if _, ok := subtractBuckets(&bad, &prev); ok {
		t.Fatal("a bound inside a populated bucket must not subtract")
	}
}
