package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

func ms(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", d.Seconds()*1000)
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", d.Seconds()*1000)
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func count(f float64) string {
	switch {
	case f >= 1e6:
		return fmt.Sprintf("%.2fM", f/1e6)
	case f >= 1e4:
		return fmt.Sprintf("%.0fk", f/1e3)
	}
	return fmt.Sprintf("%.0f", f)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// printIngest writes the ingest report as markdown.
func printIngest(w io.Writer, r *ingestReport) {
	o := r.Options
	mode := "server as a separate process"
	if o.InProcess {
		mode = "server in the bench process (profiling mode: RSS and CPU include the client)"
	}
	fmt.Fprintf(w, "\n### Ingest: OTLP traces, %d spans/export, %d spans/request, ~42 attributes/span, %d exporters (%s)\n\n",
		o.Batch/4*4, r.SpansPerReq, o.Concurrency, mode)
	fmt.Fprintln(w, "| transport | sustained spans/s (acked ÷ phase + drain) | acked spans/s (phase only) | p50 export | p99 export | at spans/s | 429s (max / half load) | server CPU, cores (max / half) | other jobs on the machine, cores | server RSS peak / now | ÷ raw engine insert |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, res := range r.Results {
		ratio := "–"
		if e := r.Engine.InsertRate(); e > 0 {
			ratio = fmt.Sprintf("%.2f", res.Max.Sustained/e)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d / %d | %.2f / %.2f | %.1f / %.1f | %s / %s | %s |\n",
			res.Transport, count(res.Max.Sustained), count(res.Max.AckedRate), ms(res.Half.percentile(0.5)), ms(res.Half.percentile(0.99)),
			count(res.Half.AckedRate), res.Max.Overloaded, res.Half.Overloaded, res.Max.ServerCores, res.Half.ServerCores,
			res.Max.OtherCores, res.Half.OtherCores, mib(max(res.Max.Mem.Peak, res.Half.Mem.Peak)), mib(res.Half.Mem.RSS), ratio)
	}
	e := r.Engine
	fmt.Fprintf(w, "\nRaw engine: the server's write path (`EncodeSpans` per export, `Store.Insert(SpanBlocksBatch(…))` per batch) over the same normalized spans, %d rows in batches of %d (the server's average insert was %.0f rows): **%s rows/s** (EncodeSpans %s/span, staging file + engine %s/span).\n",
		e.Rows, e.Batch, r.AvgWriteRow, count(e.InsertRate()), perSpan(e.Build, e.Rows), perSpan(e.Insert-e.Build, e.Rows))
	fmt.Fprintf(w, "Engine CPU: %s/span (process CPU during Insert; %.0f rows per CPU-second, so ~%s rows/s if it had both cores to itself).\n",
		perSpan(e.InsertCPU, e.Rows), float64(e.Rows)/max(e.InsertCPU.Seconds(), 1e-9), count(2*float64(e.Rows)/max(e.InsertCPU.Seconds(), 1e-9)))
	fmt.Fprintf(w, "Receiver Go work per span (wall on the shared machine / CPU of the thread): generated proto decode %s / %s + normalize %s / %s, or the wire reader (decode and normalize, what the receivers run) %s / %s; EncodeSpans %s / %s.\n",
		perSpan(e.Decode, e.Rows), perSpan(e.DecodeCPU, e.Rows), perSpan(e.Normalize, e.Rows), perSpan(e.NormalizeCPU, e.Rows),
		perSpan(e.Wire, e.Rows), perSpan(e.WireCPU, e.Rows), perSpan(e.Build, e.Rows), perSpan(e.BuildCPU, e.Rows))
	for _, res := range r.Results {
		if c := res.Max.ServerCPUPerSpan; c > 0 {
			fmt.Fprintf(w, "- %s: the server spent %s of CPU per acknowledged span end to end (phase + drain): ~%s spans/s on 2 dedicated cores.\n",
				res.Transport, c, count(2/c.Seconds()))
		}
	}
	for _, res := range r.Results {
		fmt.Fprintf(w, "- %s assembler: watermark at most %s behind the clock over the max phase and its drain, %s (%s of server CPU per span until then); half load: %s behind at most, %s.\n",
			res.Transport, ms(res.Max.AssemblerMaxLag), res.Max.catchUp(), res.Max.AssembledCPUPerSpan, ms(res.Half.AssemblerMaxLag), res.Half.catchUp())
	}
	for _, res := range r.Results {
		fmt.Fprintf(w, "- %s max phase: %s, steady second half %s spans/s acked vs %s written; backlog %s rows at the end, drained in %s; client used %.2f cores; spans had at most %.0f active parts, %.0f once assembled. Half load: %d exports, %d failed.\n",
			res.Transport, res.Max.Wall.Round(time.Second), count(res.Max.SteadyAcked), count(res.Max.SteadyWrite), count(res.Max.Backlog),
			res.Max.Drain.Round(100*time.Millisecond), res.Max.ClientCores, res.Max.SpansPartsMax, res.Max.SpansPartsEnd, res.Half.Exports, res.Half.Failed)
		fmt.Fprintf(w, "- %s memory at the highest RSS sampled in the max phase %s; after it, while the backlog drained and the assembler caught up, %s.\n",
			res.Transport, res.Max.PhasePeak.describe(), res.Max.AfterPeak.describe())
		fmt.Fprintf(w, "- %s API reads (%s over the last 15 min, in turn, one every %s), max phase: %s. Half load: %s.\n",
			res.Transport, strings.Join(pageReads, " and "), o.PageEvery, res.Max.Pages.describe(), res.Half.Pages.describe())
		if res.Max.FirstError != "" || res.Half.FirstError != "" {
			fmt.Fprintf(w, "  first error: %s %s\n", res.Max.FirstError, res.Half.FirstError)
		}
	}
	loss := "no loss"
	if r.Distinct < r.Acked {
		loss = fmt.Sprintf("**LOSS: %d acknowledged spans missing**", r.Acked-r.Distinct)
	}
	fmt.Fprintf(w, "\nDurability: %d spans acknowledged, %d stored (%d distinct) after the server stopped, %d WAL segments left: %s. %d llm_requests assembled (of %d requests sent).\n",
		r.Acked, r.Stored, r.Distinct, r.WALLeft, loss, r.Requests, r.Acked/int64(r.SpansPerReq))
	if r.Uncertain > 0 {
		fmt.Fprintf(w, "(%d spans were in exports that failed without an answer; they may or may not be stored.)\n", r.Uncertain)
	}
	best, p99 := 0.0, time.Duration(0)
	for _, res := range r.Results {
		best = max(best, res.Max.Sustained)
		p99 = max(p99, res.Half.percentile(0.99))
	}
	fmt.Fprintf(w, "\nTargets: ≥ 100k spans/s sustained: %s (%s); p99 export < 250 ms at half load: %s (%s); RSS < 1.5 GiB: %s (%s).\n",
		verdict(best >= 100_000), count(best), verdict(p99 > 0 && p99 < 250*time.Millisecond), ms(p99),
		verdict(r.ServerPeak.Peak < 1536<<20), mib(r.ServerPeak.Peak))
}

// runs is the median, with the number of runs when the time budget cut
// the repetitions short.
func runs(ds []time.Duration, reps int) string {
	if len(ds) > 0 && len(ds) < reps {
		return fmt.Sprintf("%s (%d run%s)", ms(median(ds)), len(ds), map[bool]string{true: "s"}[len(ds) > 1])
	}
	return ms(median(ds))
}

// printQuery writes the query report as a markdown table for the README.
func printQuery(w io.Writer, r *queryReport) {
	measured := false
	for _, s := range r.Sizes {
		measured = measured || len(s.Ops) > 0
	}
	if !measured {
		if len(r.Sizes) > 0 {
			last := r.Sizes[len(r.Sizes)-1]
			printWhatIfs(w, last.Rows, last.WhatIfs)
		}
		return
	}
	fmt.Fprintf(w, "\n### Page queries on the embedded engine (median of %d; windows end at the newest data)\n\n", r.Options.Reps)
	fmt.Fprintln(w, "| llm_requests | page | window | analysis.Queries | HTTP /api/v1 | HTML page (server) | main SQL (as the page reads it) | main SQL, engine only | all SQL, engine only | page ÷ main SQL | rows of main SQL |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, s := range r.Sizes {
		for _, t := range s.Ops {
			ratio := "–"
			if m := median(t.SQL); m > 0 {
				ratio = fmt.Sprintf("%.1f×", median(t.API).Seconds()/m.Seconds())
			}
			api := runs(t.API, r.Options.Reps)
			if t.Err != "" && len(t.API) == 0 {
				api = "error"
			}
			httpCol := runs(t.HTTP, r.Options.Reps)
			switch {
			case t.Err != "" && len(t.HTTP) == 0 && len(t.API) > 0:
				httpCol = "error"
			case len(t.HTTP) == 0 && median(t.API) >= slowPage:
				httpCol = "not run (page > 45 s)"
			}
			pageCol := runs(t.Page, r.Options.Reps)
			if len(t.Page) == 0 {
				pageCol = "–"
			}
			if len(t.Deferred) > 0 {
				pageCol += ", then " + runs(t.Deferred, r.Options.Reps) + " for the diagnosis it loads"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", count(float64(s.Rows)), t.Op, t.Window, api, httpCol, pageCol,
				ms(median(t.SQL)), ms(median(t.Engine)), ms(median(t.AllEngine)), ratio, t.MainRows)
		}
	}
	fmt.Fprintln(w)
	for _, s := range r.Sizes {
		load := ""
		if s.Load.Rows > 0 {
			load = fmt.Sprintf("loaded %d rows + %d spans at %s rows/s (RequestsBatch inserts of %d); ", s.Load.Rows, s.Load.Spans,
				count(float64(s.Load.Rows)/s.Load.Took.Seconds()), loadBatchRows)
		}
		fmt.Fprintf(w, "- %s rows: %s%d active llm_requests parts; process RSS %s after load, peak %s during the queries, peak %s with the app serving HTTP; other jobs used %.1f of the 2 cores meanwhile (load average %.1f).\n",
			count(float64(s.Rows)), load, s.Parts, mib(s.MemLoaded.RSS), mib(s.MemQuery.Peak), mib(s.MemHTTP.Peak), s.OtherCores, s.LoadAvg)
		for _, t := range s.Ops {
			if t.Err != "" {
				fmt.Fprintf(w, "  - %s %s failed: %.300s\n", t.Op, t.Window, strings.TrimSpace(t.Err))
			}
		}
	}
	if len(r.Sizes) == 0 {
		return
	}
	last := r.Sizes[len(r.Sizes)-1]
	printWhatIfs(w, last.Rows, last.WhatIfs)
	var diag, list, newest, page, deferred, episodes time.Duration
	var seen = map[string]bool{}
	for _, t := range last.Ops {
		m := median(t.API)
		if len(t.HTTP) > 0 {
			m = max(m, median(t.HTTP))
		}
		if t.Err != "" {
			m = time.Hour
		}
		seen[t.Op] = true
		seen["page"] = seen["page"] || len(t.Page) > 0
		page = max(page, median(t.Page))
		deferred = max(deferred, median(t.Deferred))
		switch t.Op {
		case "diagnose":
			diag = max(diag, m)
		case "list":
			list = max(list, m)
		case "newest":
			newest = max(newest, m)
		case "episodes":
			episodes = max(episodes, m)
		}
	}
	target := func(op string, ok bool, d time.Duration) string {
		if !seen[op] {
			return "not measured"
		}
		return fmt.Sprintf("%s (%s)", verdict(ok), ms(d))
	}
	fmt.Fprintf(w, "\nTargets at %s rows (slowest window): diagnose < 1 s: %s; request list < 100 ms: %s newest first (as the page opens), %s sorted by TTFT; HTML pages < 150 ms server time: %s.\n",
		count(float64(last.Rows)), target("diagnose", diag < time.Second, diag), target("newest", newest < 100*time.Millisecond, newest),
		target("list", list < 100*time.Millisecond, list), target("page", max(page, deferred) < 150*time.Millisecond, max(page, deferred)))
	if seen["episodes"] {
		// The detector's pass over a day (24 h window) is held to a page's
		// budget: it runs every minute on the same engine as the pages.
		fmt.Fprintf(w, "Episode detection (a pass over the window, with its 2 h warm-up) < 150 ms: %s.\n",
			target("episodes", episodes < 150*time.Millisecond, episodes))
	}
	if deferred > 0 {
		// The diagnosis the frame loads is the page's content: the target
		// above counts it as a page of its own.
		fmt.Fprintf(w, "The diagnose page answers with its frame and loads the diagnosis after it: %s at most.\n", ms(deferred))
	}
}

// memoryUses lists the engine's uses of at least 1 MiB, largest first, as
// " (merges 412 MiB, inserts 96 MiB)"; empty when there are none.
func memoryUses(uses map[string]float64) string {
	names := make([]string, 0, len(uses))
	for n, v := range uses {
		if v >= 1<<20 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(uses[b], uses[a]) })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.0f MiB", strings.ReplaceAll(n, "_", " "), uses[n]/(1<<20))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// describe says what the server's memory held at a sampled peak.
func (p rssPeak) describe() string {
	// The engine's gauge is left out of a scrape its engine could not
	// answer within 2 s (every connection busy).
	engine := "engine gauges not read (the engine was too busy to answer /metrics)"
	if p.EngineHeld > 0 {
		engine = fmt.Sprintf("engine tracked %.0f MiB%s", p.EngineHeld/(1<<20), memoryUses(p.EngineUses))
	}
	if p.SpansMerges > 0 {
		engine += fmt.Sprintf(", %.0f merges of spans running over %.0f parts", p.SpansMerges, p.SpansMerging)
	}
	if p.AllocResident > 0 {
		engine += fmt.Sprintf(", engine allocator resident %.0f MiB of which %.0f MiB dirty (freed, kept for reuse)",
			p.AllocResident/(1<<20), p.AllocDirty/(1<<20))
	}
	return fmt.Sprintf("(%d MiB): mapped files (libchdb's code) %d MiB, Go heap in use %.0f MiB, %s; the rest is the Go heap's headroom and other allocations",
		p.RSS>>20, p.File>>20, p.HeapInuse/(1<<20), engine)
}
