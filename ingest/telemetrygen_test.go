package ingest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/app/apptest"
)

// telemetrygenVersion is the OpenTelemetry Collector's load generator used
// as a third-party exporter.
const telemetrygenVersion = "v0.161.0"

// TestTelemetrygenInterop sends traces with the Collector project's
// telemetrygen over gRPC and HTTP and checks they are stored.
//
// It runs in every `make test`: telemetrygen is a large module (measured on
// the 2-core dev machine: 2m21s to build from a cold build cache plus ~1m30s
// to download, ~14s warm), which CI's budget affords; interoperating with
// the Collector project's own exporter is part of the contract.
func TestTelemetrygenInterop(t *testing.T) {
	gobin := t.TempDir()
	install := exec.Command("go", "install", "github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@"+telemetrygenVersion)
	// GOFLAGS=-mod=mod (the Makefile's) is refused by `go install pkg@version`.
	install.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=")
	t0 := time.Now()
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install telemetrygen: %v\n%s", err, out)
	}
	t.Logf("telemetrygen built in %s", time.Since(t0).Round(time.Second))
	bin := filepath.Join(gobin, "telemetrygen")

	srv := apptest.Start(t, apptest.Options{})
	const traces = 20 // each a root span and one child
	for _, tc := range []struct {
		service string
		args    []string
	}{
		{"tg-grpc", []string{"--otlp-endpoint", srv.OTLPGRPCAddr}},
		{"tg-http", []string{"--otlp-http", "--otlp-endpoint", srv.OTLPHTTPAddr}},
	} {
		t.Run(tc.service, func(t *testing.T) {
			args := append([]string{"traces", "--otlp-insecure", "--otlp-header", `Authorization="Bearer ` + apptest.Key + `"`,
				"--traces", "20", "--rate", "0", "--service", tc.service}, tc.args...)
			cmd := exec.Command(bin, args...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("telemetrygen %v: %v\n%s", args, err, out)
			}
			var n int64
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				r, err := srv.CH.Query(context.Background(), "SELECT count() AS n FROM spans FINAL WHERE service = ?", tc.service)
				if err != nil {
					t.Fatal(err)
				}
				if n = r.Row(0).Int("n"); n == 2*traces {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if n != 2*traces {
				t.Fatalf("%d spans of %s stored, want %d", n, tc.service, 2*traces)
			}
		})
	}
}
