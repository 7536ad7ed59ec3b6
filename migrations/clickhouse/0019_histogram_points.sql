-- Inference-server histograms (vLLM, SGLang, TGI latencies) as one row per
-- series and interval: the observations between start and time in each
-- bucket (counts, not cumulative; the last bucket is +Inf). Ingest turns
-- cumulative exports into these deltas; quantiles of any window are the
-- sum of its rows' counts, interpolated within buckets.
-- ReplacingMergeTree on (series, time) folds a write-ahead-log replay.
CREATE TABLE IF NOT EXISTS {{table "histogram_points"}} {{onCluster}}
(
    project_id  UInt32,
    time        DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    start       DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    service     LowCardinality(String),
    instance    LowCardinality(String),
    name        LowCardinality(String),
    labels      Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    bounds      Array(Float64) CODEC(ZSTD(1)),
    counts      Array(UInt64) CODEC(ZSTD(1)),
    count       UInt64 CODEC(T64, ZSTD(1)),
    sum         Float64 CODEC(Gorilla, ZSTD(1))
)
ENGINE = {{engine "histogram_points" "ReplacingMergeTree"}}
PARTITION BY toDate(time)
ORDER BY (project_id, name, service, instance, time, cityHash64(toString(labels)))
TTL toDateTime(time) + INTERVAL {{.RetentionDays}} DAY;
{{distributed "histogram_points" "cityHash64(service, instance)"}}
