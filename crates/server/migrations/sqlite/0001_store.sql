-- knox-server schema v1 (SQLite dialect; postgres/0001_store.sql is the same schema).
-- Content-addressed objects: bundles, journals, receipts, as submitted, never modified.
CREATE TABLE objects (
    digest      TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('bundle', 'journal', 'receipt', 'unreadable')),
    bytes       BLOB NOT NULL,
    size        BIGINT NOT NULL,
    stored_at   BIGINT NOT NULL
);
-- Providers and regulators, identified by H("knox/key", public key).
CREATE TABLE principals (
    key_id      TEXT PRIMARY KEY,
    public_key  TEXT NOT NULL UNIQUE,
    role        TEXT NOT NULL CHECK (role IN ('provider', 'regulator')),
    name        TEXT NOT NULL UNIQUE
);
CREATE TABLE assignments (
    regulator   TEXT NOT NULL REFERENCES principals (key_id),
    provider    TEXT NOT NULL REFERENCES principals (key_id),
    PRIMARY KEY (regulator, provider)
);
-- One row per submitted bundle or journal, with the verifier's findings at ingest.
CREATE TABLE runs (
    digest          TEXT PRIMARY KEY REFERENCES objects (digest),
    provider        TEXT NOT NULL REFERENCES principals (key_id),
    run_id          TEXT NOT NULL,
    kind            TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    offending_node  BIGINT,
    reason          TEXT,
    platform        TEXT NOT NULL,
    hardware_backed BIGINT NOT NULL,
    nodes           BIGINT NOT NULL,
    tool_calls      BIGINT NOT NULL,
    executed        BIGINT NOT NULL,
    blocked         BIGINT NOT NULL,
    interrupts      BIGINT NOT NULL,
    flagged         BIGINT NOT NULL,
    structure_root  TEXT,
    report          TEXT NOT NULL,
    log_index       BIGINT NOT NULL UNIQUE,
    submitted_at    BIGINT NOT NULL
);
CREATE INDEX runs_by_provider ON runs (provider, submitted_at);
CREATE INDEX runs_by_outcome ON runs (outcome);
CREATE INDEX runs_by_run_id ON runs (run_id);
CREATE TABLE blocked_actions (
    digest  TEXT NOT NULL REFERENCES runs (digest),
    node    BIGINT NOT NULL,
    agent   TEXT NOT NULL,
    tool    TEXT,
    guard   TEXT NOT NULL,
    reason  TEXT NOT NULL,
    PRIMARY KEY (digest, node)
);
CREATE INDEX blocked_by_tool ON blocked_actions (tool);
CREATE INDEX blocked_by_guard ON blocked_actions (guard);
CREATE TABLE regulation_decisions (
    digest      TEXT NOT NULL REFERENCES runs (digest),
    node        BIGINT NOT NULL,
    ordinal     BIGINT NOT NULL,
    regulation  TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    verdict     TEXT NOT NULL,
    policies    TEXT NOT NULL,
    provisions  TEXT NOT NULL,
    PRIMARY KEY (digest, node, ordinal)
);
CREATE INDEX decisions_by_verdict ON regulation_decisions (verdict);
CREATE TABLE run_models (
    digest  TEXT NOT NULL REFERENCES runs (digest),
    ordinal BIGINT NOT NULL,
    model   TEXT NOT NULL,
    PRIMARY KEY (digest, ordinal)
);
CREATE TABLE receipts (
    digest          TEXT PRIMARY KEY REFERENCES objects (digest),
    run             TEXT NOT NULL REFERENCES runs (digest),
    regulator       TEXT NOT NULL REFERENCES principals (key_id),
    outcome         TEXT NOT NULL,
    tree_size       BIGINT NOT NULL,
    stored_at       BIGINT NOT NULL
);
-- The transparency log: leaf i is SHA-256(0x00 || digest of the i-th submission).
CREATE TABLE log_leaves (
    idx         BIGINT PRIMARY KEY,
    digest      TEXT NOT NULL UNIQUE,
    leaf_hash   TEXT NOT NULL,
    appended_at BIGINT NOT NULL
);
-- Every tree head the log signed; one per size, so the log never signs two roots for one size.
CREATE TABLE tree_heads (
    tree_size   BIGINT PRIMARY KEY,
    head        TEXT NOT NULL
);
CREATE TABLE nonces (
    key_id  TEXT NOT NULL,
    nonce   TEXT NOT NULL,
    seen_at BIGINT NOT NULL,
    PRIMARY KEY (key_id, nonce)
);
CREATE INDEX nonces_by_time ON nonces (seen_at);
CREATE TABLE sessions (
    token_hash  TEXT PRIMARY KEY,
    key_id      TEXT NOT NULL REFERENCES principals (key_id),
    expires_at  BIGINT NOT NULL
);
-- Every access, allowed or refused.
CREATE TABLE access_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          BIGINT NOT NULL,
    principal   TEXT,
    method      TEXT NOT NULL,
    target      TEXT NOT NULL,
    decision    TEXT NOT NULL CHECK (decision IN ('allowed', 'refused')),
    reason      TEXT NOT NULL
);
-- Append-only: evidence, the log, its heads and the access log are never changed.
CREATE TRIGGER objects_no_update BEFORE UPDATE ON objects BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER objects_no_delete BEFORE DELETE ON objects BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER runs_no_update BEFORE UPDATE ON runs BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER log_leaves_no_update BEFORE UPDATE ON log_leaves BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER log_leaves_no_delete BEFORE DELETE ON log_leaves BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER tree_heads_no_update BEFORE UPDATE ON tree_heads BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER tree_heads_no_delete BEFORE DELETE ON tree_heads BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER access_log_no_update BEFORE UPDATE ON access_log BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER access_log_no_delete BEFORE DELETE ON access_log BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER receipts_no_update BEFORE UPDATE ON receipts BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER receipts_no_delete BEFORE DELETE ON receipts BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
