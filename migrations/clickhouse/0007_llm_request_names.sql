-- Which services, inference services, models and instances had LLM
-- requests in each hour, with a rough count (row versions included) and the
-- last start: the pickers on every page and the overview's plan (busy names
-- from the stored sample, quiet ones exactly) read it instead of scanning
-- llm_requests. A materialized view fills it on every insert into
-- llm_requests; the INSERT below counts what existed.
CREATE TABLE IF NOT EXISTS {{table "llm_request_names"}} {{onCluster}}
(
    project_id      UInt32,
    hour            DateTime('UTC'),
    service         LowCardinality(String),
    server_service  LowCardinality(String),
    model           LowCardinality(String),
    instance        LowCardinality(String),
    rows            UInt64,
    last_start      SimpleAggregateFunction(max, DateTime64(9, 'UTC'))
)
ENGINE = {{engine "llm_request_names" "SummingMergeTree"}}
PARTITION BY toDate(hour)
ORDER BY (project_id, hour, service, server_service, model, instance)
TTL hour + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_request_names" "cityHash64(service)"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_request_names_mv"}} {{onCluster}} TO {{table "llm_request_names"}} AS
SELECT project_id, toStartOfHour(start) AS hour, service, server_service, model, instance, count() AS rows, max(start) AS last_start
FROM {{table "llm_requests"}} WHERE is_deleted = 0 GROUP BY project_id, hour, service, server_service, model, instance;
INSERT INTO llm_request_names SELECT project_id, toStartOfHour(start) AS hour, service, server_service, model, instance, count() AS rows,
    max(start) AS last_start
FROM llm_requests WHERE is_deleted = 0 GROUP BY project_id, hour, service, server_service, model, instance;
