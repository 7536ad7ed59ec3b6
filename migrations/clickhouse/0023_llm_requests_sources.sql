-- Where a request's figures came from. ttft_source: the client wire key the
-- TTFT was read from (an attribute such as
-- gen_ai.response.time_to_first_chunk, or event:<name> for a chunk event),
-- 'server' when it is the server span's TTFT, '' when there is none.
-- token_source: 'server', 'client' or 'mixed' (one count from each), ''
-- without counts. preemptions: how often the server paused the request
-- (vLLM journey events). Rows stored before this migration read
-- 'unrecorded' where they hold a figure. The samples, rollups and
-- llm_request_top keep their columns: these are read from llm_requests.
ALTER TABLE {{table "llm_requests"}} {{onCluster}}
    ADD COLUMN IF NOT EXISTS ttft_source LowCardinality(String) DEFAULT if(ttft_ms IS NULL, '', 'unrecorded'),
    ADD COLUMN IF NOT EXISTS token_source LowCardinality(String) DEFAULT if(input_tokens IS NULL AND output_tokens IS NULL, '', 'unrecorded'),
    ADD COLUMN IF NOT EXISTS preemptions Nullable(Int64);
{{if .Cluster}}ALTER TABLE llm_requests {{onCluster}}
    ADD COLUMN IF NOT EXISTS ttft_source LowCardinality(String) DEFAULT if(ttft_ms IS NULL, '', 'unrecorded'),
    ADD COLUMN IF NOT EXISTS token_source LowCardinality(String) DEFAULT if(input_tokens IS NULL AND output_tokens IS NULL, '', 'unrecorded'),
    ADD COLUMN IF NOT EXISTS preemptions Nullable(Int64);{{end}}
