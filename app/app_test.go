package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenpath/tokenpath/config"
)

// A port already taken is reported before anything else starts: the data
// dir stays untouched, so no database is initialised or migrated for a
// server that could never have served.
func TestStartReportsPortClashFirst(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	for _, tc := range []struct{ name, env string }{
		{"ui", "TOKENPATH_HTTP_ADDR"},
		{"otlp-http", "TOKENPATH_OTLP_HTTP_ADDR"},
		{"otlp-grpc", "TOKENPATH_OTLP_GRPC_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			cfg, err := config.Load("tokenpath-server", nil, func(k string) string {
				switch k {
				case tc.env:
					return taken.Addr().String()
				case "TOKENPATH_HTTP_ADDR", "TOKENPATH_OTLP_HTTP_ADDR", "TOKENPATH_OTLP_GRPC_ADDR":
					return "127.0.0.1:0"
				case "TOKENPATH_DATA_DIR":
					return dataDir
				}
				return ""
			}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			a, err := Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				a.Stop(context.Background())
				t.Fatal("Start succeeded on a port already in use")
			}
			if !strings.Contains(err.Error(), tc.env) || !strings.Contains(err.Error(), "address already in use") {
				t.Errorf("error %q does not name %s and the clash", err, tc.env)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data dir was created before the ports were checked (stat: %v)", err)
			}
		})
	}
}
