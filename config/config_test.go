package config

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := Load("x", nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8080" || c.OTLPGRPCAddr != ":4317" || c.OTLPHTTPAddr != ":4318" || c.DataDir != "./data" ||
		c.RetentionDays != 30 || c.MaxBodyBytes != 16<<20 || c.QueryTimeout != 30*time.Second || c.ClickHouseURL != "" || c.DatabaseURL != "" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestEnvThenFlags(t *testing.T) {
	c, err := Load("x", []string{"--http-addr", "127.0.0.1:9090", "--demo"}, env(map[string]string{
		"TOKENPATH_HTTP_ADDR": ":7070", "TOKENPATH_RETENTION_DAYS": "7", "TOKENPATH_SCRAPE_TARGETS": "http://a/metrics, vllm=http://b/metrics",
		"TOKENPATH_OUTBOUND_ALLOW": "*.svc.cluster.local, 10.0.0.0/8",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Demo || c.HTTPAddr != "127.0.0.1:9090" || c.RetentionDays != 7 || len(c.ScrapeTargets) != 2 || c.ScrapeTargets[1] != "vllm=http://b/metrics" {
		t.Fatalf("%+v", c)
	}
	if c.Outbound.CheckHost(t.Context(), "vllm.ml.svc.cluster.local") != nil || c.Outbound.CheckHost(t.Context(), "127.0.0.1") == nil {
		t.Errorf("TOKENPATH_OUTBOUND_ALLOW was not applied")
	}
}

func TestValidationNamesEverySetting(t *testing.T) {
	_, err := Load("x", nil, env(map[string]string{
		"TOKENPATH_RETENTION_DAYS": "zero", "TOKENPATH_HTTP_ADDR": "nonsense", "TOKENPATH_CLICKHOUSE_CLUSTER": "c",
		"TOKENPATH_BOOTSTRAP_KEY": "short", "TOKENPATH_DATABASE_URL": "mysql://x", "TOKENPATH_OUTBOUND_ALLOW": "10.0.0.0/99",
	}), io.Discard)
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"TOKENPATH_RETENTION_DAYS", "TOKENPATH_HTTP_ADDR", "TOKENPATH_CLICKHOUSE_CLUSTER", "TOKENPATH_BOOTSTRAP_KEY", "TOKENPATH_DATABASE_URL", "TOKENPATH_OUTBOUND_ALLOW"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

func TestHelpListsEverySetting(t *testing.T) {
	var b strings.Builder
	_, err := Load("tokenpath-server", []string{"--help"}, env(nil), &b)
	if err != ErrHelp {
		t.Fatalf("err = %v", err)
	}
	for _, s := range Settings {
		if !strings.Contains(b.String(), "--"+s.Flag) || !strings.Contains(b.String(), s.Env) {
			t.Errorf("--help misses %s", s.Env)
		}
	}
}

// The README's configuration table is generated from Settings; this fails
// when someone adds a setting and forgets to regenerate it (make docs).
func TestReadmeTableCurrent(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), MarkdownTable()) {
		t.Fatalf("README.md configuration table is stale; run `make docs` (go run ./cmd/server --print-config-table)\n%s", MarkdownTable())
	}
}
