-- The delayed queue's tables (zkcron's ledger::postgres). Every row belongs to one lock group,
-- named as zkcron names it in ZooKeeper (its chroot, root and lock), so one database can hold
-- several fleets.

-- A lock group's newest fencing token (the version of its `epoch` znode). The owner raises it
-- when it gains the lock; a claim passes only with the token stored here, and a raise waits for
-- the claims in flight (they hold the row FOR SHARE), so a stale owner claims nothing once a
-- newer one has raised it.
CREATE TABLE zkcron_fence (
    lock_group text PRIMARY KEY,
    token bigint NOT NULL
);

-- Every submission id the queue remembers, in whichever state its submission is: the one
-- unique index of ids (a partitioned table's unique keys must hold its partition key). Once
-- its run's record is pruned, `tombstone` keeps what a resubmit of the id is compared with,
-- until `forget_after_ms`.
CREATE TABLE zkcron_ids (
    lock_group text NOT NULL,
    id text NOT NULL,
    tombstone bytea,
    forget_after_ms bigint,
    PRIMARY KEY (lock_group, id)
);
CREATE INDEX zkcron_ids_forget ON zkcron_ids (forget_after_ms)
    WHERE forget_after_ms IS NOT NULL;

-- Pending submissions, by day of their due time: a claim deletes its rows, and a past day's
-- partition, empty, is dropped with its dead tuples rather than vacuumed.
-- `submission` is the stored format of delayed::submission (a JSON header line, the payload).
CREATE TABLE zkcron_pending (
    lock_group text NOT NULL,
    id text NOT NULL,
    job text NOT NULL,
    due_ms bigint NOT NULL,
    submission bytea NOT NULL
) PARTITION BY RANGE (due_ms);
-- (due, id): the order claims take rows in, and the mark a claim starts after.
CREATE INDEX zkcron_pending_due ON zkcron_pending (lock_group, due_ms, id);
CREATE INDEX zkcron_pending_id ON zkcron_pending (lock_group, id);

-- Claimed submissions whose run has not ended: at most `max_running` a job. `record` is the run
-- record's stored format once the run writes it (NULL: claimed, not yet started), `version`
-- its compare-and-set counter.
CREATE TABLE zkcron_open (
    lock_group text NOT NULL,
    id text NOT NULL,
    job text NOT NULL,
    due_ms bigint NOT NULL,
    token bigint NOT NULL,
    node text NOT NULL,
    ip text NOT NULL,
    claimed_ms bigint NOT NULL,
    record bytea,
    version integer NOT NULL DEFAULT 0,
    submission bytea NOT NULL,
    PRIMARY KEY (lock_group, id)
);

-- Ended submissions (run, cancelled, dead-lettered), by day of their end: a day's partition is
-- dropped once every row in it is past `history` and `dedup_window`.
CREATE TABLE zkcron_ended (
    lock_group text NOT NULL,
    id text NOT NULL,
    job text NOT NULL,
    due_ms bigint NOT NULL,
    ended_ms bigint NOT NULL,
    record bytea NOT NULL,
    submission bytea NOT NULL
) PARTITION BY RANGE (ended_ms);
CREATE INDEX zkcron_ended_id ON zkcron_ended (lock_group, id);
CREATE INDEX zkcron_ended_job ON zkcron_ended (lock_group, job, ended_ms);
