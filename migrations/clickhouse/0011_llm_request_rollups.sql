-- Requests aggregated per 5 minutes and per hour, per (service,
-- server_service, model, provider): counts, token sums and a log-scale
-- histogram (buckets 5 % wide) of every latency and token column. A
-- window's chart series and the overview read these instead of every
-- request under FINAL (store/clickhouse/rollup.go says how they stay right
-- when the assembler rewrites a request: signed rows, the replaced version
-- retracted in the same insert).
--
-- The 5-minute table is filled by a view on llm_requests, the hourly one by
-- a view on the 5-minute table. What existed is copied at the end, live
-- rows only; the tables are emptied first so a migration interrupted after
-- the copy and run again does not count it twice (nothing else writes
-- during migrations).
CREATE TABLE IF NOT EXISTS {{table "llm_request_rollup_5m"}} {{onCluster}}
(
    project_id      UInt32,
    bucket          DateTime('UTC'),
    service         LowCardinality(String),
    server_service  LowCardinality(String),
    model           LowCardinality(String),
    provider        LowCardinality(String),
    {{rollupColumns}}
)
ENGINE = {{engine "llm_request_rollup_5m" "AggregatingMergeTree"}}
PARTITION BY toDate(bucket)
ORDER BY (project_id, bucket, service, server_service, model, provider)
TTL bucket + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_request_rollup_5m" "cityHash64(service)"}}
CREATE TABLE IF NOT EXISTS {{table "llm_request_rollup_1h"}} {{onCluster}}
(
    project_id      UInt32,
    hour            DateTime('UTC'),
    service         LowCardinality(String),
    server_service  LowCardinality(String),
    model           LowCardinality(String),
    provider        LowCardinality(String),
    {{rollupColumns}}
)
ENGINE = {{engine "llm_request_rollup_1h" "AggregatingMergeTree"}}
PARTITION BY toYYYYMM(hour)
ORDER BY (project_id, hour, service, server_service, model, provider)
TTL hour + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_request_rollup_1h" "cityHash64(service)"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_request_rollup_1h_mv"}} {{onCluster}} TO {{table "llm_request_rollup_1h"}} AS
SELECT project_id, toStartOfHour(bucket) AS hour, service, server_service, model, provider, {{rollupMerge}}
FROM {{table "llm_request_rollup_5m"}} GROUP BY project_id, hour, service, server_service, model, provider;
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_request_rollup_5m_mv"}} {{onCluster}} TO {{table "llm_request_rollup_5m"}} AS
SELECT project_id, toStartOfFiveMinutes(start) AS bucket, service, server_service, model, provider, {{rollupFromRequests}}
FROM {{table "llm_requests"}} GROUP BY project_id, bucket, service, server_service, model, provider;
TRUNCATE TABLE IF EXISTS {{table "llm_request_rollup_5m"}} {{onCluster}};
TRUNCATE TABLE IF EXISTS {{table "llm_request_rollup_1h"}} {{onCluster}};
INSERT INTO llm_request_rollup_5m SELECT project_id, toStartOfFiveMinutes(start) AS bucket, service, server_service, model, provider,
    {{rollupFromRequests}}
FROM llm_requests FINAL GROUP BY project_id, bucket, service, server_service, model, provider;
