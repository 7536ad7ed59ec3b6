-- The class of error a model call ended with, as its span names it
-- (error.type, else an HTTP status of 400 or more: "429", "RateLimitError",
-- "timeout"), typed on spans so the assembler reads it without the
-- attribute map, and on llm_requests so a diagnosis can break its errors
-- down into rate limits, server errors and timeouts (verdict "errors").
-- The samples, rollups and llm_request_top keep their columns: the
-- breakdown is read from llm_requests. Parts stored before this migration
-- read ''.
ALTER TABLE {{table "spans"}} {{onCluster}} ADD COLUMN IF NOT EXISTS error_type LowCardinality(String) DEFAULT '';
{{if .Cluster}}ALTER TABLE spans {{onCluster}} ADD COLUMN IF NOT EXISTS error_type LowCardinality(String) DEFAULT '';{{end}}
ALTER TABLE {{table "llm_requests"}} {{onCluster}} ADD COLUMN IF NOT EXISTS error_type LowCardinality(String) DEFAULT '';
{{if .Cluster}}ALTER TABLE llm_requests {{onCluster}} ADD COLUMN IF NOT EXISTS error_type LowCardinality(String) DEFAULT '';{{end}}
