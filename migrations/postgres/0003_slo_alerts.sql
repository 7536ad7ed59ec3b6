-- 0003_slo_alerts: every SLO alert the evaluator fired. It de-duplicates
-- posts (one per SLO per 30 minutes, across restarts and nodes) and is the
-- violation history the SLO page lists. Failed deliveries are kept too, so
-- the page can say why a webhook stayed silent; a failed post is retried
-- every minute on the same row, with the same frozen diagnosis.
CREATE TABLE slo_alerts (
    id           bigserial        PRIMARY KEY,
    project_id   bigint           NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    slo_id       bigint           NOT NULL REFERENCES slos (id) ON DELETE CASCADE,
    fired_at     timestamptz      NOT NULL DEFAULT now(),
    -- Fraction of bad requests over the error budget, in the long (1 h)
    -- and short (5 min) windows of the multiwindow rule.
    burn_long    double precision NOT NULL,
    burn_short   double precision NOT NULL,
    verdict      text             NOT NULL DEFAULT '',
    confidence   double precision NOT NULL DEFAULT 0,
    summary      text             NOT NULL DEFAULT '',
    share_url    text             NOT NULL DEFAULT '',
    delivered    boolean          NOT NULL DEFAULT false,
    error        text             NOT NULL DEFAULT ''
);
-- The de-duplication check reads the latest delivered alert of one SLO.
CREATE INDEX slo_alerts_slo_idx ON slo_alerts (slo_id, fired_at DESC);
CREATE INDEX slo_alerts_project_idx ON slo_alerts (project_id, fired_at DESC);
