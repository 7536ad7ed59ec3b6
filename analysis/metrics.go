package analysis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/telemetry"
)

// metrics loads the inference gauges of the given services as one point per
// (bucket of width, service, instance, gauge) for each range, in one
// statement: the bucket's peak, stamped with its last sample's time so it
// lands in the same bucket in Go. Peaks are what the charts and
// corroboration read (a full KV cache on one instance holds that
// instance's requests), and a 7-day window then moves thousands of points
// instead of millions. out[i] holds ranges[i]'s points; a bucket two ranges
// share (a window and the baseline right before it) belongs to the first.
func (q *Queries) metrics(ctx context.Context, project uint32, services []string, width time.Duration, ranges ...diagnose.Range) ([][]telemetry.MetricPoint, error) {
	out := make([][]telemetry.MetricPoint, len(ranges))
	if len(services) == 0 || len(ranges) == 0 {
		return out, nil
	}
	sql, args := metricsSQL(project, services, width, ranges...)
	r, err := q.CH.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("load metrics: %w", err)
	}
	for i := range r.Len() {
		row := r.Row(i)
		side := row.Int("side")
		out[side] = append(out[side], telemetry.MetricPoint{ProjectID: project, Time: row.Time("at"), Service: row.String("service"),
			Instance: row.String("instance"), Name: row.String("name"), Value: row.Float("peak")})
	}
	return out, nil
}

// peakStep is the bucket of metric_peaks_5m (migration 0008).
const peakStep = 5 * time.Minute

// metricsSQL is the statement metrics runs. A width that is a multiple of
// 5 minutes reads only the 5-minute peaks, each range widened to whole 5
// minutes: each 5-minute bucket lies in one chart bucket, so a chart
// bucket's peak is the peak of all its samples, the first bucket's
// included (it starts before the window anyway; reading raw points for the
// ragged edges instead cost ~10 ms of engine time per range). Narrower
// buckets read raw points. Rows carry side, the index of the first range
// holding them.
func metricsSQL(project uint32, services []string, width time.Duration, ranges ...diagnose.Range) (string, []any) {
	gauges := []string{diagnose.MetricKVCacheUsage, diagnose.MetricRequestsWaiting, diagnose.MetricRequestsRunning}
	seconds := max(int64(width/time.Second), 1)
	inner := "SELECT time AS t, service, instance, name, value AS v, %s AS side FROM metric_points WHERE project_id = ? AND name IN ? AND service IN ? AND isFinite(value) AND (%s)"
	at := "time"
	if width%peakStep == 0 {
		inner = "SELECT CAST(last_time AS DateTime64(9, 'UTC')) AS t, service, instance, name, CAST(peak AS Float64) AS v, %s AS side FROM metric_peaks_5m WHERE project_id = ? AND name IN ? AND service IN ? AND (%s)"
		at = "bucket"
		ranges = slices.Clone(ranges)
		for i, r := range ranges {
			ranges[i] = diagnose.Range{From: r.From.Truncate(peakStep), To: ceilTime(r.To, peakStep)}
		}
	}
	var side, where []string
	var sideArgs, whereArgs []any
	for i, r := range ranges {
		cond := at + " >= ? AND " + at + " < ?"
		where, whereArgs = append(where, cond), append(whereArgs, r.From, r.To)
		if i < len(ranges)-1 {
			side, sideArgs = append(side, cond, strconv.Itoa(i)), append(sideArgs, r.From, r.To)
		}
	}
	sideSQL := strconv.Itoa(len(ranges) - 1)
	if len(side) > 0 {
		sideSQL = "multiIf(" + strings.Join(side, ", ") + ", " + sideSQL + ")"
	}
	args := append(append(sideArgs, project, gauges, services), whereArgs...)
	return "SELECT max(t) AS at, service, instance, name, max(v) AS peak, side FROM (" + fmt.Sprintf(inner, sideSQL, strings.Join(where, " OR ")) +
		") GROUP BY toStartOfInterval(t, toIntervalSecond(?)) AS bucket, side, service, instance, name ORDER BY at", append(args, seconds)
}
