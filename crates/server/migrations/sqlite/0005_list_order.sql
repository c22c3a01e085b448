-- knox-server schema v5 (SQLite dialect): the runs list's order (newest first, then by
-- log index) is read from an index, so listing a provider's newest runs reads those
-- runs only, not every run of the provider sorted (measured by benches/pages.rs: the
-- newest 1,000 of 100,000 runs). The new index starts as the one it replaces.
CREATE INDEX runs_by_provider_order ON runs (provider, submitted_at, log_index);
DROP INDEX runs_by_provider;
