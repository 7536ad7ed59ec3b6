package cli

import (
	"context"
	"flag"
	"log/slog"

	"github.com/tokenpath/tokenpath/demo"
)

// Demo runs `tokenpath demo`: realistic traffic with planted incidents
// against a running server's OTLP endpoint. The metrics-only service is
// left out: registering its scrape target takes the server's own store,
// which only `tokenpath-server --demo` has.
func Demo(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("tokenpath demo", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	server := fs.String("server", firstNonEmpty(env.Getenv("TOKENPATH_URL"), "http://localhost:8080"), "Tokenpath URL for the events API (TOKENPATH_URL)")
	otlp := fs.String("otlp-endpoint", firstNonEmpty(env.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "http://localhost:4318"), "OTLP/HTTP endpoint")
	key := fs.String("key", defaultKey(env), keyUsage)
	backfill := fs.Duration("backfill", 0, "also send this much history first, e.g. 1h")
	rate := fs.Float64("rate", 2, "chat requests per second at steady state")
	seed := fs.Int64("seed", 0, "random seed (0 = from the clock)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *key == "" {
		return errNoKey
	}
	log := slog.New(slog.NewTextHandler(env.Stderr, nil))
	return demo.Run(ctx, demo.Config{OTLPEndpoint: *otlp, APIBase: *server, APIKey: *key, Rate: *rate, Seed: *seed, Log: log}, *backfill)
}
