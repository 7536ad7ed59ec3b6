-- Gauges and counters from Prometheus scrapes and OTLP metrics, with
-- inference-server names folded to canonical ones (kv_cache_usage …).
-- ReplacingMergeTree on (series, time) folds a write-ahead-log replay.
CREATE TABLE IF NOT EXISTS {{table "metric_points"}} {{onCluster}}
(
    project_id  UInt32,
    time        DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    service     LowCardinality(String),
    instance    LowCardinality(String),
    name        LowCardinality(String),
    labels      Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    value       Float64 CODEC(Gorilla, ZSTD(1))
)
ENGINE = {{engine "metric_points" "ReplacingMergeTree"}}
PARTITION BY toDate(time)
ORDER BY (project_id, name, service, instance, time, cityHash64(toString(labels)))
TTL toDateTime(time) + INTERVAL {{.RetentionDays}} DAY;
{{distributed "metric_points" "cityHash64(service, instance)"}}
