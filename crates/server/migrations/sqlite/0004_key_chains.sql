-- knox-server schema v4 (SQLite dialect): each stored bundle's place in its key's chain
-- of runs (evidence format v3), so that a run a provider left out shows as a gap.
-- Only links whose signed summary verified are stored; one row per stored bundle.
CREATE TABLE chain_links (
    digest      TEXT PRIMARY KEY REFERENCES runs (digest),
    provider    TEXT NOT NULL REFERENCES principals (key_id),
    run_key     TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    prev        TEXT NOT NULL,
    seal        TEXT NOT NULL
);
CREATE INDEX chain_links_by_key ON chain_links (provider, run_key, seq);
CREATE TRIGGER chain_links_no_update BEFORE UPDATE ON chain_links BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER chain_links_no_delete BEFORE DELETE ON chain_links BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
