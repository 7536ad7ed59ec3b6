-- How each request's client call and server span were paired: by trace
-- context ('trace'), or across traces by id ('id') or by a unique match
-- ('match'); '' when the request has one side only. server_trace_id and
-- server_span_id name the server span a cross-trace pairing took, so the
-- request page can show it and a later pass keeps a match it already
-- counted (analysis/assembler_join.go). Rows stored before this migration
-- read 'trace' where they hold both sides. The samples, rollups and
-- llm_request_top keep their columns: these are read from llm_requests.
ALTER TABLE {{table "llm_requests"}} {{onCluster}}
    ADD COLUMN IF NOT EXISTS join_method LowCardinality(String) DEFAULT if(server_service != '' AND service != server_service, 'trace', ''),
    ADD COLUMN IF NOT EXISTS server_trace_id String DEFAULT '' CODEC(ZSTD(1)),
    ADD COLUMN IF NOT EXISTS server_span_id String DEFAULT '' CODEC(ZSTD(1));
{{if .Cluster}}ALTER TABLE llm_requests {{onCluster}}
    ADD COLUMN IF NOT EXISTS join_method LowCardinality(String) DEFAULT if(server_service != '' AND service != server_service, 'trace', ''),
    ADD COLUMN IF NOT EXISTS server_trace_id String DEFAULT '' CODEC(ZSTD(1)),
    ADD COLUMN IF NOT EXISTS server_span_id String DEFAULT '' CODEC(ZSTD(1));{{end}}
