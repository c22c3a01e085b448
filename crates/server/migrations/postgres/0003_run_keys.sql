-- knox-server schema v3 (PostgreSQL dialect): a run is named by its run id *and* the
-- key that signed it. Two executions that reuse a run id (the same workload run twice)
-- are two runs, each with its own live state, never one run's lines contradicting the
-- other's.
-- Key id of the run's signing key (NULL for runs streamed before v3).
ALTER TABLE live_runs ADD COLUMN run_key TEXT;
ALTER TABLE live_runs DROP CONSTRAINT live_runs_provider_run_id_key;
CREATE UNIQUE INDEX live_runs_by_run ON live_runs (provider, run_id, run_key);
-- The key id of the key a stored bundle or journal is signed by.
ALTER TABLE runs ADD COLUMN run_key TEXT;
CREATE INDEX runs_by_run_key ON runs (provider, run_id, run_key);
