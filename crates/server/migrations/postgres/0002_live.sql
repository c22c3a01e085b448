-- knox-server schema v2 (PostgreSQL dialect; sqlite/0002_live.sql is the same schema).
CREATE TABLE live_runs (
    live_id     TEXT PRIMARY KEY,
    provider    TEXT NOT NULL REFERENCES principals (key_id),
    run_id      TEXT NOT NULL,
    header      BYTEA NOT NULL,
    started_at  BIGINT NOT NULL,
    UNIQUE (provider, run_id)
);
CREATE TABLE live_nodes (
    live_id     TEXT NOT NULL REFERENCES live_runs (live_id),
    seq         BIGINT NOT NULL,
    line        BYTEA NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (live_id, seq)
);
CREATE TABLE live_conflicts (
    id          BIGSERIAL PRIMARY KEY,
    live_id     TEXT NOT NULL REFERENCES live_runs (live_id),
    seq         BIGINT,
    line        BYTEA NOT NULL,
    received_at BIGINT NOT NULL
);
CREATE TABLE live_state (
    live_id         TEXT PRIMARY KEY REFERENCES live_runs (live_id),
    outcome         TEXT NOT NULL,
    verified        BIGINT NOT NULL,
    received        BIGINT NOT NULL,
    conflicts       BIGINT NOT NULL,
    offending_node  BIGINT,
    reason          TEXT,
    bundle          TEXT,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX live_runs_by_provider ON live_runs (provider, started_at);
CREATE TRIGGER live_runs_append_only BEFORE UPDATE OR DELETE ON live_runs FOR EACH ROW EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER live_runs_no_truncate BEFORE TRUNCATE ON live_runs FOR EACH STATEMENT EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER live_nodes_append_only BEFORE UPDATE OR DELETE ON live_nodes FOR EACH ROW EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER live_nodes_no_truncate BEFORE TRUNCATE ON live_nodes FOR EACH STATEMENT EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER live_conflicts_append_only BEFORE UPDATE OR DELETE ON live_conflicts FOR EACH ROW EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER live_conflicts_no_truncate BEFORE TRUNCATE ON live_conflicts FOR EACH STATEMENT EXECUTE FUNCTION knox_append_only();
