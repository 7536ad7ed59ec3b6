package config

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// No Docker engine runs here, so `docker compose config` cannot; this test
// checks what can be checked: the compose file is valid YAML with the three
// services, every TOKENPATH_* variable it sets is a real setting, and the
// Dockerfile builds the same package `make build` builds.
func TestDockerComposeAndDockerfile(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Build       any               `yaml:"build"`
			Environment map[string]string `yaml:"environment"`
			DependsOn   map[string]any    `yaml:"depends_on"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	known := map[string]bool{}
	for _, s := range Settings {
		known[s.Env] = true
	}
	tp, ok := compose.Services["tokenpath"]
	if !ok || tp.Build == nil {
		t.Fatalf("compose has no tokenpath service built from the Dockerfile: %+v", compose.Services)
	}
	for k := range tp.Environment {
		if strings.HasPrefix(k, "TOKENPATH_") && !known[k] {
			t.Errorf("compose sets %s, which is not a setting", k)
		}
	}
	for _, need := range []string{"TOKENPATH_CLICKHOUSE_URL", "TOKENPATH_DATABASE_URL"} {
		if tp.Environment[need] == "" {
			t.Errorf("compose does not wire %s", need)
		}
	}
	if ch := compose.Services["clickhouse"].Image; !regexp.MustCompile(`clickhouse-server:(2[4-9]|[3-9]\d)\.`).MatchString(ch) {
		t.Errorf("clickhouse image %q is older than 24.x", ch)
	}
	if pg := compose.Services["postgres"].Image; !regexp.MustCompile(`postgres:(1[6-9]|[2-9]\d)`).MatchString(pg) {
		t.Errorf("postgres image %q is older than 16", pg)
	}
	for _, dep := range []string{"clickhouse", "postgres"} {
		if _, ok := tp.DependsOn[dep]; !ok {
			t.Errorf("tokenpath does not wait for %s", dep)
		}
	}

	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "go build -trimpath -o /out/tokenpath-server ./cmd/server") {
		t.Error("the Dockerfile does not build ./cmd/server")
	}
	if !strings.Contains(string(mk), "./cmd/server") {
		t.Error("the Makefile does not build ./cmd/server")
	}
	if !strings.Contains(string(df), "npm ci") || !strings.Contains(string(df), "web/static/vendor/") {
		t.Error("the Dockerfile does not vendor the browser assets from npm")
	}
}
