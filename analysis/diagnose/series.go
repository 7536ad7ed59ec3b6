package diagnose

import (
	"math"
	"slices"
	"time"

	"github.com/tokenpath/tokenpath/analysis/stats"
	"github.com/tokenpath/tokenpath/telemetry"
)

// bucketWidths are the widths a series may snap to: round enough that the
// chart's axis and the evidence ("per 30 s bucket") read naturally.
var bucketWidths = []time.Duration{
	10 * time.Second, 30 * time.Second, time.Minute,
	5 * time.Minute, 15 * time.Minute, time.Hour,
}

// targetBuckets is roughly how many points a chart and a per-bucket
// correlation want: enough pairs, few enough empty buckets.
const targetBuckets = 60

// Buckets returns the bucket width for a window: the snapped width whose
// bucket count is closest to ~60 on a log scale (a 1 h window gets 1 min
// buckets, 10 min gets 10 s, 6 h gets 5 min). Very short windows get 10 s,
// very long ones 1 h.
func Buckets(window Range) time.Duration {
	d := window.Duration()
	if d <= 0 {
		return bucketWidths[0]
	}
	best, bestDist := bucketWidths[0], math.Inf(1)
	for _, w := range bucketWidths {
		n := float64(d) / float64(w)
		dist := math.Abs(math.Log(n / targetBuckets))
		if dist < bestDist {
			best, bestDist = w, dist
		}
	}
	return best
}

// Bucket is one time slice of the window: what the TTFT chart, the metric
// overlays and the per-bucket correlations read.
type Bucket struct {
	Start      time.Time   `json:"start"`
	Requests   int         `json:"requests"`
	RatePerSec float64     `json:"rate_per_s"`
	TTFT       Percentiles `json:"ttft"`
	ITL        Percentiles `json:"itl"`
	// P95 holds the p95 of every component that had a value in the bucket.
	P95          map[string]float64 `json:"p95"`
	InputTokens  int64              `json:"input_tokens"`
	OutputTokens int64              `json:"output_tokens"`
	ColdStarts   int                `json:"cold_starts"`
	Errors       int                `json:"errors"`
	// Gauges are the max over the bucket's samples and instances: a full KV
	// cache on one instance is what holds that instance's requests.
	KVCacheUsage    *float64 `json:"kv_cache_usage"`
	RequestsWaiting *float64 `json:"requests_waiting"`
	RequestsRunning *float64 `json:"requests_running"`
	// Replicas is the replica count at the end of the bucket, carried from
	// the last scale event; nil before any scale event is known.
	Replicas *int32      `json:"replicas"`
	Events   []EventMark `json:"events,omitempty"`
}

// EventMark is an event drawn on the chart.
type EventMark struct {
	Time         time.Time `json:"time"`
	Kind         string    `json:"kind"`
	Instance     string    `json:"instance,omitempty"`
	FromReplicas *int32    `json:"from_replicas,omitempty"`
	ToReplicas   *int32    `json:"to_replicas,omitempty"`
	Reason       string    `json:"reason,omitempty"`
}

// Series cuts the window into Buckets(in.Window) wide buckets (aligned to
// the width, so the first may start a little before the window) and reads
// requests, metrics and events into them.
func Series(in Input) []Bucket {
	return series(in.Window, Buckets(in.Window), newColumns(in.Requests), sampleScale(in.WindowTotal, len(in.Requests)), in.RequestBuckets, in.Metrics, in.Events)
}

// series is Series for any range and width, over requests' columns; scale
// is how many requests each row stands for (counts, rates and token sums
// are scaled by it, percentiles are not). Buckets found in pre (the
// store's, see Input.RequestBuckets) are taken as they are; with pre set,
// the rows are not read at all.
func series(r Range, width time.Duration, cols *columns, scale float64, pre []Bucket, metrics []telemetry.MetricPoint, events []telemetry.Event) []Bucket {
	if width <= 0 || !r.To.After(r.From) {
		return nil
	}
	first := r.From.Truncate(width)
	n := int((r.To.Sub(first) + width - 1) / width)
	index := func(t time.Time) int {
		if !r.Contains(t) {
			return -1
		}
		return int(t.Sub(first) / width)
	}

	buckets := make([]Bucket, n)
	for i := range buckets {
		buckets[i].Start = first.Add(time.Duration(i) * width)
	}
	if pre != nil {
		fromStore(buckets, pre)
	} else {
		fromRows(buckets, index, width, cols, scale)
	}

	for _, m := range metrics {
		b := index(m.Time)
		if b < 0 || math.IsNaN(m.Value) {
			continue
		}
		var slot **float64
		switch m.Name {
		case MetricKVCacheUsage:
			slot = &buckets[b].KVCacheUsage
		case MetricRequestsWaiting:
			slot = &buckets[b].RequestsWaiting
		case MetricRequestsRunning:
			slot = &buckets[b].RequestsRunning
		default:
			continue
		}
		if *slot == nil || m.Value > **slot {
			v := m.Value
			*slot = &v
		}
	}

	sorted := slices.Clone(events)
	slices.SortStableFunc(sorted, func(a, b telemetry.Event) int { return a.Time.Compare(b.Time) })
	for _, e := range sorted {
		if b := index(e.Time); b >= 0 {
			buckets[b].Events = append(buckets[b].Events, EventMark{
				Time: e.Time, Kind: e.Kind, Instance: e.Instance,
				FromReplicas: e.FromReplicas, ToReplicas: e.ToReplicas, Reason: e.Reason,
			})
		}
	}
	fillReplicas(buckets, width, sorted)
	return buckets
}

// fromRows computes the request figures of the buckets from the rows;
// index maps a start to its bucket (-1 outside the range).
func fromRows(buckets []Bucket, index func(time.Time) int, width time.Duration, cols *columns, scale float64) {
	reqs := cols.reqs
	perBucket := make([][]int, len(buckets))
	for i := range reqs {
		if b := index(reqs[i].Start); b >= 0 {
			perBucket[b] = append(perBucket[b], i)
		}
	}
	comps := map[string][]float64{}
	for _, name := range Components {
		comps[name] = cols.column(name)
	}
	for b, idx := range perBucket {
		bk := &buckets[b]
		bk.Requests = int(math.Round(float64(len(idx)) * scale))
		bk.RatePerSec = float64(len(idx)) * scale / width.Seconds()
		bk.TTFT = percentiles(stats.Summarize(pick(comps[ComponentTTFT], idx)))
		bk.ITL = percentiles(stats.Summarize(pick(comps[ComponentITL], idx)))
		bk.P95 = map[string]float64{}
		for _, name := range Components {
			if q := stats.Quantile(pick(comps[name], idx), 0.95); !math.IsNaN(q) {
				bk.P95[name] = q
			}
		}
		var in, out int64
		var cold, errs int
		for _, i := range idx {
			r := &reqs[i]
			if r.InputTokens != nil {
				in += *r.InputTokens
			}
			if r.OutputTokens != nil {
				out += *r.OutputTokens
			}
			if r.ColdStart {
				cold++
			}
			if r.Error {
				errs++
			}
		}
		bk.InputTokens, bk.OutputTokens = int64(math.Round(float64(in)*scale)), int64(math.Round(float64(out)*scale))
		bk.ColdStarts, bk.Errors = int(math.Round(float64(cold)*scale)), int(math.Round(float64(errs)*scale))
	}
}

// fromStore copies the request figures of the store's buckets into the
// buckets of the same start; a bucket with no request keeps its zeros.
func fromStore(buckets, pre []Bucket) {
	at := make(map[int64]*Bucket, len(pre))
	for i := range pre {
		at[pre[i].Start.UnixNano()] = &pre[i]
	}
	for i := range buckets {
		p := at[buckets[i].Start.UnixNano()]
		if p == nil {
			buckets[i].P95 = map[string]float64{}
			continue
		}
		b := &buckets[i]
		b.Requests, b.RatePerSec, b.TTFT, b.ITL, b.P95 = p.Requests, p.RatePerSec, p.TTFT, p.ITL, p.P95
		b.InputTokens, b.OutputTokens, b.ColdStarts, b.Errors = p.InputTokens, p.OutputTokens, p.ColdStarts, p.Errors
	}
}

// fillReplicas carries the replica count of scale events through the
// buckets. Before the first event in range the count is the last one seen
// earlier, else the first event's "from".
func fillReplicas(buckets []Bucket, width time.Duration, sorted []telemetry.Event) {
	var scale []telemetry.Event
	for _, e := range sorted {
		if e.Kind == telemetry.EventScale && e.ToReplicas != nil {
			scale = append(scale, e)
		}
	}
	if len(scale) == 0 || len(buckets) == 0 {
		return
	}
	var cur *int32
	next := 0
	for next < len(scale) && scale[next].Time.Before(buckets[0].Start) {
		cur = scale[next].ToReplicas
		next++
	}
	if cur == nil && next < len(scale) {
		cur = scale[next].FromReplicas
	}
	for i := range buckets {
		end := buckets[i].Start.Add(width)
		for next < len(scale) && scale[next].Time.Before(end) {
			cur = scale[next].ToReplicas
			next++
		}
		if cur != nil {
			v := *cur
			buckets[i].Replicas = &v
		}
	}
}

// column reads one figure per bucket as a float series (NaN = no data) for
// correlation.
func column(buckets []Bucket, f func(*Bucket) *float64) []float64 {
	out := make([]float64, len(buckets))
	for i := range buckets {
		out[i] = val(f(&buckets[i]))
	}
	return out
}
