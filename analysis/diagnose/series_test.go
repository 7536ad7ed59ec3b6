package diagnose

import (
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

func TestBuckets(t *testing.T) {
	tests := []struct {
		window time.Duration
		want   time.Duration
	}{
		{0, 10 * time.Second},
		{time.Minute, 10 * time.Second},
		{10 * time.Minute, 10 * time.Second},
		{30 * time.Minute, 30 * time.Second},
		{time.Hour, time.Minute},
		{2 * time.Hour, time.Minute},         // 120 buckets beat 24
		{3 * time.Hour, 5 * time.Minute},     // 36 beats 180
		{6 * time.Hour, 5 * time.Minute},     // 72
		{15 * time.Hour, 15 * time.Minute},   // 60
		{24 * time.Hour, 15 * time.Minute},   // 96 beats 24
		{60 * time.Hour, time.Hour},          // 60
		{30 * 24 * time.Hour, time.Hour},     // widest snap
		{-5 * time.Minute, 10 * time.Second}, // inverted window
	}
	for _, tc := range tests {
		w := Range{From: t0, To: t0.Add(tc.window)}
		if got := Buckets(w); got != tc.want {
			t.Errorf("Buckets(%v) = %v, want %v", tc.window, got, tc.want)
		}
	}
}

func TestSeries(t *testing.T) {
	window := Range{From: t0, To: t0.Add(10 * time.Minute)} // 10 s buckets, 60 of them
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	req := func(s, ttft float64, in, out int64, cold bool) telemetry.LLMRequest {
		return telemetry.LLMRequest{Start: at(s), TTFT: telemetry.Ptr(ttft), Queue: telemetry.Ptr(ttft / 2),
			ITL: telemetry.Ptr(20.0), InputTokens: telemetry.Ptr(in), OutputTokens: telemetry.Ptr(out), ColdStart: cold}
	}
	metric := func(s float64, name, inst string, v float64) telemetry.MetricPoint {
		return telemetry.MetricPoint{Time: at(s), Name: name, Instance: inst, Value: v}
	}
	in := Input{
		Window: window,
		Requests: []telemetry.LLMRequest{
			req(1, 100, 500, 50, false), req(5, 300, 700, 70, true), req(9.9, 200, 100, 10, false),
			req(25, 1000, 1000, 100, false),
			req(-1, 5, 1, 1, false), req(600, 5, 1, 1, false), // outside the window
		},
		Metrics: []telemetry.MetricPoint{
			metric(2, MetricKVCacheUsage, "a", 0.4), metric(3, MetricKVCacheUsage, "b", 0.9), metric(8, MetricKVCacheUsage, "a", 0.5),
			metric(4, MetricRequestsWaiting, "a", 3), metric(21, MetricRequestsRunning, "a", 12),
			metric(22, "something_else", "a", 99),
		},
		Events: []telemetry.Event{
			{Time: at(-120), Kind: telemetry.EventScale, FromReplicas: telemetry.Ptr[int32](1), ToReplicas: telemetry.Ptr[int32](2)},
			{Time: at(35), Kind: telemetry.EventScale, FromReplicas: telemetry.Ptr[int32](2), ToReplicas: telemetry.Ptr[int32](3)},
			{Time: at(41), Kind: telemetry.EventInstanceStarted, Instance: "vllm-9"},
		},
	}
	s := Series(in)
	if len(s) != 60 {
		t.Fatalf("%d buckets, want 60", len(s))
	}
	for i, b := range s {
		if want := t0.Add(time.Duration(i) * 10 * time.Second); !b.Start.Equal(want) {
			t.Fatalf("bucket %d starts %v, want %v", i, b.Start, want)
		}
	}
	b0 := s[0]
	if b0.Requests != 3 || b0.RatePerSec != 0.3 || b0.InputTokens != 1300 || b0.OutputTokens != 130 || b0.ColdStarts != 1 {
		t.Errorf("bucket 0 = %+v", b0)
	}
	if *b0.TTFT.P50 != 200 || *b0.TTFT.P99 != 298 {
		t.Errorf("bucket 0 TTFT p50 %v p99 %v, want 200, 298", *b0.TTFT.P50, *b0.TTFT.P99)
	}
	if b0.P95[ComponentQueue] != 145 || b0.P95[ComponentITL] != 20 {
		t.Errorf("bucket 0 p95 = %v", b0.P95)
	}
	if _, ok := b0.P95[ComponentPrefill]; ok {
		t.Error("prefill p95 reported without prefill data")
	}
	if *b0.KVCacheUsage != 0.9 || *b0.RequestsWaiting != 3 || b0.RequestsRunning != nil {
		t.Errorf("bucket 0 gauges kv %v waiting %v running %v", val(b0.KVCacheUsage), val(b0.RequestsWaiting), b0.RequestsRunning)
	}
	if s[1].Requests != 0 || s[1].TTFT.P95 != nil || *s[2].RequestsRunning != 12 {
		t.Errorf("bucket 1/2 = %+v / %+v", s[1], s[2])
	}
	if s[2].Requests != 1 {
		t.Errorf("bucket 2 has %d requests", s[2].Requests)
	}
	// Replicas: 2 (carried from before the window) until the 2 → 3 event in
	// bucket 3.
	if *s[0].Replicas != 2 || *s[2].Replicas != 2 || *s[3].Replicas != 3 || *s[59].Replicas != 3 {
		t.Errorf("replicas %d %d %d %d", *s[0].Replicas, *s[2].Replicas, *s[3].Replicas, *s[59].Replicas)
	}
	if len(s[3].Events) != 1 || len(s[4].Events) != 1 || s[4].Events[0].Instance != "vllm-9" {
		t.Errorf("events %+v %+v", s[3].Events, s[4].Events)
	}
}

func TestSeriesAlignsBuckets(t *testing.T) {
	// A window starting at 14:00:07 with 10 s buckets: the first bucket is
	// 14:00:00, the last ends after the window.
	w := Range{From: t0.Add(7 * time.Second), To: t0.Add(10*time.Minute + 7*time.Second)}
	s := Series(Input{Window: w})
	if len(s) != 61 || !s[0].Start.Equal(t0) || !s[60].Start.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("%d buckets from %v to %v", len(s), s[0].Start, s[len(s)-1].Start)
	}
}

func TestSeriesReplicasFromFirstEvent(t *testing.T) {
	// With no earlier event, the first event's "from" is the count before it.
	in := Input{
		Window: Range{From: t0, To: t0.Add(10 * time.Minute)},
		Events: []telemetry.Event{{Time: t0.Add(2 * time.Minute), Kind: telemetry.EventScale,
			FromReplicas: telemetry.Ptr[int32](0), ToReplicas: telemetry.Ptr[int32](1)}},
	}
	s := Series(in)
	if *s[0].Replicas != 0 || *s[11].Replicas != 0 || *s[12].Replicas != 1 {
		t.Errorf("replicas %d %d %d", *s[0].Replicas, *s[11].Replicas, *s[12].Replicas)
	}
	if s2 := Series(Input{Window: in.Window}); s2[0].Replicas != nil {
		t.Error("replicas without scale events must be unknown")
	}
}

func TestSeriesOverHour(t *testing.T) {
	w := newWorld(9)
	w.window = Range{From: t0, To: t0.Add(time.Hour)}
	w.baseline = DefaultBaseline(w.window)
	w.rate = 0.5
	in := w.input()
	d := Diagnose(in)
	if d.BucketSeconds != 60 || len(d.Series) != 60 {
		t.Fatalf("bucket %v s × %d", d.BucketSeconds, len(d.Series))
	}
	total := 0
	for _, b := range d.Series {
		total += b.Requests
	}
	if total != len(in.Requests) {
		t.Errorf("series holds %d requests, window %d", total, len(in.Requests))
	}
	if c, ok := findCorrelation(d.Correlations, MetricKVCacheUsage, seriesTTFTP99); !ok || c.Per != "1 min bucket" {
		t.Errorf("correlation %+v", c)
	}
}
