-- Lists sorted by a latency or token column over a long window ask for
-- their top rows with a bound taken from the stored sample
-- (analysis.topRequests) instead of reading the column of every request in
-- the window (7 days at 10M requests: ~350 ms).
--
-- TTFT and end-to-end latency, the sorts the pages link to, get a
-- projection ordered by the column, holding what identifies a request
-- (service, start: a prefix of the sorting key): the bound is then a
-- primary-key range of a granule or so per part (7 days at 10M: 1240
-- granules → 21). Each costs ~16 bytes a request (+16 % of llm_requests). A
-- ReplacingMergeTree keeps projections only when merges rebuild them from
-- the merged rows ('rebuild'), so they hold exactly the part's rows.
--
-- The other sort columns get a minmax index: the engine skips the granules
-- with no row past the bound, which helps less (the slowest rows of a week
-- are scattered: ~45 % of its granules hold one) but costs nothing.
--
-- Parts written before this migration get both by background mutations;
-- until then they are read in full, which is only slower.
ALTER TABLE {{table "llm_requests"}} {{onCluster}} MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild';
ALTER TABLE {{table "llm_requests"}} {{onCluster}}
    ADD PROJECTION IF NOT EXISTS p_ttft_ms (SELECT project_id, service, start, ttft_ms ORDER BY project_id, ttft_ms),
    ADD PROJECTION IF NOT EXISTS p_e2e_ms (SELECT project_id, service, start, e2e_ms ORDER BY project_id, e2e_ms),
    ADD INDEX IF NOT EXISTS idx_queue_ms queue_ms TYPE minmax GRANULARITY 1,
    ADD INDEX IF NOT EXISTS idx_prefill_ms prefill_ms TYPE minmax GRANULARITY 1,
    ADD INDEX IF NOT EXISTS idx_network_ms network_ms TYPE minmax GRANULARITY 1,
    ADD INDEX IF NOT EXISTS idx_decode_ms decode_ms TYPE minmax GRANULARITY 1,
    ADD INDEX IF NOT EXISTS idx_pre_inference_ms pre_inference_ms TYPE minmax GRANULARITY 1,
    ADD INDEX IF NOT EXISTS idx_itl_ms itl_ms TYPE minmax GRANULARITY 1,
    ADD INDEX IF NOT EXISTS idx_input_tokens input_tokens TYPE minmax GRANULARITY 1,
    ADD INDEX IF NOT EXISTS idx_output_tokens output_tokens TYPE minmax GRANULARITY 1;
ALTER TABLE {{table "llm_requests"}} {{onCluster}}
    MATERIALIZE PROJECTION p_ttft_ms, MATERIALIZE PROJECTION p_e2e_ms,
    MATERIALIZE INDEX idx_queue_ms, MATERIALIZE INDEX idx_prefill_ms, MATERIALIZE INDEX idx_network_ms,
    MATERIALIZE INDEX idx_decode_ms, MATERIALIZE INDEX idx_pre_inference_ms, MATERIALIZE INDEX idx_itl_ms,
    MATERIALIZE INDEX idx_input_tokens, MATERIALIZE INDEX idx_output_tokens;
