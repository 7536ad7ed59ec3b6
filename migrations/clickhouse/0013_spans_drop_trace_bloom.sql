-- spans loses its bloom filter on trace_id. Every read of spans by trace
-- id is now bounded by the trace's starts from trace_bounds (the assembler
-- since 0009, the trace page since this migration), so the primary key
-- prunes those reads to the trace's seconds; the filter could not skip a
-- granule block for the assembler's thousands of ids anyway (1 % false
-- positives each). Hashing every span's id into it cost ~1 µs per span on
-- insert and again on every merge (bench ingest: ~15 % of the engine's
-- insert CPU).
ALTER TABLE {{table "spans"}} {{onCluster}} DROP INDEX IF EXISTS idx_trace;
