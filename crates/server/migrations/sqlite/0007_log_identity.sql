-- knox-server schema v7 (SQLite dialect): the log's identity. One row, the public key
-- every head of this store's log is signed with, written by the first server to open
-- the store; replicas sharing the database refuse to serve with another key rather
-- than sign a second log over the same entries. Append-only.
CREATE TABLE log_identity (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    public_key  TEXT NOT NULL
);
CREATE TRIGGER log_identity_no_update BEFORE UPDATE ON log_identity BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER log_identity_no_delete BEFORE DELETE ON log_identity BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
