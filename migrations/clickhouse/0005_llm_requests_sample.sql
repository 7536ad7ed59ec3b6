-- A fixed 1/16 of llm_requests, chosen by cityHash64(trace_id, span_id) %
-- 4096 < 256, for diagnoses of long windows. A uniform sample scattered
-- through llm_requests saves no reading (every granule still holds some
-- sampled rows); here the sample is stored apart, and its first 1/256
-- (hash < 16, sample_level 0) sorts first in each partition, so a 7-day
-- window of 10M requests reads ~40k rows instead of 10M. Every version of a
-- request hashes alike, so FINAL keeps its meaning. A materialized view fills
-- it on every insert into llm_requests; the INSERT below copies what existed.
CREATE TABLE IF NOT EXISTS {{table "llm_requests_sample"}} {{onCluster}}
(
    project_id          UInt32,
    sample_level        UInt8,
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
ENGINE = {{engine "llm_requests_sample" "ReplacingMergeTree(version, is_deleted)"}}
PARTITION BY toDate(start)
ORDER BY (project_id, sample_level, service, start, trace_id, span_id)
TTL toDateTime(start) + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_requests_sample" "cityHash64(trace_id)"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_requests_sample_mv"}} {{onCluster}} TO {{table "llm_requests_sample"}} AS
SELECT project_id, toUInt8(cityHash64(trace_id, span_id) % 4096 >= 16) AS sample_level, trace_id, span_id, service, server_service,
    model, provider, instance, start, ttft_ms, pre_inference_ms, queue_ms, prefill_ms, network_ms, decode_ms, e2e_ms, itl_ms,
    cold_start_wait_ms, input_tokens, output_tokens, cold_start, error, call_index, route, tenant, version, is_deleted
FROM {{table "llm_requests"}} WHERE cityHash64(trace_id, span_id) % 4096 < 256;
INSERT INTO llm_requests_sample SELECT project_id, toUInt8(cityHash64(trace_id, span_id) % 4096 >= 16) AS sample_level, trace_id, span_id,
    service, server_service, model, provider, instance, start, ttft_ms, pre_inference_ms, queue_ms, prefill_ms, network_ms, decode_ms,
    e2e_ms, itl_ms, cold_start_wait_ms, input_tokens, output_tokens, cold_start, error, call_index, route, tenant, version, is_deleted
FROM llm_requests WHERE cityHash64(trace_id, span_id) % 4096 < 256;
