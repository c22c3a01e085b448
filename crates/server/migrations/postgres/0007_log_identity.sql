-- knox-server schema v7 (PostgreSQL dialect): the log's identity. One row, the public
-- key every head of this store's log is signed with, written by the first server to
-- open the store; replicas sharing the database refuse to serve with another key
-- rather than sign a second log over the same entries. Append-only.
CREATE TABLE log_identity (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    public_key  TEXT NOT NULL
);
CREATE TRIGGER log_identity_append_only BEFORE UPDATE OR DELETE ON log_identity FOR EACH ROW EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER log_identity_no_truncate BEFORE TRUNCATE ON log_identity FOR EACH STATEMENT EXECUTE FUNCTION knox_append_only();
