-- knox-server schema v9 (SQLite dialect): the runs list answered from indexes at any
-- size (measured by benches/pages.rs over 100,000 runs).
--
-- Two covering indexes of the runs' columns the list filters on: one in the list's
-- order (newest first, then by log index), walked newest first until a page is full
-- whatever set of providers a principal sees; one by digest, for the runs a fact
-- names.
CREATE INDEX runs_listed ON runs (submitted_at, log_index, provider, kind, outcome, run_id, digest);
CREATE INDEX runs_listed_by_digest ON runs (digest, provider, submitted_at, log_index, kind, outcome, run_id);
-- The facts the list filters on (a blocked action's tool and guard, a regulation
-- verdict and provisions, a model), one row per run and distinct value, with the
-- run's provider and place in the list: the runs with a fact are one range of
-- run_facts_listed, already in the list's order, so a page of them or their count
-- reads that range alone. Written with the run (Store::ingest), append-only.
CREATE TABLE run_facts (
    fact         TEXT NOT NULL CHECK (fact IN ('tool', 'guard', 'verdict', 'provision', 'model')),
    value        TEXT NOT NULL,
    digest       TEXT NOT NULL REFERENCES runs (digest),
    provider     TEXT NOT NULL,
    submitted_at BIGINT NOT NULL,
    log_index    BIGINT NOT NULL,
    PRIMARY KEY (digest, fact, value)
);
CREATE INDEX run_facts_listed ON run_facts (fact, value, submitted_at, log_index, provider, digest);
INSERT INTO run_facts (fact, value, digest, provider, submitted_at, log_index)
    SELECT f.fact, f.value, r.digest, r.provider, r.submitted_at, r.log_index FROM runs r JOIN (
    SELECT 'tool' AS fact, tool AS value, digest FROM blocked_actions WHERE tool IS NOT NULL
    UNION SELECT 'guard', guard, digest FROM blocked_actions
    UNION SELECT 'verdict', verdict, digest FROM regulation_decisions
    UNION SELECT 'provision', provisions, digest FROM regulation_decisions
    UNION SELECT 'model', model, digest FROM run_models
    ) f ON f.digest = r.digest;
CREATE TRIGGER run_facts_no_update BEFORE UPDATE ON run_facts BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
CREATE TRIGGER run_facts_no_delete BEFORE DELETE ON run_facts BEGIN SELECT RAISE(ABORT, 'append-only table'); END;
-- The distinct values of each fact: a substring filter (provision, model) that only
-- one stored value holds is read as that value. Grows with the vocabulary of tools,
-- guards, verdicts, provisions and models, not with the runs.
CREATE TABLE fact_values (
    fact  TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (fact, value)
);
INSERT INTO fact_values (fact, value) SELECT DISTINCT fact, value FROM run_facts;
