package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// whatIf times a page statement as it is and as a proposed fix would issue
// it, on the same data: the measured gain behind each proposal.
type whatIf struct {
	Name              string
	Current, Proposed string // what each side runs
	Before, After     []time.Duration
	Err               string
}

// whatIfs measures the proposals on the 7-day window of the loaded data.
func whatIfs(ctx context.Context, ch *clickhouse.Store, d *dataset, reps int) []*whatIf {
	window, _ := d.ranges(7 * 24 * time.Hour)
	where, args := requestWhere(d.project, window)
	bucket := int(diagnose.Buckets(window).Seconds())
	span := diagnose.Range{From: diagnose.DefaultBaseline(window).From, To: window.To}
	mst := metricsStatement(d.project, span)
	load := loadStatement(d.project, window)
	cases := []struct {
		name, current, proposed string
		before, after           statement
	}{
		{"list page, 7 d: FINAL → no FINAL on the count", "count() FINAL", "count() (rows replaced later are rare; exact count not needed for paging)",
			statement{"SELECT count() AS n FROM llm_requests FINAL WHERE " + where, args},
			statement{"SELECT count() AS n FROM llm_requests WHERE " + where, args}},
		{"list page, 7 d: top 50 by TTFT", "FINAL over the window", "top 200 keys without FINAL, then FINAL on those traces only",
			statement{"SELECT " + clickhouse.RequestColumns + " FROM llm_requests FINAL WHERE " + where + " ORDER BY ttft_ms DESC NULLS LAST, start DESC LIMIT 50", args},
			statement{"SELECT " + clickhouse.RequestColumns + " FROM llm_requests FINAL WHERE " + where +
				" AND trace_id IN (SELECT trace_id FROM llm_requests WHERE " + where + " ORDER BY ttft_ms DESC NULLS LAST LIMIT 200) ORDER BY ttft_ms DESC NULLS LAST, start DESC LIMIT 50",
				append(append([]any{}, args...), args...)}},
		{"diagnose load, 7 d (engine only)", "FINAL", "FINAL with do_not_merge_across_partitions_select_final = 1 (partitions are days; a trace's rows share one)",
			statement{load.sql + " FORMAT Null", load.args},
			statement{load.sql + " SETTINGS do_not_merge_across_partitions_select_final = 1 FORMAT Null", load.args}},
		{"diagnose load, 7 d (engine only)", fmt.Sprintf("ORDER BY cityHash64 LIMIT %d", analysis.DefaultMaxRows), "sample by hash without a sort: WHERE cityHash64(trace_id, span_id) % k = 0",
			statement{load.sql + " FORMAT Null", load.args},
			statement{"SELECT " + clickhouse.RequestColumns + " FROM llm_requests FINAL WHERE " + where +
				" AND cityHash64(trace_id, span_id) % greatest(1, intDiv((SELECT count() FROM llm_requests WHERE " + where + "), ?) + 1) = 0 FORMAT Null",
				append(append(append([]any{}, args...), args...), analysis.DefaultMaxRows)}},
		{"diagnose load, 7 d", fmt.Sprintf("up to %d rows as JSONCompact, decoded in Go", analysis.DefaultMaxRows), "percentiles per component computed in SQL",
			load,
			statement{"SELECT quantiles(0.5, 0.9, 0.95, 0.99)(ttft_ms) AS ttft, quantiles(0.5, 0.95, 0.99)(queue_ms) AS queue, " +
				"quantiles(0.5, 0.95, 0.99)(prefill_ms) AS prefill, quantiles(0.5, 0.95, 0.99)(network_ms) AS network, " +
				"quantiles(0.5, 0.95, 0.99)(decode_ms) AS decode, quantiles(0.5, 0.95, 0.99)(pre_inference_ms) AS pre, count() AS n " +
				"FROM llm_requests FINAL WHERE " + where, args}},
		{fmt.Sprintf("gauges for diagnose/series, 7 d + 21 d baseline (bucket %d s)", bucket), "every raw point, decoded in Go",
			"avg and max per bucket, service, instance and name in SQL",
			mst,
			statement{fmt.Sprintf(`SELECT toStartOfInterval(time, INTERVAL %d SECOND) AS t, service, instance, name, avg(value) AS avg, max(value) AS max
				FROM metric_points WHERE project_id = ? AND name IN ? AND service IN ? AND time >= ? AND time < ?
				GROUP BY t, service, instance, name ORDER BY t`, bucket), mst.args}},
	}
	var out []*whatIf
	for _, c := range cases {
		w := &whatIf{Name: c.name, Current: c.current, Proposed: c.proposed}
		out = append(out, w)
		for i := 0; i < reps; i++ {
			for _, side := range []struct {
				st  statement
				dst *[]time.Duration
			}{{c.before, &w.Before}, {c.after, &w.After}} {
				t0 := time.Now()
				if _, err := ch.Query(ctx, side.st.sql, side.st.args...); err != nil {
					w.Err = err.Error()
					break
				}
				*side.dst = append(*side.dst, time.Since(t0))
			}
		}
	}
	return out
}

func printWhatIfs(w io.Writer, rows int, ws []*whatIf) {
	if len(ws) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Proposed fixes, measured on the same %s rows (Store.Query, median)\n\n", count(float64(rows)))
	fmt.Fprintln(w, "| statement | now | proposed | now | proposed | gain |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	for _, x := range ws {
		gain := "–"
		if b, a := median(x.Before), median(x.After); b > 0 && a > 0 {
			gain = fmt.Sprintf("%.1f×", b.Seconds()/a.Seconds())
		}
		if x.Err != "" {
			gain = "error: " + strings.ReplaceAll(firstLine(x.Err), "|", "/")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", x.Name, x.Current, x.Proposed, ms(median(x.Before)), ms(median(x.After)), gain)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
