-- One row per decomposed LLM call: the unit every page reads. The assembler
-- rewrites a trace's rows with a higher version when late spans arrive and
-- marks rows that no longer exist with is_deleted; readers use FINAL.
CREATE TABLE IF NOT EXISTS {{table "llm_requests"}} {{onCluster}}
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
    is_deleted          UInt8 DEFAULT 0,
    INDEX idx_trace trace_id TYPE bloom_filter(0.01) GRANULARITY 4
)
ENGINE = {{engine "llm_requests" "ReplacingMergeTree(version, is_deleted)"}}
PARTITION BY toDate(start)
ORDER BY (project_id, service, start, trace_id, span_id)
TTL toDateTime(start) + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_requests" "cityHash64(trace_id)"}}
