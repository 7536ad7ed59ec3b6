-- Requests per minute per (service, server_service, model, provider):
-- counts, and log-scale histograms (5 % wide) of TTFT and ITL only. The
-- episode detector (analysis/episode) reads a day of these per pass, a few
-- thousand rows, where the 5-minute rollups would place an episode's start
-- within 5 minutes. Signed like the other rollups (store/clickhouse/rollup.go):
-- a replaced request version is retracted in the same insert.
--
-- What existed is copied at the end, the last two days only (the detector
-- looks back a day); the table is emptied first so a migration interrupted
-- after the copy and run again does not count it twice.
CREATE TABLE IF NOT EXISTS {{table "llm_request_rollup_1m"}} {{onCluster}}
(
    project_id      UInt32,
    minute          DateTime('UTC'),
    service         LowCardinality(String),
    server_service  LowCardinality(String),
    model           LowCardinality(String),
    provider        LowCardinality(String),
    {{episodeRollupColumns}}
)
ENGINE = {{engine "llm_request_rollup_1m" "AggregatingMergeTree"}}
PARTITION BY toDate(minute)
ORDER BY (project_id, minute, service, server_service, model, provider)
TTL minute + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_request_rollup_1m" "cityHash64(service)"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_request_rollup_1m_mv"}} {{onCluster}} TO {{table "llm_request_rollup_1m"}} AS
SELECT project_id, toStartOfMinute(start) AS minute, service, server_service, model, provider, {{episodeRollupFromRequests}}
FROM {{table "llm_requests"}} GROUP BY project_id, minute, service, server_service, model, provider;
TRUNCATE TABLE IF EXISTS {{table "llm_request_rollup_1m"}} {{onCluster}};
INSERT INTO llm_request_rollup_1m SELECT project_id, toStartOfMinute(start) AS minute, service, server_service, model, provider,
    {{episodeRollupFromRequests}}
FROM llm_requests FINAL WHERE start >= now() - INTERVAL 2 DAY GROUP BY project_id, minute, service, server_service, model, provider;
