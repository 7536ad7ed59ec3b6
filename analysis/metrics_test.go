package analysis_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// Gauges read through the 5-minute peaks are exactly the gauges read from
// raw points over the window widened to whole 5 minutes (narrower buckets
// read raw points over the window itself), for windows that start and end
// off the 5-minute grid, whatever the width; read with the baseline before
// it in the same statement, the 5 minutes they share go to the window and
// neither side loses or repeats a point.
func TestMetricsFromPeaksMatchRawPoints(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	end := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	r := rand.New(rand.NewPCG(7, 8))
	names := []string{diagnose.MetricKVCacheUsage, diagnose.MetricRequestsWaiting, diagnose.MetricRequestsRunning, "vllm:other_gauge"}
	var points []telemetry.MetricPoint
	for range 20_000 {
		v := r.Float64() * 100
		if r.IntN(200) == 0 {
			v = math.NaN() // never a peak
		}
		points = append(points, telemetry.MetricPoint{ProjectID: 1, Time: end.Add(-time.Duration(r.Int64N(int64(50 * time.Hour)))),
			Service: []string{"vllm", "sglang"}[r.IntN(2)], Instance: fmt.Sprintf("pod-%d", r.IntN(3)), Name: names[r.IntN(len(names))], Value: v})
	}
	// Half inserted twice, as a replayed write-ahead log would.
	if err := srv.CH.Insert(ctx, clickhouse.MetricsBatch(points)); err != nil {
		t.Fatal(err)
	}
	if err := srv.CH.Insert(ctx, clickhouse.MetricsBatch(points[:10_000])); err != nil {
		t.Fatal(err)
	}
	raw := func(w diagnose.Range, width time.Duration) []string {
		res, err := srv.CH.Query(ctx, `SELECT max(time) AS at, service, instance, name, max(value) AS peak FROM metric_points
			WHERE project_id = 1 AND name IN ? AND service IN ? AND time >= ? AND time < ? AND isFinite(value)
			GROUP BY toStartOfInterval(time, toIntervalSecond(?)) AS bucket, service, instance, name`,
			names[:3], []string{"sglang", "vllm"}, w.From, w.To, int64(width/time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return keys(clickhouseRows(res))
	}
	q := &analysis.Queries{CH: srv.CH}
	odd := 7*time.Minute + 13*time.Second + 5*time.Millisecond
	for _, w := range []diagnose.Range{
		{From: end.Add(-24*time.Hour - odd), To: end.Add(-odd)},
		{From: end.Add(-6*time.Hour - odd), To: end.Add(-2 * odd)},
		{From: end.Add(-12 * time.Hour), To: end},
		{From: end.Add(-time.Hour - odd), To: end.Add(-odd)},
		{From: end.Add(-3 * time.Minute), To: end.Add(-time.Minute)},
	} {
		width := diagnose.Buckets(w)
		base := diagnose.DefaultBaseline(w)
		wantWin, wantBase := raw(w, width), raw(base, width)
		if width%(5*time.Minute) == 0 {
			grid := func(t time.Time) time.Time { return t.Truncate(5 * time.Minute) }
			wantWin = raw(diagnose.Range{From: grid(w.From), To: grid(w.To.Add(5*time.Minute - 1))}, width)
			wantBase = raw(diagnose.Range{From: grid(base.From), To: grid(w.From)}, width)
		}
		alone, err := q.Metrics(ctx, 1, []string{"sglang", "vllm"}, width, w)
		if err != nil {
			t.Fatal(err)
		}
		both, err := q.Metrics(ctx, 1, []string{"sglang", "vllm"}, width, w, base)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name      string
			got, want []string
		}{{"alone", keys(alone[0]), wantWin}, {"window", keys(both[0]), wantWin}, {"baseline", keys(both[1]), wantBase}} {
			if !slices.Equal(c.got, c.want) || len(c.want) == 0 {
				t.Errorf("window %v + %v, %v buckets, %s: %d points, want %d (first difference: %s)", w.From, w.Duration(), width, c.name,
					len(c.got), len(c.want), firstDifference(c.got, c.want))
			}
		}
	}
}

func clickhouseRows(res *clickhouse.Result) []telemetry.MetricPoint {
	out := make([]telemetry.MetricPoint, res.Len())
	for i := range out {
		row := res.Row(i)
		out[i] = telemetry.MetricPoint{Time: row.Time("at"), Service: row.String("service"), Instance: row.String("instance"), Name: row.String("name"), Value: row.Float("peak")}
	}
	return out
}

func keys(ps []telemetry.MetricPoint) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s %s %s %s %v", p.Time.UTC().Format(time.RFC3339Nano), p.Service, p.Instance, p.Name, p.Value)
	}
	slices.Sort(out)
	return out
}

func firstDifference(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " vs " + b[i]
		}
	}
	return "one is a prefix of the other"
}
