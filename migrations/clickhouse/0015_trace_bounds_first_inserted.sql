-- When each trace's first span was stored (its spans' earliest
-- inserted_at). A trace whose first span arrived after the assembler's
-- watermark has every span in the inserts since, so a pass reads those
-- traces' spans from the new inserts (idx_inserted prunes the rest)
-- instead of every span that started in the traces' window: in bench
-- ingest that read was 40 % of the assembler's time, the window holding
-- several times the pass's spans. Rows stored before this migration take
-- the epoch, older than any watermark: their traces are read the long way,
-- as before. The view's query changes in place (MODIFY QUERY), so no
-- insert into spans can fall between an old and a new view.
ALTER TABLE {{table "trace_bounds"}} {{onCluster}} ADD COLUMN IF NOT EXISTS first_inserted SimpleAggregateFunction(min, DateTime64(9, 'UTC')) DEFAULT toDateTime64(0, 9, 'UTC');
{{if .Cluster}}ALTER TABLE trace_bounds {{onCluster}} ADD COLUMN IF NOT EXISTS first_inserted SimpleAggregateFunction(min, DateTime64(9, 'UTC')) DEFAULT toDateTime64(0, 9, 'UTC');{{end}}
ALTER TABLE {{table "trace_bounds_mv"}} {{onCluster}} MODIFY QUERY
SELECT project_id, trace_id, min(start) AS first_start, max(start) AS last_start, min(inserted_at) AS first_inserted
FROM {{table "spans"}} GROUP BY project_id, trace_id;
