// Package config reads Tokenpath's settings from environment variables and
// matching command-line flags (flags win), validates them, and documents
// them: Settings is the single list that --help and the README table are
// generated from.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/outbound"
)

// Config is the validated server configuration.
type Config struct {
	HTTPAddr          string
	OTLPGRPCAddr      string
	OTLPHTTPAddr      string
	DataDir           string
	ClickHouseURL     string
	ClickHouseCluster string
	DatabaseURL       string
	BootstrapKey      string
	RetentionDays     int
	MaxBodyBytes      int64
	MaxPendingRows    int
	ScrapeTargets     []string
	QueryTimeout      time.Duration
	LogFormat         string
	LogLevel          string
	Demo              bool
	DemoBackfill      time.Duration
	PublicURL         string
	MetricsKey        string
	// Outbound restricts the hosts scrape targets and webhooks reach;
	// nil allows every host.
	Outbound *outbound.Policy
}

// Setting documents one configuration knob.
type Setting struct {
	Env     string
	Flag    string
	Default string
	Usage   string
	set     func(c *Config, v string) error
}

func str(dst func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *dst(c) = v; return nil }
}

// Settings lists every setting in the order --help shows them.
var Settings = []Setting{
	{"TOKENPATH_HTTP_ADDR", "http-addr", ":8080", "UI and REST API listen address",
		str(func(c *Config) *string { return &c.HTTPAddr })},
	{"TOKENPATH_OTLP_GRPC_ADDR", "otlp-grpc-addr", ":4317", "OTLP/gRPC listen address (empty disables)",
		str(func(c *Config) *string { return &c.OTLPGRPCAddr })},
	{"TOKENPATH_OTLP_HTTP_ADDR", "otlp-http-addr", ":4318", "OTLP/HTTP listen address: /v1/traces, /v1/metrics, /v1/logs (empty disables)",
		str(func(c *Config) *string { return &c.OTLPHTTPAddr })},
	{"TOKENPATH_DATA_DIR", "data-dir", "./data", "directory for the embedded ClickHouse and PostgreSQL and the ingest write-ahead log",
		str(func(c *Config) *string { return &c.DataDir })},
	{"TOKENPATH_CLICKHOUSE_URL", "clickhouse-url", "", "ClickHouse server, clickhouse://user:pass@host:9000/db (empty = embedded engine in the data dir)",
		str(func(c *Config) *string { return &c.ClickHouseURL })},
	{"TOKENPATH_CLICKHOUSE_CLUSTER", "clickhouse-cluster", "", "ClickHouse cluster name: ReplicatedMergeTree + Distributed tables, ON CLUSTER migrations (needs a URL)",
		str(func(c *Config) *string { return &c.ClickHouseCluster })},
	{"TOKENPATH_DATABASE_URL", "database-url", "", "PostgreSQL URL, postgres://user:pass@host:5432/db (empty = embedded PostgreSQL in the data dir)",
		str(func(c *Config) *string { return &c.DatabaseURL })},
	{"TOKENPATH_BOOTSTRAP_KEY", "bootstrap-key", "", "ensure project \"default\" exists with this API key (at least 16 characters)",
		str(func(c *Config) *string { return &c.BootstrapKey })},
	{"TOKENPATH_RETENTION_DAYS", "retention-days", "30", "days of telemetry kept in ClickHouse (TTL)",
		func(c *Config, v string) error { return atoi(v, 1, 3650, &c.RetentionDays) }},
	{"TOKENPATH_MAX_BODY_BYTES", "max-body-bytes", "16777216", "largest OTLP request body accepted, also after gzip decompression",
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1024 || n > 1<<30 {
				return fmt.Errorf("want a byte count between 1024 and 1073741824, got %q", v)
			}
			c.MaxBodyBytes = n
			return nil
		}},
	{"TOKENPATH_MAX_PENDING_ROWS", "max-pending-rows", "300000", "acknowledged rows waiting for ClickHouse before exports are refused with 429 / RESOURCE_EXHAUSTED (bounds what waits: stage files in the page cache on the embedded engine, heap with a ClickHouse server); a third of it waiting starts an insert",
		func(c *Config, v string) error { return atoi(v, 1000, 10_000_000, &c.MaxPendingRows) }},
	{"TOKENPATH_SCRAPE_TARGETS", "scrape-targets", "", "comma-separated Prometheus /metrics URLs of inference servers to scrape (service=URL pairs allowed)",
		func(c *Config, v string) error {
			c.ScrapeTargets = nil
			for _, t := range strings.Split(v, ",") {
				if t = strings.TrimSpace(t); t != "" {
					c.ScrapeTargets = append(c.ScrapeTargets, t)
				}
			}
			return nil
		}},
	{"TOKENPATH_QUERY_TIMEOUT", "query-timeout", "30s", "longest a page or API query may run",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second {
				return fmt.Errorf("want a duration of at least 1s, got %q", v)
			}
			c.QueryTimeout = d
			return nil
		}},
	{"TOKENPATH_LOG_FORMAT", "log-format", "auto", "log format: auto (JSON unless stderr is a terminal), json or text",
		func(c *Config, v string) error {
			switch v {
			case "auto", "json", "text":
				c.LogFormat = v
				return nil
			}
			return fmt.Errorf("want auto, json or text, got %q", v)
		}},
	{"TOKENPATH_LOG_LEVEL", "log-level", "info", "log level: debug, info, warn or error",
		func(c *Config, v string) error {
			switch v {
			case "debug", "info", "warn", "error":
				c.LogLevel = v
				return nil
			}
			return fmt.Errorf("want debug, info, warn or error, got %q", v)
		}},
	{"TOKENPATH_DEMO", "demo", "false", "also run the demo load generator against this server",
		func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			c.Demo = b
			return nil
		}},
	{"TOKENPATH_DEMO_BACKFILL", "demo-backfill", "4h", "history the demo sends on its first start; a restart sends only the gap since its newest stored traffic, at most this much",
		func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("want a duration such as 4h or 0, got %q", v)
			}
			c.DemoBackfill = d
			return nil
		}},
	{"TOKENPATH_PUBLIC_URL", "public-url", "", "external base URL used in share links and alerts (default http://localhost + HTTP port)",
		str(func(c *Config) *string { return &c.PublicURL })},
	{"TOKENPATH_METRICS_KEY", "metrics-key", "", "when set, /metrics answers only Authorization: Bearer <this value> (empty = open: counters, runtime figures, scrape targets by project, service and id, never a URL)",
		func(c *Config, v string) error {
			if v != "" && len(v) < 16 {
				return errors.New("want at least 16 characters")
			}
			c.MetricsKey = v
			return nil
		}},
	{"TOKENPATH_OUTBOUND_ALLOW", "outbound-allow", "", "hosts that scrape targets and SLO alert webhooks may reach: comma-separated host name globs (*.svc.cluster.local), IP addresses, CIDR prefixes (10.0.0.0/8) and public (any internet address); checked when saved and on every connection, on the address connected to (empty = any host, as in-cluster scraping needs private addresses)",
		func(c *Config, v string) error {
			p, err := outbound.Parse(v)
			c.Outbound = p
			return err
		}},
}

func atoi(v string, lo, hi int, dst *int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return fmt.Errorf("want a whole number between %d and %d, got %q", lo, hi, v)
	}
	*dst = n
	return nil
}

// ErrHelp is returned when --help was asked for; the usage is already printed.
var ErrHelp = flag.ErrHelp

// Load reads defaults, then the environment, then flags, and validates.
func Load(program string, args []string, getenv func(string) string, usageOut io.Writer) (*Config, error) {
	c := &Config{}
	values := map[string]string{}
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(usageOut)
	for _, s := range Settings {
		v := s.Default
		if e := getenv(s.Env); e != "" {
			v = e
		}
		values[s.Env] = v
		set := func(fv string) error { values[s.Env] = fv; return nil }
		if s.Default == "true" || s.Default == "false" {
			fs.BoolFunc(s.Flag, s.Usage, set) // --demo without a value
		} else {
			fs.Func(s.Flag, s.Usage, set)
		}
	}
	fs.Usage = func() { Usage(usageOut, program) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (settings are --flags or TOKENPATH_* variables; see --help)", fs.Arg(0))
	}
	var errs []error
	for _, s := range Settings {
		if err := s.set(c, values[s.Env]); err != nil {
			errs = append(errs, fmt.Errorf("%s (--%s): %w", s.Env, s.Flag, err))
		}
	}
	errs = append(errs, c.validate()...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func (c *Config) validate() []error {
	var errs []error
	for _, a := range []struct{ env, v string }{
		{"TOKENPATH_HTTP_ADDR", c.HTTPAddr}, {"TOKENPATH_OTLP_GRPC_ADDR", c.OTLPGRPCAddr}, {"TOKENPATH_OTLP_HTTP_ADDR", c.OTLPHTTPAddr},
	} {
		if a.v == "" && a.env != "TOKENPATH_HTTP_ADDR" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.v); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("%s: want host:port or :port, got %q", a.env, a.v))
		}
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("TOKENPATH_DATA_DIR: must not be empty"))
	}
	if c.ClickHouseURL != "" {
		if u, err := url.Parse(c.ClickHouseURL); err != nil || (u.Scheme != "clickhouse" && u.Scheme != "tcp") || u.Host == "" {
			errs = append(errs, errors.New("TOKENPATH_CLICKHOUSE_URL: want clickhouse://user:pass@host:9000/db"))
		}
	}
	if c.ClickHouseCluster != "" && c.ClickHouseURL == "" {
		errs = append(errs, errors.New("TOKENPATH_CLICKHOUSE_CLUSTER needs TOKENPATH_CLICKHOUSE_URL: the embedded engine is a single node"))
	}
	if c.DatabaseURL != "" {
		if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			errs = append(errs, errors.New("TOKENPATH_DATABASE_URL: want postgres://user:pass@host:5432/db"))
		}
	}
	if c.BootstrapKey != "" && len(c.BootstrapKey) < 16 {
		errs = append(errs, errors.New("TOKENPATH_BOOTSTRAP_KEY: use at least 16 characters; it guards all your telemetry"))
	}
	return errs
}

// Usage prints every setting with its environment variable and default.
func Usage(w io.Writer, program string) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\nEvery flag can also be set by its environment variable; a flag wins.\n\n", program)
	for _, s := range Settings {
		def := s.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  --%s  (%s, default %s)\n      %s\n", s.Flag, s.Env, def, s.Usage)
	}
}

// MarkdownTable renders Settings as the README's configuration table.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| Variable | Flag | Default | Meaning |\n| --- | --- | --- | --- |\n")
	for _, s := range Settings {
		def := "`" + s.Default + "`"
		if s.Default == "" {
			def = "(empty)"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s |\n", s.Env, s.Flag, def, strings.ReplaceAll(s.Usage, "|", "\\|"))
	}
	return b.String()
}

// ClickHouseDir and PostgresDir are the embedded engines' homes.
func (c *Config) ClickHouseDir() string { return strings.TrimRight(c.DataDir, "/") + "/clickhouse" }

// PostgresDir is the embedded PostgreSQL data directory.
func (c *Config) PostgresDir() string { return strings.TrimRight(c.DataDir, "/") + "/postgres" }
