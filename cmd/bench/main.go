// Command bench measures Tokenpath on this machine and prints markdown
// tables for the README:
//
//	go run ./cmd/bench ingest   # OTLP gRPC/HTTP throughput, export latency, RSS, no-loss check
//	go run ./cmd/bench query    # page latency over 1M and 10M llm_requests on the embedded engine
//
// The ingest bench runs the real server binary as its own process, so the
// client's and the server's memory and CPU are told apart; --inprocess runs
// it inside the bench instead, for CPU profiles.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenpath/tokenpath/app"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	// The pages and the in-process server are measured with the
	// collector settings the server runs with.
	app.TuneRuntime()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "ingest":
		err = ingestCmd(ctx, os.Args[2:])
	case "query":
		err = queryCmd(ctx, os.Args[2:])
	case "sql":
		err = sqlCmd(ctx, os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `Usage: bench ingest [flags] | bench query [flags] | bench sql --keep DIR STMT…   (-h after either lists its flags)

ingest  builds cmd/server, runs it with the embedded ClickHouse and a fresh
        PostgreSQL schema, drives OTLP/gRPC and OTLP/HTTP at full speed and at
        half load, times API reads meanwhile, checks no acknowledged span was
        lost, and compares with the raw engine insert rate.
query   loads synthetic llm_requests into an embedded store and times the
        requests list, series, diagnose and compare pages over 1 h, 24 h, 7 d.
sql     times statements on a dataset kept by 'bench query --keep DIR'.
`)
}

func ingestCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench ingest", flag.ContinueOnError)
	var o ingestOptions
	var transport string
	fs.DurationVar(&o.Duration, "duration", 60*time.Second, "length of the max-throughput phase, per transport")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", 0, "length of the half-load latency phase, per transport (default duration/2)")
	fs.IntVar(&o.Concurrency, "concurrency", 8, "concurrent exporters in the max-throughput phase")
	fs.IntVar(&o.Batch, "batch", 1000, "spans per export request (multiple of 4)")
	fs.StringVar(&transport, "transport", "both", "grpc, http or both")
	fs.IntVar(&o.EngineRows, "engine-rows", 1_000_000, "spans inserted for the raw engine rate")
	fs.DurationVar(&o.PageEvery, "page-every", defaultPageEvery, "how often an API read (requests list, diagnosis) is timed while the server is loaded")
	fs.BoolVar(&o.InProcess, "inprocess", false, "run the server inside the bench process (for --cpuprofile)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the server and client (implies --inprocess)")
	fs.StringVar(&o.DatabaseURL, "database-url", databaseURL(), "PostgreSQL for the server (a fresh schema is made; env TOKENPATH_BENCH_DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch transport {
	case "both":
		o.Transports = []string{"grpc", "http"}
	case "grpc", "http":
		o.Transports = []string{transport}
	default:
		return fmt.Errorf("--transport %q: want grpc, http or both", transport)
	}
	if o.CPUProfile != "" {
		o.InProcess = true
	}
	o.Log = os.Stderr
	rep, err := runIngest(ctx, o)
	if rep != nil && len(rep.Results) > 0 {
		printIngest(os.Stdout, rep)
	}
	return err
}

func queryCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench query", flag.ContinueOnError)
	var o queryOptions
	var rows string
	var quick, noHTTP bool
	fs.StringVar(&rows, "rows", "1000000,10000000", "comma-separated llm_requests dataset sizes")
	fs.BoolVar(&quick, "quick", false, "100k rows and 5-minute gauges only (CI smoke)")
	fs.DurationVar(&o.GaugeInterval, "gauge-interval", 15*time.Second, "scrape interval of the synthetic vLLM gauges")
	fs.IntVar(&o.Reps, "reps", 5, "runs per measurement; the median is reported")
	fs.BoolVar(&o.WhatIf, "whatif", true, "also time the proposed fixes on the largest size")
	fs.BoolVar(&o.OnlyWhatIf, "only-whatif", false, "load, then time only the proposed fixes (no page measurements)")
	fs.BoolVar(&noHTTP, "no-http", false, "skip the /api/v1 measurements (no PostgreSQL needed)")
	fs.StringVar(&o.DatabaseURL, "database-url", databaseURL(), "PostgreSQL for the app serving /api/v1 (a fresh schema is made)")
	var windows, ops string
	fs.StringVar(&windows, "windows", "", "comma-separated windows to measure (1h,24h,7d; empty = all)")
	fs.StringVar(&ops, "ops", "", "comma-separated pages to measure (list,series,overview,diagnose,compare,episodes; empty = all)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the page measurements (not the load); the HTTP ones go to FILE.http")
	fs.IntVar(&o.MaxRows, "max-rows", 0, "rows a diagnosis loads per window (default analysis.DefaultMaxRows)")
	statements := fs.Bool("statements", false, "log each statement's engine time (FORMAT Null) to stderr")
	fs.StringVar(&o.Keep, "keep", "", "work dir kept between runs; a dataset loaded there is reused (needs --no-http)")
	fs.DurationVar(&o.Span, "span", defaultDataSpan, "how far back the dataset's requests reach (26h puts them all in the episode detector's day)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *statements {
		statementLog = os.Stderr
	}
	o.Windows = splitList(windows)
	o.Ops = splitList(ops)
	if quick {
		rows = "100000"
		if !flagSet(fs, "gauge-interval") {
			o.GaugeInterval = 5 * time.Minute
		}
	}
	for _, f := range strings.Split(rows, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--rows %q: want positive whole numbers", rows)
		}
		o.Rows = append(o.Rows, n)
	}
	o.HTTP = !noHTTP
	o.Log = os.Stderr
	rep, err := runQuery(ctx, o)
	if rep != nil && len(rep.Sizes) > 0 {
		printQuery(os.Stdout, rep)
	}
	return err
}

// splitList splits a comma-separated flag value; empty gives nil.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
