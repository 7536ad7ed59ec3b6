-- 0005_episodes: incidents per service (calling app or inference server),
-- as the episode detector (analysis/episode) segments them from the
-- per-minute rollup. The detector rewrites the last day's episodes on every
-- pass, so late data moves a start or end; the diagnosis of an episode
-- (verdict, summary) is kept across rewrites until its end changes.
CREATE TABLE episodes (
    id               bigserial        PRIMARY KEY,
    project_id       bigint           NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    service          text             NOT NULL,
    started_at       timestamptz      NOT NULL,
    -- NULL while the episode is ongoing.
    ended_at         timestamptz,
    -- Comma-separated: ttft, itl, errors, objective.
    signals          text             NOT NULL,
    peak_at          timestamptz      NOT NULL,
    peak_ttft_ms     double precision NOT NULL,
    peak_error_rate  double precision NOT NULL,
    baseline_ttft_ms double precision NOT NULL DEFAULT 0,
    -- The clean stretch before the episode; NULL when there is none.
    baseline_from    timestamptz,
    baseline_to      timestamptz,
    verdict          text             NOT NULL DEFAULT '',
    confidence       double precision NOT NULL DEFAULT 0,
    summary          text             NOT NULL DEFAULT '',
    -- When the diagnosis ran, and the end it saw (NULL: ongoing then).
    diagnosed_at     timestamptz,
    diagnosed_end    timestamptz,
    UNIQUE (project_id, service, started_at)
);
CREATE INDEX episodes_project_start_idx ON episodes (project_id, started_at DESC);
