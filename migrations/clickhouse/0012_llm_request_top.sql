-- The slowest requests of every 6 hours by TTFT and by end-to-end latency,
-- whole rows: what a list sorted by either reads (analysis.topRequests)
-- instead of ~60 rows scattered through llm_requests, a compressed block of
-- every column each (7 days at 10M requests: ~210 → ~65 ms of CPU with the
-- check of their versions).
--
-- Each state keeps the first 128 rows of its 6 hours in the list's order
-- (column DESC NULLS LAST, start DESC): the key (-coalesce(column, -inf),
-- -start in ns), analysis's request columns, version and is_deleted. A
-- materialized view adds every row inserted into llm_requests, so the
-- states hold every row ever stored, row versions and tombstones included
-- (also those merges have since replaced); a row outside them ranks below
-- its 6 hours' 128th. The reader proves a page from them and checks the
-- versions in llm_requests. (A window's first and last 6 hours hold rows
-- outside it: longer spans would let those crowd out the window's own rows
-- too often.) The TTL counts from the end of the 6 hours, so the states
-- outlive the rows they hold.
CREATE TABLE IF NOT EXISTS {{table "llm_request_top"}} {{onCluster}}
(
    project_id  UInt32,
    bucket_end  DateTime('UTC'),
    ttft        AggregateFunction(groupArraySorted(128), Tuple(Float64, Int64, UInt32, String, String, LowCardinality(String),
        LowCardinality(String), LowCardinality(String), LowCardinality(String), LowCardinality(String), DateTime64(9, 'UTC'),
        Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64),
        Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Int64), Nullable(Int64), UInt8, UInt8, UInt16,
        LowCardinality(String), String, UInt64, UInt8)),
    e2e         AggregateFunction(groupArraySorted(128), Tuple(Float64, Int64, UInt32, String, String, LowCardinality(String),
        LowCardinality(String), LowCardinality(String), LowCardinality(String), LowCardinality(String), DateTime64(9, 'UTC'),
        Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64),
        Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Int64), Nullable(Int64), UInt8, UInt8, UInt16,
        LowCardinality(String), String, UInt64, UInt8))
)
ENGINE = {{engine "llm_request_top" "AggregatingMergeTree"}}
PARTITION BY toYYYYMM(bucket_end)
ORDER BY (project_id, bucket_end)
TTL bucket_end + INTERVAL {{.RetentionDays}} DAY;
{{distributed "llm_request_top" "project_id"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "llm_request_top_mv"}} {{onCluster}} TO {{table "llm_request_top"}} AS
SELECT project_id, toStartOfInterval(toDateTime(start), INTERVAL 6 HOUR) + INTERVAL 6 HOUR AS bucket_end,
    groupArraySortedState(128)((-ifNull(ttft_ms, -inf), -toUnixTimestamp64Nano(start), project_id, trace_id, span_id, service,
        server_service, model, provider, instance, start, ttft_ms, pre_inference_ms, queue_ms, prefill_ms, network_ms, decode_ms,
        e2e_ms, itl_ms, cold_start_wait_ms, input_tokens, output_tokens, cold_start, error, call_index, route, tenant, version,
        is_deleted)) AS ttft,
    groupArraySortedState(128)((-ifNull(e2e_ms, -inf), -toUnixTimestamp64Nano(start), project_id, trace_id, span_id, service,
        server_service, model, provider, instance, start, ttft_ms, pre_inference_ms, queue_ms, prefill_ms, network_ms, decode_ms,
        e2e_ms, itl_ms, cold_start_wait_ms, input_tokens, output_tokens, cold_start, error, call_index, route, tenant, version,
        is_deleted)) AS e2e
FROM {{table "llm_requests"}} GROUP BY project_id, bucket_end;
TRUNCATE TABLE IF EXISTS {{table "llm_request_top"}} {{onCluster}};
INSERT INTO llm_request_top SELECT project_id, toStartOfInterval(toDateTime(start), INTERVAL 6 HOUR) + INTERVAL 6 HOUR AS bucket_end,
    groupArraySortedState(128)((-ifNull(ttft_ms, -inf), -toUnixTimestamp64Nano(start), project_id, trace_id, span_id, service,
        server_service, model, provider, instance, start, ttft_ms, pre_inference_ms, queue_ms, prefill_ms, network_ms, decode_ms,
        e2e_ms, itl_ms, cold_start_wait_ms, input_tokens, output_tokens, cold_start, error, call_index, route, tenant, version,
        is_deleted)) AS ttft,
    groupArraySortedState(128)((-ifNull(e2e_ms, -inf), -toUnixTimestamp64Nano(start), project_id, trace_id, span_id, service,
        server_service, model, provider, instance, start, ttft_ms, pre_inference_ms, queue_ms, prefill_ms, network_ms, decode_ms,
        e2e_ms, itl_ms, cold_start_wait_ms, input_tokens, output_tokens, cold_start, error, call_index, route, tenant, version,
        is_deleted)) AS e2e
FROM llm_requests GROUP BY project_id, bucket_end;
