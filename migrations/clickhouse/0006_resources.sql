-- Resource attributes (service, k8s pod/namespace/node, host, process, SDK)
-- are the same for every span of one process: they are stored here once per
-- distinct resource, and new span rows carry only resource_hash (their
-- resource map stays empty). Older rows keep their map with hash 0.
-- ReplacingMergeTree folds the same resource written again; last_seen is at
-- or after the start of every span that references it, so with the same
-- retention a resource outlives its spans.
CREATE TABLE IF NOT EXISTS {{table "resources"}} {{onCluster}}
(
    project_id     UInt32,
    resource_hash  UInt64,
    service        LowCardinality(String),
    attributes     Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    last_seen      DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1))
)
ENGINE = {{engine "resources" "ReplacingMergeTree(last_seen)"}}
ORDER BY (project_id, resource_hash)
TTL toDateTime(last_seen) + INTERVAL {{.RetentionDays}} DAY;
{{distributed "resources" "cityHash64(project_id, resource_hash)"}}
ALTER TABLE {{table "spans"}} {{onCluster}} ADD COLUMN IF NOT EXISTS resource_hash UInt64 DEFAULT 0 AFTER resource;
{{- if .Cluster}}
ALTER TABLE spans {{onCluster}} ADD COLUMN IF NOT EXISTS resource_hash UInt64 DEFAULT 0 AFTER resource;
{{- end}}
