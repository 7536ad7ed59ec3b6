-- Scaling and cluster events (webhook, k8s events, inferred instance starts).
CREATE TABLE IF NOT EXISTS {{table "events"}} {{onCluster}}
(
    project_id     UInt32,
    time           DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    kind           LowCardinality(String),
    service        LowCardinality(String),
    instance       LowCardinality(String),
    from_replicas  Nullable(Int32),
    to_replicas    Nullable(Int32),
    reason         String CODEC(ZSTD(1)),
    source         LowCardinality(String),
    attributes     Map(LowCardinality(String), String) CODEC(ZSTD(1))
)
ENGINE = {{engine "events" "ReplacingMergeTree"}}
PARTITION BY toDate(time)
ORDER BY (project_id, service, time, kind, instance)
TTL toDateTime(time) + INTERVAL {{.RetentionDays}} DAY;
{{distributed "events" "cityHash64(service)"}}
