-- The runs' change feed: each open or ended run's row says which transaction changed it last,
-- so that a reader (the event stream, the console) takes every change after its mark in the
-- order the transactions began, and only once every transaction before its horizon (the
-- oldest still running, `pg_snapshot_xmin`) is over: a change that commits late is never
-- jumped. A row changed twice between two reads is told once, as it stands.
--
-- No rewrite of the existing rows: they keep NULL and are history from before the feed.
-- The open runs are few (at most each job's `max_running`) and read whole: no index, so that
-- a run's record written over its row stays a HOT update (measured: an index here cost every
-- delivery a non-HOT update, and the server a third more CPU).
ALTER TABLE zkcron_open ADD COLUMN changed_xid xid8;
ALTER TABLE zkcron_open ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();

ALTER TABLE zkcron_ended ADD COLUMN changed_xid xid8;
ALTER TABLE zkcron_ended ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();
CREATE INDEX zkcron_ended_changed ON zkcron_ended (lock_group, changed_xid, id);
