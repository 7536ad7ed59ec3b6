-- The first and last span start of every trace: the assembler looks up the
-- traces that received spans and bounds its reads of spans and
-- llm_requests by their starts, so partition and primary-key pruning apply
-- and those reads cost what the traffic costs, not what retention holds.
-- A materialized view fills it on every insert into spans; min and max are
-- idempotent, so a retried export or a replayed write-ahead log changes
-- nothing. The INSERT below (after the view exists, so no span falls
-- between the two) covers the spans stored before.
--
-- No partition: a table cannot be partitioned by an aggregate, and a plain
-- day column would keep one row per trace and day in as many partitions,
-- each of which a lookup of 2000 random trace ids searches in full. Small
-- granules keep such a lookup to the granules holding the ids. The TTL is
-- on last_start, the trace's latest span: a row expires only once every
-- span it summarizes is past retention, never before them (expired rows
-- go in TTL merges; the table is ~30 bytes a trace).
CREATE TABLE IF NOT EXISTS {{table "trace_bounds"}} {{onCluster}}
(
    project_id   UInt32,
    trace_id     String CODEC(ZSTD(1)),
    first_start  SimpleAggregateFunction(min, DateTime64(9, 'UTC')),
    last_start   SimpleAggregateFunction(max, DateTime64(9, 'UTC'))
)
ENGINE = {{engine "trace_bounds" "AggregatingMergeTree"}}
ORDER BY (project_id, trace_id)
TTL toDateTime(last_start) + INTERVAL {{.RetentionDays}} DAY
SETTINGS index_granularity = 256;
{{distributed "trace_bounds" "cityHash64(trace_id)"}}
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "trace_bounds_mv"}} {{onCluster}} TO {{table "trace_bounds"}} AS
SELECT project_id, trace_id, min(start) AS first_start, max(start) AS last_start
FROM {{table "spans"}} GROUP BY project_id, trace_id;
INSERT INTO trace_bounds SELECT project_id, trace_id, min(start) AS first_start, max(start) AS last_start
FROM spans GROUP BY project_id, trace_id;
