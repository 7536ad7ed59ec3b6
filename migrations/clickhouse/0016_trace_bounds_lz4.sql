-- trace_bounds.trace_id in LZ4 instead of ZSTD(1). Each assembler pass
-- looks up thousands of random trace ids, which touch most of the table's
-- compressed blocks, and decompressing them was most of the lookup's cost.
-- A probe (3M traces, one part, one thread): 2000 ids 200 → 130 ms,
-- 10k ids 310 → 220 ms, 50k ids 500 → 380 ms; the table grows from 89 to
-- 125 MiB (~12 bytes a trace, ~3 a span). No codec (105 / 186 / 333 ms,
-- 158 MiB) buys a little more for twice that. Parts written before keep
-- ZSTD until they are merged.
ALTER TABLE {{table "trace_bounds"}} {{onCluster}} MODIFY COLUMN trace_id String CODEC(LZ4);
