//! The PostgreSQL store's statements, each prepared once per connection so that a use is one
//! round trip: the SQL of the fence and of the queue, side by side, as the database runs it.
//!
//! Owns: every statement's text and preparing them.
//! Must not: run them (`fence` and `queue` do), or hold schema changes (`schema`'s migrations do).

use tokio_postgres::Statement;

use super::error::StoreError;

/// Statements prepared once per connection, so that each use is one round trip.
pub(super) struct Statements {
    pub(super) raise_fence: Statement,
    pub(super) read_fence: Statement,
    pub(super) submit: Statement,
    pub(super) submit_many: Statement,
    pub(super) claim: Statement,
    pub(super) claim_chosen: Statement,
    pub(super) pending_between: Statement,
    pub(super) count_pending: Statement,
    pub(super) end: Statement,
    pub(super) marks_made: Statement,
    pub(super) marks_left: Statement,
    pub(super) update_open: Statement,
    pub(super) take_over: Statement,
    pub(super) open_runs: Statement,
    pub(super) history: Statement,
    pub(super) beyond_history: Statement,
    pub(super) prune: Statement,
    pub(super) forget: Statement,
    pub(super) remember: Statement,
    pub(super) cancel: Statement,
    pub(super) reschedule: Statement,
    pub(super) find: Statement,
    pub(super) change_horizon: Statement,
    pub(super) run_changes: Statement,
}

impl Statements {
    pub(super) async fn prepare(client: &tokio_postgres::Client) -> Result<Self, StoreError> {
        let prepare = |sql: &'static str| async move {
            client
                .prepare(sql)
                .await
                .map_err(StoreError::query("preparing the queue's statements"))
        };
        Ok(Self {
            raise_fence: prepare(RAISE_FENCE).await?,
            read_fence: prepare(READ_FENCE).await?,
            submit: prepare(SUBMIT).await?,
            submit_many: prepare(SUBMIT_MANY).await?,
            claim: prepare(CLAIM).await?,
            claim_chosen: prepare(CLAIM_CHOSEN).await?,
            pending_between: prepare(PENDING_BETWEEN).await?,
            count_pending: prepare(COUNT_PENDING).await?,
            end: prepare(END).await?,
            marks_made: prepare(MARKS_MADE).await?,
            marks_left: prepare(MARKS_LEFT).await?,
            update_open: prepare(UPDATE_OPEN).await?,
            take_over: prepare(TAKE_OVER).await?,
            open_runs: prepare(OPEN_RUNS).await?,
            history: prepare(HISTORY).await?,
            beyond_history: prepare(BEYOND_HISTORY).await?,
            prune: prepare(PRUNE).await?,
            forget: prepare(FORGET).await?,
            remember: prepare(REMEMBER).await?,
            cancel: prepare(CANCEL).await?,
            reschedule: prepare(RESCHEDULE).await?,
            find: prepare(FIND).await?,
            change_horizon: prepare(CHANGE_HORIZON).await?,
            run_changes: prepare(RUN_CHANGES).await?,
        })
    }
}

/// Remembers the id and adds the pending row, and wakes the listening owners (the scalar
/// subquery runs once, and only when a row was added), naming the job after a newline so that
/// only its group's owner reads it; no row back when the id was there already.
const SUBMIT: &str = "\
WITH remembered AS (
    INSERT INTO zkcron_ids (lock_group, id) VALUES ($1, $2)
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO zkcron_pending (lock_group, id, job, due_ms, submission)
SELECT $1, $2, $3, $4, $5 FROM remembered
RETURNING id,
    (SELECT pg_notify('zkcron_submitted', $4::text || ' ' || $2 || ' ' || $1 || chr(10) || $3))::text";

/// [`SUBMIT`] for many: ids $2, jobs $3, due times $4 and stored submissions $5, each id at most
/// once; the ids whose rows it added come back.
const SUBMIT_MANY: &str = "\
WITH asked AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::int8[], $5::bytea[])
        AS asked (id, job, due_ms, submission)
), remembered AS (
    INSERT INTO zkcron_ids (lock_group, id)
    SELECT $1, id FROM asked
    ON CONFLICT DO NOTHING
    RETURNING id
)
INSERT INTO zkcron_pending (lock_group, id, job, due_ms, submission)
SELECT $1, asked.id, asked.job, asked.due_ms, asked.submission
FROM asked JOIN remembered ON remembered.id = asked.id
RETURNING id,
    (SELECT pg_notify('zkcron_submitted', min(due_ms)::text || ' - ' || $1) FROM asked)::text";

/// Takes the fence of group $10 `FOR SHARE` if it holds our token ($2); if it does, takes up to
/// $4 pending rows due by $3 and past ($8, $9) in (due, id) order that no other claim holds, and
/// moves them to `zkcron_open` as claimed by node $5 (IP $6) at $7. Always one row back: the
/// fence's verdict, with a claimed submission or NULLs.
const CLAIM: &str = "\
WITH fence AS (
    SELECT token FROM zkcron_fence WHERE lock_group = $10 AND token = $2 FOR SHARE
), due AS (
    SELECT tableoid, ctid FROM zkcron_pending
    WHERE lock_group = $1 AND due_ms BETWEEN $8 AND $3 AND (due_ms, id) > ($8, $9)
        AND EXISTS (SELECT 1 FROM fence)
    ORDER BY due_ms, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
), taken AS (
    -- The rows `due` locked, by their tuple ids: one fetch a row, whatever the planner knows
    -- of the partition (as a join, a new day's partition without statistics was scanned whole
    -- for every row taken). A tuple id is a partition's own: the pair with the partition
    -- picks the row. The due bounds again: only the partitions due between them are read
    -- (pruned at the executor's start), not every day's.
    DELETE FROM zkcron_pending p
    WHERE p.lock_group = $1 AND p.due_ms BETWEEN $8 AND $3
        AND p.ctid = ANY (ARRAY (SELECT ctid FROM due))
        AND (p.tableoid, p.ctid) IN (SELECT tableoid, ctid FROM due)
    RETURNING p.id, p.job, p.due_ms, p.submission
), opened AS (
    INSERT INTO zkcron_open (lock_group, id, job, due_ms, token, node, ip, claimed_ms, submission)
    SELECT $1, id, job, due_ms, $2, $5, $6, $7, submission FROM taken
    RETURNING id, job, due_ms, submission
)
SELECT verdict.fenced_in, opened.id, opened.job, opened.due_ms, opened.submission
FROM (SELECT EXISTS (SELECT 1 FROM fence) AS fenced_in) AS verdict
LEFT JOIN opened ON true
ORDER BY opened.due_ms, opened.id";

/// Takes the fence of group $11 `FOR SHARE` if it holds our token ($2); if it does, moves the
/// pending rows of ids $3 at due times $4 (between $9 and $10) to `zkcron_open` with records $5,
/// as claimed by node $6 (IP $7) at $8. A row a cancel holds is waited for (then it is gone).
/// Always one row back: the fence's verdict, with a claimed id or NULL.
const CLAIM_CHOSEN: &str = "\
WITH fence AS (
    SELECT token FROM zkcron_fence WHERE lock_group = $11 AND token = $2 FOR SHARE
), chosen AS (
    -- An id chosen twice is claimed once (its first record): the open runs' key is the id.
    SELECT DISTINCT ON (id) * FROM unnest($3::text[], $4::int8[], $5::bytea[])
        AS chosen (id, due_ms, record)
), due AS (
    -- $9 and $10, the chosen due times' least and greatest: the partitions read are theirs.
    -- By id through the id index, then the due time each was chosen at.
    SELECT p.tableoid, p.ctid FROM zkcron_pending p
    WHERE p.lock_group = $1 AND p.due_ms BETWEEN $9 AND $10 AND p.id = ANY ($3::text[])
        AND (p.id, p.due_ms) IN (SELECT id, due_ms FROM chosen)
        AND EXISTS (SELECT 1 FROM fence)
    FOR UPDATE OF p
), taken AS (
    -- As `CLAIM`'s: the locked rows by their tuple ids.
    DELETE FROM zkcron_pending p
    WHERE p.lock_group = $1 AND p.due_ms BETWEEN $9 AND $10
        AND p.ctid = ANY (ARRAY (SELECT ctid FROM due))
        AND (p.tableoid, p.ctid) IN (SELECT tableoid, ctid FROM due)
    RETURNING p.id, p.job, p.due_ms, p.submission
), opened AS (
    INSERT INTO zkcron_open
        (lock_group, id, job, due_ms, token, node, ip, claimed_ms, record, submission)
    SELECT $1, taken.id, taken.job, taken.due_ms, $2, $6, $7, $8, chosen.record, taken.submission
    FROM taken JOIN chosen ON chosen.id = taken.id
    RETURNING id
)
SELECT verdict.fenced_in, opened.id
FROM (SELECT EXISTS (SELECT 1 FROM fence) AS fenced_in) AS verdict
LEFT JOIN opened ON true";

/// Pending rows due after $2 and by $3, oldest first, at most $4: read, not claimed. Only the
/// jobs a group's owner reads: those in $5 when $6, those not in $5 when not (the default
/// group's, every job but the named groups').
const PENDING_BETWEEN: &str = "\
SELECT id, submission FROM zkcron_pending
WHERE lock_group = $1 AND due_ms > $2 AND due_ms <= $3 AND (job = ANY ($5::text[])) = $6
ORDER BY due_ms, id
LIMIT $4";

/// How many submissions are pending, counted up to $2 (an index-only read of at most $2 rows).
const COUNT_PENDING: &str = "\
SELECT count(*) FROM (SELECT 1 FROM zkcron_pending WHERE lock_group = $1 LIMIT $2) AS capped";

/// Moves the open run $2 claimed with token $3 to `zkcron_ended`, ended at $4 with record $5,
/// and keeps the chain marks its end leaves (paths $6, marks $7) until they are made in
/// ZooKeeper.
const END: &str = "\
WITH closed AS (
    DELETE FROM zkcron_open WHERE lock_group = $1 AND id = $2 AND token = $3
    RETURNING id, job, due_ms, submission
), ended AS (
    INSERT INTO zkcron_ended (lock_group, id, job, due_ms, ended_ms, record, submission)
    SELECT $1, id, job, due_ms, $4, $5, submission FROM closed
    RETURNING id
), kept AS (
    INSERT INTO zkcron_marks (lock_group, path, mark, ended_ms)
    SELECT $1, m.path, m.mark, $4 FROM unnest($6::text[], $7::bytea[]) AS m (path, mark)
    WHERE EXISTS (SELECT 1 FROM ended)
    ON CONFLICT DO NOTHING
)
SELECT id FROM ended";

/// The chain marks $2, made in ZooKeeper: no longer kept.
const MARKS_MADE: &str = "\
DELETE FROM zkcron_marks WHERE lock_group = $1 AND path = ANY ($2::text[])";

/// Up to $3 chain marks kept since $2 or before, oldest first: ends whose marks may not have
/// been made in ZooKeeper.
const MARKS_LEFT: &str = "\
SELECT path, mark FROM zkcron_marks
WHERE lock_group = $1 AND ended_ms <= $2
ORDER BY ended_ms
LIMIT $3";

/// Writes record $3 over open run $2's if its row is at version $4, still claimed with token $5,
/// and the fence of group $6 still holds $5 (taken `FOR SHARE`): a write a dead owner's connection still
/// carries lands nowhere once a new owner raised the fence. Its new version back.
const UPDATE_OPEN: &str = "\
WITH fence AS (
    SELECT token FROM zkcron_fence WHERE lock_group = $6 AND token = $5 FOR SHARE
)
UPDATE zkcron_open SET record = $3, version = version + 1, changed_xid = pg_current_xact_id()
WHERE lock_group = $1 AND id = $2 AND version = $4 AND token = $5
    AND EXISTS (SELECT 1 FROM fence)
RETURNING version";

/// [`UPDATE_OPEN`] by a next owner holding token $5 (node $6, IP $7), checked against the fence
/// of group $8 in the same statement. One row back: the fence's verdict, and the new version or NULL.
const TAKE_OVER: &str = "\
WITH fence AS (
    SELECT token FROM zkcron_fence WHERE lock_group = $8 AND token = $5 FOR SHARE
), taken AS (
    UPDATE zkcron_open
    SET record = $3, version = version + 1, token = $5, node = $6, ip = $7,
        changed_xid = pg_current_xact_id()
    WHERE lock_group = $1 AND id = $2 AND version = $4 AND EXISTS (SELECT 1 FROM fence)
    RETURNING version
)
SELECT EXISTS (SELECT 1 FROM fence), (SELECT version FROM taken)";

/// The open runs of job $2 (of every job when NULL), oldest due first.
const OPEN_RUNS: &str = "\
SELECT id, token, node, ip, claimed_ms, record, version, submission
FROM zkcron_open WHERE lock_group = $1 AND ($2::text IS NULL OR job = $2)
ORDER BY due_ms, id";

/// Job $2's newest $3 ended runs, newest end first.
const HISTORY: &str = "\
SELECT id, record FROM zkcron_ended
WHERE lock_group = $1 AND job = $2
ORDER BY ended_ms DESC
LIMIT $3";

/// Job $2's ended runs past its newest $3, at most $4: what a prune deletes.
const BEYOND_HISTORY: &str = "\
SELECT id, ended_ms, submission FROM zkcron_ended
WHERE lock_group = $1 AND job = $2
ORDER BY ended_ms DESC
OFFSET $3
LIMIT $4";

/// Deletes ended runs $2; of their ids, $3 become tombstones $4 until $5 and the others are
/// freed. The counts back: runs deleted, ids remembered, ids freed.
const PRUNE: &str = "\
WITH gone AS (
    DELETE FROM zkcron_ended WHERE lock_group = $1 AND id = ANY ($2::text[])
    RETURNING id
), kept AS (
    UPDATE zkcron_ids SET tombstone = t.tombstone, forget_after_ms = t.until
    FROM unnest($3::text[], $4::bytea[], $5::int8[]) AS t (id, tombstone, until)
    WHERE zkcron_ids.lock_group = $1 AND zkcron_ids.id = t.id
    RETURNING zkcron_ids.id
), freed AS (
    DELETE FROM zkcron_ids
    WHERE lock_group = $1 AND id = ANY ($2::text[]) AND NOT (id = ANY ($3::text[]))
    RETURNING id
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM kept), (SELECT count(*) FROM freed)";

/// Frees up to $3 remembered ids whose time came by $2.
const FORGET: &str = "\
DELETE FROM zkcron_ids WHERE ctid = ANY (ARRAY (
    SELECT ctid FROM zkcron_ids
    WHERE lock_group = $1 AND forget_after_ms <= $2
    LIMIT $3
))";

/// Remembers ids $2 with tombstones $3 until $4, each unless the queue knows it already; the
/// ids it added come back.
const REMEMBER: &str = "\
INSERT INTO zkcron_ids (lock_group, id, tombstone, forget_after_ms)
SELECT $1, t.id, t.tombstone, t.until
FROM unnest($2::text[], $3::bytea[], $4::int8[]) AS t (id, tombstone, until)
ON CONFLICT DO NOTHING
RETURNING id";

/// Moves pending submission $2, due at $3, to `zkcron_ended` as cancelled at $4 (record $5).
const CANCEL: &str = "\
WITH gone AS (
    DELETE FROM zkcron_pending WHERE lock_group = $1 AND id = $2 AND due_ms = $3
    RETURNING id, job, due_ms, submission
)
INSERT INTO zkcron_ended (lock_group, id, job, due_ms, ended_ms, record, submission)
SELECT $1, id, job, due_ms, $4, $5, submission FROM gone
RETURNING id";

/// Moves pending submission $2 from due time $3 to $4 with its stored submission $5 (the row
/// moves to the new day's partition), and wakes the listening owner as a submit does; no row
/// back when it was not pending at $3 (claimed, cancelled or moved meanwhile).
const RESCHEDULE: &str = "\
UPDATE zkcron_pending SET due_ms = $4::int8, submission = $5
WHERE lock_group = $1 AND id = $2 AND due_ms = $3
RETURNING id, (SELECT pg_notify('zkcron_submitted',
    $4::int8::text || ' ' || $2 || ' ' || $1 || chr(10) || job))::text";

/// Where submission $2 is, in one snapshot: its row in the table that holds it, or its
/// tombstone once its record was pruned.
const FIND: &str = "\
SELECT 'pending' AS place, submission, NULL::bytea AS record, NULL::bigint AS token,
       NULL::text AS node, NULL::text AS ip, NULL::bigint AS at_ms
FROM zkcron_pending WHERE lock_group = $1 AND id = $2
UNION ALL
SELECT 'open', submission, record, token, node, ip, claimed_ms
FROM zkcron_open WHERE lock_group = $1 AND id = $2
UNION ALL
SELECT 'ended', submission, record, NULL, NULL, NULL, ended_ms
FROM zkcron_ended WHERE lock_group = $1 AND id = $2
UNION ALL
SELECT 'remembered', tombstone, NULL, NULL, NULL, NULL, forget_after_ms
FROM zkcron_ids WHERE lock_group = $1 AND id = $2 AND tombstone IS NOT NULL";

/// The runs' change feed's horizon now: the oldest transaction still running on the server
/// (every transaction before it is over, and what it wrote can be read).
const CHANGE_HORIZON: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text";

/// Up to $4 runs whose row a transaction changed after transaction $2's change of id $3, in the
/// order (transaction, id), by transactions before the horizon: open runs (with who claimed
/// them, for a run that has written no record yet; few, read whole) and ended ones (through
/// their `(lock_group, changed_xid, id)` index), $4 rows of each at most.
const RUN_CHANGES: &str = "\
WITH horizon AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin)
SELECT c.changed_xid::text, c.id, c.record, c.submission, c.node, c.ip, c.token, c.at_ms, c.open
FROM (
    -- The horizon as a scalar, one for both tables: a bound of each index scan (a join with
    -- it was a filter on the ended runs, which read every row past the horizon each time).
    (SELECT o.changed_xid, o.id, o.record, o.submission, o.node, o.ip, o.token,
            o.claimed_ms AS at_ms, true AS open
     FROM zkcron_open o
     WHERE o.lock_group = $1 AND (o.changed_xid, o.id) > ($2::text::xid8, $3)
         AND o.changed_xid < (SELECT xmin FROM horizon)
     ORDER BY o.changed_xid, o.id
     LIMIT $4)
    UNION ALL
    (SELECT e.changed_xid, e.id, e.record, e.submission, NULL, NULL, NULL,
            e.ended_ms, false
     FROM zkcron_ended e
     WHERE e.lock_group = $1 AND (e.changed_xid, e.id) > ($2::text::xid8, $3)
         AND e.changed_xid < (SELECT xmin FROM horizon)
     ORDER BY e.changed_xid, e.id
     LIMIT $4)
) AS c
-- By the transaction's id itself: a bare `changed_xid` here would name the text column above,
-- whose order puts transaction 1000 before 999.
ORDER BY c.changed_xid, c.id
LIMIT $4";

/// Inserts or raises the row; returns it unless it holds a newer token. `<=` so that the owner
/// raising its own token again (a new connection, a retry after a lost answer) is told so.
const RAISE_FENCE: &str = "\
INSERT INTO zkcron_fence (lock_group, token) VALUES ($1, $2)
ON CONFLICT (lock_group) DO UPDATE SET token = EXCLUDED.token
    WHERE zkcron_fence.token <= EXCLUDED.token
RETURNING token";

const READ_FENCE: &str = "SELECT token FROM zkcron_fence WHERE lock_group = $1";
