-- Browser sessions: a login with an API key gets a random session id in an
-- HttpOnly cookie; only its SHA-256 is stored. Revoking the key ends them.
CREATE TABLE sessions (
    id_hash     bytea       PRIMARY KEY,
    project_id  bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    api_key_id  bigint      NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);
