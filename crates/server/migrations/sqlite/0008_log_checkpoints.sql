-- knox-server schema v8 (SQLite dialect): the log as C2SP checkpoints. The log's origin
-- (the first line of every checkpoint and the name of its key), one row written by the
-- first server to open the store; replicas must bring the same. And the witnesses'
-- cosignatures of the checkpoints the log signed, one line per witness key and size,
-- served with the checkpoint of that size. Both append-only.
CREATE TABLE log_origin (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    origin      TEXT NOT NULL
);
CREATE TRIGGER log_origin_no_update BEFORE UPDATE ON log_origin BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER log_origin_no_delete BEFORE DELETE ON log_origin BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TABLE cosignatures (
    tree_size   BIGINT NOT NULL,
    witness     TEXT NOT NULL,
    line        TEXT NOT NULL,
    cosigned_at BIGINT NOT NULL,
    PRIMARY KEY (tree_size, witness)
);
CREATE TRIGGER cosignatures_no_update BEFORE UPDATE ON cosignatures BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER cosignatures_no_delete BEFORE DELETE ON cosignatures BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
