-- 0007_episode_silence_alerts: an episode whose service went silent keeps
-- the first minute without a request (the page says "no traffic since"
-- instead of "resolved"), and every alert posted when an episode started.
-- The detector rewrites episodes as late data moves their starts, so the
-- alerts live apart from them: one per service per 30 minutes, across
-- rewrites, restarts and nodes; failed posts are kept with their error.
ALTER TABLE episodes ADD COLUMN silent_since timestamptz;
CREATE TABLE episode_alerts (
    id            bigserial        PRIMARY KEY,
    project_id    bigint           NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    service       text             NOT NULL,
    episode_start timestamptz      NOT NULL,
    fired_at      timestamptz      NOT NULL DEFAULT now(),
    verdict       text             NOT NULL DEFAULT '',
    summary       text             NOT NULL DEFAULT '',
    share_url     text             NOT NULL DEFAULT '',
    delivered     boolean          NOT NULL DEFAULT false,
    error         text             NOT NULL DEFAULT ''
);
CREATE INDEX episode_alerts_service_idx ON episode_alerts (project_id, service, fired_at DESC);
