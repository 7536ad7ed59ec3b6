package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// sqlCmd times statements on a dataset kept by `bench query --keep DIR`:
// the quickest way to try a rewrite of a page's SQL on realistic data.
func sqlCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench sql", flag.ContinueOnError)
	keep := fs.String("keep", "", "work dir of a `bench query --keep` run")
	reps := fs.Int("reps", 3, "runs per statement; the median is printed")
	show := fs.Int("show", 5, "result rows printed per statement (EXPLAIN output is rows too)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keep == "" || fs.NArg() == 0 {
		return errors.New("usage: bench sql --keep DIR 'SELECT …' ['SELECT …' …]")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch, err := clickhouse.Open(ctx, clickhouse.Config{DataDir: filepath.Join(*keep, "data", "clickhouse"), RetentionDays: 30,
		MaxExecutionTime: 10 * time.Minute}, quiet)
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, stmt := range fs.Args() {
		var took, cpu []time.Duration
		var r *clickhouse.Result
		for range max(*reps, 1) {
			t0, c0 := time.Now(), processCPU()
			if r, err = ch.Query(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
			took, cpu = append(took, time.Since(t0)), append(cpu, processCPU()-c0)
		}
		// CPU time (the engine runs in this process) moves far less than
		// wall time when other jobs share the machine.
		fmt.Fprintf(os.Stdout, "%s\n  %d rows, median %s of %d, CPU %s\n", stmt, r.Len(), median(took).Round(time.Millisecond), len(took),
			median(cpu).Round(time.Millisecond))
		for i := 0; i < min(r.Len(), *show); i++ {
			fmt.Fprintf(os.Stdout, "  %v\n", r.Rows[i])
		}
	}
	return nil
}
