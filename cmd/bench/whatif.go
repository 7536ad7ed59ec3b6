package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
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

// statement is a bound statement a side of a what-if runs.
type statement struct {
	sql  string
	args []any
}

// whatIfs measures the proposals on the 7-day window of the loaded data.
// A side named after a page op runs the statement the op really ran
// longest (clickhouse.Recorder); the others are written out here.
func whatIfs(ctx context.Context, q *analysis.Queries, ch *clickhouse.Store, d *dataset, reps int) []*whatIf {
	window, _ := d.ranges(7 * 24 * time.Hour)
	where, args := "project_id = ? AND start >= ? AND start < ?", []any{d.project, window.From, window.To}
	const finalSettings = analysis.FinalSettings
	var load statement
	rec := &clickhouse.Recorder{}
	if err := runOp(clickhouse.WithRecorder(ctx, rec), q, d, "diagnose", 7*24*time.Hour); err == nil {
		if sts := rec.Statements(); len(sts) > 0 {
			load.sql = slices.MaxFunc(sts, func(a, b clickhouse.Recorded) int { return cmp.Compare(a.Took, b.Took) }).SQL
		}
	}
	cases := []struct {
		name, current, proposed string
		before, after           statement
	}{
		{"list page, 7 d: FINAL → no FINAL on the count", "count() FINAL", "count() (rows replaced later are rare; exact count not needed for paging)",
			statement{"SELECT count() AS n FROM llm_requests FINAL WHERE " + where + finalSettings, args},
			statement{"SELECT count() AS n FROM llm_requests WHERE " + where, args}},
		{"list page, 7 d: top 50 by TTFT", "FINAL over the window", "top 200 keys without FINAL, then FINAL on those traces only",
			statement{"SELECT " + clickhouse.RequestColumns + " FROM llm_requests FINAL WHERE " + where + " ORDER BY ttft_ms DESC NULLS LAST, start DESC LIMIT 50" + finalSettings, args},
			statement{"SELECT " + clickhouse.RequestColumns + " FROM llm_requests FINAL WHERE " + where +
				" AND trace_id IN (SELECT trace_id FROM llm_requests WHERE " + where + " ORDER BY ttft_ms DESC NULLS LAST LIMIT 200) ORDER BY ttft_ms DESC NULLS LAST, start DESC LIMIT 50" + finalSettings,
				append(append([]any{}, args...), args...)}},
		{"diagnose load, 7 d", fmt.Sprintf("the diagnosis's longest statement (a ~%d-row sample, decoded in Go)", cmp.Or(q.MaxRows, analysis.DefaultMaxRows)), "percentiles per component computed in SQL",
			load,
			statement{"SELECT quantiles(0.5, 0.9, 0.95, 0.99)(ttft_ms) AS ttft, quantiles(0.5, 0.95, 0.99)(queue_ms) AS queue, " +
				"quantiles(0.5, 0.95, 0.99)(prefill_ms) AS prefill, quantiles(0.5, 0.95, 0.99)(network_ms) AS network, " +
				"quantiles(0.5, 0.95, 0.99)(decode_ms) AS decode, quantiles(0.5, 0.95, 0.99)(pre_inference_ms) AS pre, count() AS n " +
				"FROM llm_requests FINAL WHERE " + where + finalSettings, args}},
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
