// Command server runs Tokenpath: OTLP receivers, the analysis workers and
// the web UI/API, on the embedded engines by default. It only wires
// packages together; see run.go for the start and stop order.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tokenpath/tokenpath/app"
	"github.com/tokenpath/tokenpath/config"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--print-config-table" {
		fmt.Print(config.MarkdownTable())
		return
	}
	cfg, err := config.Load("tokenpath-server", os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, config.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tokenpath: invalid configuration:\n%v\n", err)
		os.Exit(2)
	}
	app.TuneRuntime()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "tokenpath: %v\n", err)
		os.Exit(1)
	}
}
