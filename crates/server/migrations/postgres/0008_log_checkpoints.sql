-- knox-server schema v8 (PostgreSQL dialect): the log as C2SP checkpoints. The log's
-- origin (the first line of every checkpoint and the name of its key), one row written
-- by the first server to open the store; replicas must bring the same. And the
-- witnesses' cosignatures of the checkpoints the log signed, one line per witness key
-- and size, served with the checkpoint of that size. Both append-only.
CREATE TABLE log_origin (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    origin      TEXT NOT NULL
);
CREATE TRIGGER log_origin_append_only BEFORE UPDATE OR DELETE ON log_origin FOR EACH ROW EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER log_origin_no_truncate BEFORE TRUNCATE ON log_origin FOR EACH STATEMENT EXECUTE FUNCTION knox_append_only();
CREATE TABLE cosignatures (
    tree_size   BIGINT NOT NULL,
    witness     TEXT NOT NULL,
    line        TEXT NOT NULL,
    cosigned_at BIGINT NOT NULL,
    PRIMARY KEY (tree_size, witness)
);
CREATE TRIGGER cosignatures_append_only BEFORE UPDATE OR DELETE ON cosignatures FOR EACH ROW EXECUTE FUNCTION knox_append_only();
CREATE TRIGGER cosignatures_no_truncate BEFORE TRUNCATE ON cosignatures FOR EACH STATEMENT EXECUTE FUNCTION knox_append_only();
