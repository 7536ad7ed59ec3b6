-- 0001_init: the small, relational, must-be-exact half of Tokenpath
-- (projects, API keys, share links, SLOs, scrape targets, annotations,
-- settings). Events live in ClickHouse. Every project-owned row goes away with
-- its project (ON DELETE CASCADE) so deleting a project needs one statement.

CREATE TABLE projects (
    id         bigserial   PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id           bigserial   PRIMARY KEY,
    project_id   bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name         text        NOT NULL DEFAULT '',
    -- First characters of the key, so a user can tell keys apart in the UI.
    prefix       text        NOT NULL,
    -- SHA-256 of the key. Generated keys carry 256 random bits, so a fast
    -- unsalted hash cannot be brute-forced, and it lets auth find the key by
    -- an index lookup instead of comparing secrets. The key itself is never
    -- stored.
    hash         bytea       NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_project_idx ON api_keys (project_id);

CREATE TABLE share_links (
    -- SHA-256 of the link token: the token lives only in the shared URL, so a
    -- database dump does not hand out readable links.
    token_hash bytea       PRIMARY KEY,
    project_id bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    path       text        NOT NULL,
    title      text        NOT NULL DEFAULT '',
    -- The page's data frozen at share time: the link keeps showing what the
    -- incident channel saw even after retention drops the events.
    snapshot   jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX share_links_project_idx ON share_links (project_id, created_at DESC);
-- Lets a retention job find expired links without scanning live ones.
CREATE INDEX share_links_expires_idx ON share_links (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE slos (
    id           bigserial        PRIMARY KEY,
    project_id   bigint           NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    service      text             NOT NULL,
    model        text             NOT NULL DEFAULT '', -- '' = every model of the service
    metric       text             NOT NULL CHECK (metric IN ('ttft', 'tpot', 'e2e')),
    -- In percent (99 = p99). The lower bound catches a fraction (0.99) stored
    -- by mistake; a latency SLO below the median is not meaningful.
    percentile   double precision NOT NULL CHECK (percentile >= 50 AND percentile < 100),
    threshold_ms double precision NOT NULL CHECK (threshold_ms > 0),
    -- Evaluation window as written by the user, e.g. '1h', '28d'. Named
    -- time_window because WINDOW is a reserved word in PostgreSQL.
    time_window  text             NOT NULL DEFAULT '28d',
    created_at   timestamptz      NOT NULL DEFAULT now()
);
CREATE INDEX slos_project_service_idx ON slos (project_id, service);

CREATE TABLE scrape_targets (
    id             bigserial   PRIMARY KEY,
    project_id     bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url            text        NOT NULL,
    interval_s     integer     NOT NULL DEFAULT 15 CHECK (interval_s > 0),
    -- Like Prometheus: a scrape must finish before the next one is due.
    timeout_s      integer     NOT NULL DEFAULT 10 CHECK (timeout_s > 0 AND timeout_s <= interval_s),
    service        text        NOT NULL DEFAULT '',
    labels         jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    last_scrape_at timestamptz,
    last_error     text        NOT NULL DEFAULT '',
    up             boolean     NOT NULL DEFAULT false,
    -- Scraping one endpoint twice would double every counter rate.
    UNIQUE (project_id, url)
);

CREATE TABLE annotations (
    id         bigserial   PRIMARY KEY,
    project_id bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    time       timestamptz NOT NULL,
    service    text        NOT NULL DEFAULT '', -- '' = applies to every service
    text       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- Pages ask for the annotations inside a time window.
CREATE INDEX annotations_project_time_idx ON annotations (project_id, time);

-- Per-project knobs that are documents rather than columns: the price table,
-- retention, and the like.
CREATE TABLE settings (
    project_id bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    key        text        NOT NULL,
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, key)
);

-- How far background trace assembly has got, so a restart (or another node
-- taking over the job) resumes instead of reprocessing or skipping spans.
CREATE TABLE assembly_watermarks (
    name       text        PRIMARY KEY,
    project_id bigint      REFERENCES projects (id) ON DELETE CASCADE, -- NULL = all projects
    watermark  bigint      NOT NULL, -- unix nanoseconds
    updated_at timestamptz NOT NULL DEFAULT now()
);
