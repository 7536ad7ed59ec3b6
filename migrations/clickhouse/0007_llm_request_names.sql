-- Which services, inference services and models had LLM requests in each
-- hour, with a rough count (row versions included): the overview plans its
-- reads with it (busy names from the stored sample, quiet ones exactly)
-- without scanning llm_requests. A materialized view fills it on every
-- insert into llm_requests; the INSERT below counts what existed.
CREATE TABLE IF NOT EXISTS {{table "llm_request_names"}} {{onCluster}}
(
    project_id      UInt32,
    hour            DateTime('UTC'),
    service         LowCardinality(String),
    server_service  LowCardinality(String),
    model           LowCardinality(String),
    rows            UInt64
)
ENGINE = {{engine "llm_request_names" "SummingMergeTree(rows)"}}
PARTITION BY toDate(hour)
ORDER BY (project_id, hour, service, server_service, model)
TTL hour + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_request_names" "cityHash64(service)"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_request_names_mv"}} {{onCluster}} TO {{table "llm_request_names"}} AS
SELECT project_id, toStartOfHour(start) AS hour, service, server_service, model, count() AS rows
FROM {{table "llm_requests"}} GROUP BY project_id, hour, service, server_service, model;
INSERT INTO llm_request_names SELECT project_id, toStartOfHour(start) AS hour, service, server_service, model, count() AS rows
FROM llm_requests GROUP BY project_id, hour, service, server_service, model;
