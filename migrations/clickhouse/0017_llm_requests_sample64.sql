-- A fixed 1/64 of llm_requests (cityHash64(trace_id, span_id) % 4096 < 64),
-- between the two levels of llm_requests_sample (1/256 and 1/16). A window
-- that keeps between 16 and 64 of every 4096 hash values (an incident's 15
-- minutes of 3M requests, 24 hours of 10M) read the 1/16 sample, four times
-- the rows it keeps; here it reads a quarter of that. A table of its own
-- rather than a third sample_level: the level is part of the sample's
-- sorting key, so relevelling its rows would stop a request's versions
-- stored before and after from replacing each other under FINAL.
-- A materialized view fills it on every insert into llm_requests; the
-- INSERT below copies its share of the 1/16 sample (every version and
-- tombstone of those requests). A row the view also wrote meanwhile has
-- the same key and version, and FINAL keeps one.
CREATE TABLE IF NOT EXISTS {{table "llm_requests_sample64"}} {{onCluster}}
(
    project_id          UInt32,
    trace_id            String CODEC(ZSTD(1)),
    span_id             String CODEC(ZSTD(1)),
    service             LowCardinality(String),
    server_service      LowCardinality(String),
    model               LowCardinality(String),
    provider            LowCardinality(String),
    instance            LowCardinality(String),
    start               DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    ttft_ms             Nullable(Float64),
    pre_inference_ms    Nullable(Float64),
    queue_ms            Nullable(Float64),
    prefill_ms          Nullable(Float64),
    network_ms          Nullable(Float64),
    decode_ms           Nullable(Float64),
    e2e_ms              Nullable(Float64),
    itl_ms              Nullable(Float64),
    cold_start_wait_ms  Nullable(Float64),
    input_tokens        Nullable(Int64),
    output_tokens       Nullable(Int64),
    cold_start          UInt8,
    error               UInt8,
    call_index          UInt16,
    route               LowCardinality(String),
    tenant              String CODEC(ZSTD(1)),
    version             UInt64,
    is_deleted          UInt8 DEFAULT 0
)
ENGINE = {{engine "llm_requests_sample64" "ReplacingMergeTree(version, is_deleted)"}}
PARTITION BY toDate(start)
ORDER BY (project_id, service, start, trace_id, span_id)
TTL toDateTime(start) + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_requests_sample64" "cityHash64(trace_id)"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_requests_sample64_mv"}} {{onCluster}} TO {{table "llm_requests_sample64"}} AS
SELECT project_id, trace_id, span_id, service, server_service, model, provider, instance, start, ttft_ms, pre_inference_ms,
    queue_ms, prefill_ms, network_ms, decode_ms, e2e_ms, itl_ms, cold_start_wait_ms, input_tokens, output_tokens, cold_start,
    error, call_index, route, tenant, version, is_deleted
FROM {{table "llm_requests"}} WHERE cityHash64(trace_id, span_id) % 4096 < 64;
INSERT INTO llm_requests_sample64 SELECT project_id, trace_id, span_id, service, server_service, model, provider, instance, start,
    ttft_ms, pre_inference_ms, queue_ms, prefill_ms, network_ms, decode_ms, e2e_ms, itl_ms, cold_start_wait_ms, input_tokens,
    output_tokens, cold_start, error, call_index, route, tenant, version, is_deleted
FROM llm_requests_sample WHERE cityHash64(trace_id, span_id) % 4096 < 64;
