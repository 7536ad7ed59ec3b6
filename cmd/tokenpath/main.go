// Command tokenpath is the command-line client: `tokenpath diagnose` and
// `tokenpath demo`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tokenpath/tokenpath/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], map[string]func(context.Context, cli.Env, []string) error{
		"diagnose": cli.Diagnose,
		"demo":     cli.Demo,
	})
	stop()
	os.Exit(code)
}
