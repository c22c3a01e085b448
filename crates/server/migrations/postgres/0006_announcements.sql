-- knox-server schema v6 (PostgreSQL dialect): key announcements (evidence format §6a)
-- are stored: an in-TEE key's first summary, number 0 of its chain of runs, submitted
-- when the key is made, so that a process whose runs are all withheld shows as a key
-- announced and never followed. `objects.kind` admits 'announcement' (the constraint
-- replaced; no row changes, so the append-only triggers are not involved).
-- Announcements get a `runs` row (kind 'announcement') and, when verified, a
-- `chain_links` row at number 0; the list of runs and the dashboard leave verified ones out.
ALTER TABLE objects DROP CONSTRAINT objects_kind_check;
ALTER TABLE objects ADD CONSTRAINT objects_kind_check
    CHECK (kind IN ('bundle', 'journal', 'receipt', 'unreadable', 'announcement'));
