-- knox-server schema v2 (SQLite dialect): live runs streamed from a running monitor.
-- A live run is one provider's run id; the first header delivered names it.
CREATE TABLE live_runs (
    live_id     TEXT PRIMARY KEY,
    provider    TEXT NOT NULL REFERENCES principals (key_id),
    run_id      TEXT NOT NULL,
    header      BLOB NOT NULL,
    started_at  BIGINT NOT NULL,
    UNIQUE (provider, run_id)
);
-- Each node line as first delivered: a later, different line for the same node is a
-- conflict, kept beside it, never a replacement.
CREATE TABLE live_nodes (
    live_id     TEXT NOT NULL REFERENCES live_runs (live_id),
    seq         BIGINT NOT NULL,
    line        BLOB NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (live_id, seq)
);
-- Deliveries that contradict what was stored first (seq NULL: the header).
CREATE TABLE live_conflicts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    live_id     TEXT NOT NULL REFERENCES live_runs (live_id),
    seq         BIGINT,
    line        BLOB NOT NULL,
    received_at BIGINT NOT NULL
);
-- What verifying the stored lines last said: derived from the tables above, rewritten
-- after each delivery (the only table of the store that is updated).
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
CREATE TRIGGER live_runs_no_update BEFORE UPDATE ON live_runs BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER live_runs_no_delete BEFORE DELETE ON live_runs BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER live_nodes_no_update BEFORE UPDATE ON live_nodes BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER live_nodes_no_delete BEFORE DELETE ON live_nodes BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER live_conflicts_no_update BEFORE UPDATE ON live_conflicts BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER live_conflicts_no_delete BEFORE DELETE ON live_conflicts BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
