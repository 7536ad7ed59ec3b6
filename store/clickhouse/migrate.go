package clickhouse

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"text/template"

	"github.com/tokenpath/tokenpath/migrations"
	"github.com/tokenpath/tokenpath/telemetry"
)

// ddl renders migration templates for a single node or a cluster. On a
// cluster each table becomes <name>_local (ReplicatedMergeTree, ON CLUSTER)
// behind a Distributed <name> sharded by the given key, so a trace's spans
// meet on one shard.
type ddl struct {
	Cluster       string
	RetentionDays int
}

func (d ddl) funcs() template.FuncMap {
	return template.FuncMap{
		"table": func(name string) string {
			if d.Cluster != "" {
				return name + "_local"
			}
			return name
		},
		"onCluster": func() string {
			if d.Cluster != "" {
				return "ON CLUSTER " + quoteIdent(d.Cluster)
			}
			return ""
		},
		"engine": func(table, engine string) string {
			if d.Cluster == "" {
				return engine
			}
			name, args, _ := strings.Cut(engine, "(")
			args = strings.TrimSuffix(args, ")")
			repl := fmt.Sprintf("'/clickhouse/tables/{shard}/{database}/%s_local', '{replica}'", table)
			if args != "" {
				repl += ", " + args
			}
			return "Replicated" + name + "(" + repl + ")"
		},
		"distributed": func(table, shardKey string) string {
			if d.Cluster == "" {
				return ""
			}
			c := quoteIdent(d.Cluster)
			return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s ON CLUSTER %s AS %s_local ENGINE = Distributed(%s, currentDatabase(), %s_local, %s);",
				table, c, table, c, table, shardKey)
		},
		// Rollup columns and aggregations come from rollup.go, which the
		// readers use too.
		"rollupColumns":        func() string { return rollupColumnsDDL(RollupHistograms) },
		"rollupFromRequests":   func() string { return RollupFromRequests(RequestSign, RollupHistograms) },
		"rollupMerge":          func() string { return RollupMerge(RollupHistograms) },
		"episodeRollupColumns": func() string { return rollupColumnsDDL(EpisodeHistograms) },
		"episodeRollupFromRequests": func() string {
			return RollupFromRequests(RequestSign, EpisodeHistograms)
		},
		"spanContextColumns": spanContextColumnsDDL,
		"llmCallColumns":     llmCallColumnsDDL,
	}
}

// spanContextColumnsDDL adds spans' route and tenant columns, computed from
// the attributes as telemetry.SpanTenant does where a part lacks them.
func spanContextColumnsDDL() string {
	var tenant []string
	for _, k := range telemetry.TenantAttributes {
		tenant = append(tenant, fmt.Sprintf("attributes['%s'] != '', attributes['%s']", k, k))
	}
	return fmt.Sprintf("ADD COLUMN IF NOT EXISTS route LowCardinality(String) DEFAULT attributes['%s'], "+
		"ADD COLUMN IF NOT EXISTS tenant String DEFAULT multiIf(%s, '') CODEC(ZSTD(1))",
		telemetry.RouteAttribute, strings.Join(tenant, ", "))
}

// llmCallColumnsDDL adds spans' call identity columns (telemetry.LLMCall's
// ResponseID, ServerAddress, ServerPort, TTFTSource, Preemptions).
func llmCallColumnsDDL() string {
	return "ADD COLUMN IF NOT EXISTS response_id String DEFAULT '' CODEC(ZSTD(1)), " +
		"ADD COLUMN IF NOT EXISTS server_address LowCardinality(String) DEFAULT '', " +
		"ADD COLUMN IF NOT EXISTS server_port UInt16 DEFAULT 0, " +
		"ADD COLUMN IF NOT EXISTS ttft_source LowCardinality(String) DEFAULT '', " +
		"ADD COLUMN IF NOT EXISTS preemptions Nullable(Int64)"
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "") + "`" }

// Migration is one rendered migration file.
type Migration struct {
	Version    string
	Statements []string
}

// RenderMigrations renders every embedded migration for the given layout.
func RenderMigrations(cluster string, retentionDays int) ([]Migration, error) {
	d := ddl{Cluster: cluster, RetentionDays: retentionDays}
	names, err := fs.Glob(migrations.ClickHouse, "clickhouse/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Migration
	for _, name := range names {
		src, err := fs.ReadFile(migrations.ClickHouse, name)
		if err != nil {
			return nil, err
		}
		t, err := template.New(name).Funcs(d.funcs()).Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, d); err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
		out = append(out, Migration{
			Version:    strings.TrimSuffix(strings.TrimPrefix(name, "clickhouse/"), ".sql"),
			Statements: splitStatements(buf.String()),
		})
	}
	return out, nil
}

// splitStatements splits on semicolons that end a line and drops comments.
func splitStatements(src string) []string {
	var lines []string
	for _, l := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--") {
			continue
		}
		lines = append(lines, l)
	}
	var out []string
	for _, part := range strings.Split(strings.Join(lines, "\n"), ";\n") {
		if s := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(part), ";")); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Migrate applies pending migrations in order and records each in
// schema_migrations. Statements are idempotent (IF NOT EXISTS) so a crash
// between a statement and its record is harmless. Concurrent servers are
// serialized by the caller (a Postgres advisory lock).
func (s *Store) Migrate(ctx context.Context) error {
	d := ddl{Cluster: s.cfg.Cluster}
	f := d.funcs()
	engine := f["engine"].(func(string, string) string)("schema_migrations", "ReplacingMergeTree")
	create := fmt.Sprintf("CREATE TABLE IF NOT EXISTS schema_migrations %s (version String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = %s ORDER BY version",
		f["onCluster"].(func() string)(), strings.Replace(engine, "schema_migrations_local", "schema_migrations", 1))
	if err := s.Exec(ctx, create); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	applied := map[string]bool{}
	r, err := s.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	for i := 0; i < r.Len(); i++ {
		applied[r.Row(i).String("version")] = true
	}
	migs, err := RenderMigrations(s.cfg.Cluster, s.cfg.RetentionDays)
	if err != nil {
		return err
	}
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		for _, st := range m.Statements {
			if err := s.Exec(ctx, st); err != nil {
				return fmt.Errorf("migration %s: %w", m.Version, err)
			}
		}
		if err := s.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES (?)", m.Version); err != nil {
			return fmt.Errorf("record migration %s: %w", m.Version, err)
		}
		s.log.Info("clickhouse migration applied", "version", m.Version)
	}
	if err := s.applyRetention(ctx); err != nil {
		return err
	}
	if s.Embedded() {
		if err := s.Exec(ctx, "ALTER TABLE spans MODIFY SETTING "+embeddedSpansSettings); err != nil {
			return fmt.Errorf("tune merges of spans: %w", err)
		}
	}
	return nil
}

// embeddedSpansSettings tune how the embedded engine writes and merges
// spans, its largest table, whose inserts and merges are most of ingest's
// CPU. A server's operators tune their own (merge_selector_base needs
// ClickHouse 24.11).
//
//   - merge_selector_base 25 (ClickHouse's default is 5): background merges
//     cost the engine more than its inserts, and more the longer ingest
//     runs (38 % of the server's CPU in the last 20 s of a minute at full
//     rate); merging more parts at once rewrites each row fewer times. 10
//     took merged rows per span from ~4.3 to ~2.8–3.4 (10–20 % less server
//     CPU per span); 25 against 10 over a minute at full rate (bench ingest
//     --duration 60s, gRPC, back to back): 21.7 against 27.8 µs per span,
//     89k against 72k spans/s acknowledged. It leaves more parts per
//     partition (up to a few dozen), which reads by trace id feel little:
//     they are bounded by the trace's starts.
//   - min_bytes_for_wide_part 64 MiB (default 10 MiB): an insert (at most
//     ingest.PipelineConfig.InsertBytes of Native, ~40 MiB, ~54 MB as the
//     engine counts it: uncompressed) writes a compact part, one data file
//     instead of two per column and subcolumn (~80): ~1 µs less CPU per
//     span inserted, much of it the file system creating and deleting
//     files. Merges of ~21 such parts (~1 GB) still write wide parts;
//     compact ones measured no cheaper (BenchmarkMergeSpans).
//   - max_parts_to_merge_at_once 30 (default 100): a merge holds a
//     granule of a column from every part it reads, ~5–6 MiB a part of
//     spans. Merges take ~21 parts while they keep up, but when parts pile
//     up in a burst (250–300 active) the selector gathered 54 at once, two
//     such merges 570 MiB (bench ingest). 30 keeps one merge under ~200 MiB.
const embeddedSpansSettings = "merge_selector_base = 25, min_bytes_for_wide_part = 67108864, max_parts_to_merge_at_once = 30"

// retentionTables maps each table to its time column for TTL.
var retentionTables = map[string]string{"spans": "start", "llm_requests": "start", "llm_requests_sample": "start", "llm_requests_sample64": "start", "llm_request_names": "hour", "metric_points": "time", "histogram_points": "time", "metric_peaks_5m": "bucket",
	"events": "time", "resources": "last_seen", "trace_bounds": "last_start",
	"llm_request_rollup_5m": "bucket", "llm_request_rollup_1h": "hour", "llm_request_top": "bucket_end",
	EpisodeRollup: "minute"}

// applyRetention brings every table's TTL to the configured retention when
// TOKENPATH_RETENTION_DAYS changed since the table was created.
func (s *Store) applyRetention(ctx context.Context) error {
	for table, col := range retentionTables {
		name := table
		if s.cfg.Cluster != "" {
			name += "_local"
		}
		r, err := s.Query(ctx, "SELECT create_table_query AS q FROM system.tables WHERE database = currentDatabase() AND name = ?", name)
		if err != nil {
			return fmt.Errorf("read ttl of %s: %w", name, err)
		}
		if r.Len() == 0 {
			continue
		}
		// The engine stores the TTL normalized as toIntervalDay(N).
		q := r.Row(0).String("q")
		if strings.Contains(q, fmt.Sprintf("toIntervalDay(%d)", s.cfg.RetentionDays)) ||
			strings.Contains(q, fmt.Sprintf("INTERVAL %d DAY", s.cfg.RetentionDays)) {
			continue
		}
		alter := fmt.Sprintf("ALTER TABLE %s %s MODIFY TTL toDateTime(%s) + INTERVAL %d DAY SETTINGS materialize_ttl_after_modify = 0",
			name, f0(s.cfg.Cluster), col, s.cfg.RetentionDays)
		if err := s.Exec(ctx, alter); err != nil {
			return fmt.Errorf("set retention of %s: %w", name, err)
		}
		s.log.Info("retention changed", "table", name, "days", s.cfg.RetentionDays)
	}
	return nil
}

func f0(cluster string) string {
	if cluster == "" {
		return ""
	}
	return "ON CLUSTER " + quoteIdent(cluster)
}
