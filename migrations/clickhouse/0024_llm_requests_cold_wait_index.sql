-- The requests list sorts by the cold-start wait too: like the other sort
-- columns without a projection (migration 0010) it gets a minmax index, so
-- a long window's top rows skip the granules holding no request held past
-- the bound (analysis.topRequests). Parts written before it get the index
-- by a background mutation; until then they are read in full.
ALTER TABLE {{table "llm_requests"}} {{onCluster}}
    ADD INDEX IF NOT EXISTS idx_cold_start_wait_ms cold_start_wait_ms TYPE minmax GRANULARITY 1;
ALTER TABLE {{table "llm_requests"}} {{onCluster}} MATERIALIZE INDEX idx_cold_start_wait_ms;
