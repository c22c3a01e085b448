-- knox-server schema v3 (SQLite dialect): a run is named by its run id *and* the key
-- that signed it. Two executions that reuse a run id (the same workload run twice)
-- are two runs, each with its own live state, never one run's lines contradicting the
-- other's.
-- The key id of the key a stored bundle or journal is signed by.
ALTER TABLE runs ADD COLUMN run_key TEXT;
CREATE INDEX runs_by_run_key ON runs (provider, run_id, run_key);
-- `live_runs` gets `run_key` and loses its UNIQUE (provider, run_id) when the store
-- opens (`Store::rebuild`): SQLite drops a constraint only by rebuilding the
-- table, with foreign keys off, which cannot happen inside this migration's
-- transaction.
