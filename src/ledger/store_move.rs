//! Moving pending submissions from ZooKeeper's due tree into the delayed queue's PostgreSQL
//! store: what `zkcron delayed migrate --to postgres` does once, and what the owner does at each
//! of its chores for a submission written to ZooKeeper by the documented direct protocol while
//! the queue is kept in the store — found, logged with its id, counted, moved or refused, never
//! left pending where nobody reads it.
//!
//! Each submission is submitted to the store under its own id first (idempotent: a move cut short
//! and run again finds it there), then its marker and its node leave ZooKeeper in one multi-op.
//! Nothing claims from ZooKeeper's tree meanwhile: the owner keeps the queue in the store, and a
//! node that keeps it in ZooKeeper stands aside from such an owner (`lock::node`), so a
//! submission is neither lost nor run twice.
//!
//! Owns: walking the due tree in due order, the move of one submission, and what it reports.
//! Must not: decide when to move (the owner's chores and the command do), or fire anything.

use super::Ledger;
use super::submissions::{SubmissionError, read_stored, zk};
use crate::delayed::submission::{Stored, Submission, SubmissionId};
use crate::layout::DelayedPaths;
use crate::tally::WriteKind;
use crate::zk::{Fault, MultiFault};

/// What a move did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Moved into the store, in due order.
    pub moved: Vec<SubmissionId>,
    /// Left in ZooKeeper, with why: the store holds a different request under the id.
    pub refused: Vec<(SubmissionId, String)>,
    /// Every pending submission in ZooKeeper was looked at (not stopped at the limit).
    pub complete: bool,
    /// The remembered ids moved with them (`zkcron delayed migrate` only).
    pub remembered: RememberedMoved,
}

/// Moves up to `limit` of the submissions pending in ZooKeeper's due tree into the delayed
/// queue's PostgreSQL store, oldest due first; the emptied buckets and days go too. Nothing where
/// the queue is kept in ZooKeeper.
///
/// # Errors
/// A request to ZooKeeper or to the store failed; what was moved before it stays moved, and a
/// move run again goes on.
pub async fn move_to_store(
    client: &Ledger,
    paths: &DelayedPaths,
    limit: usize,
) -> Result<Moved, SubmissionError> {
    let mut done = Moved::default();
    if client.delayed_store().is_none() {
        done.complete = true;
        return Ok(done);
    }
    for day in super::due::days(client, paths).await? {
        for bucket in super::due::buckets(client, paths, day).await? {
            for (id, _) in super::due::pending_in(client, paths, bucket).await? {
                if done.moved.len() + done.refused.len() >= limit {
                    return Ok(done);
                }
                match move_one(client, paths, &id).await? {
                    Some(Ok(())) => done.moved.push(id),
                    Some(Err(why)) => done.refused.push((id, why)),
                    None => {}
                }
            }
            super::due::remove_bucket(client, paths, bucket).await;
        }
        super::due::remove_day(client, paths, day).await;
    }
    done.complete = true;
    Ok(done)
}

/// Moves submission `id`: `None` when it is no longer pending in ZooKeeper, `Some(Err(why))` when
/// the store refused it (it stays in ZooKeeper).
async fn move_one(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
) -> Result<Option<Result<(), String>>, SubmissionError> {
    let Some(store) = client.delayed_store() else {
        return Ok(None);
    };
    let (submission, version) = match read_stored(client, paths, id).await? {
        Some((Stored::Request(submission), version)) => (submission, version),
        // A marker left without its request: nothing to move, and nothing would fire.
        Some((Stored::Tombstone(_), _)) | None => return Ok(None),
    };
    match store.submit(id, &submission).await {
        Ok(_) => {}
        Err(super::postgres::StoreError::Conflict { .. }) => {
            let why = "the store holds a different request under this id".to_owned();
            tracing::error!(id = %id, job = %submission.job, "a submission pending in zookeeper not moved into the delayed store: {why}; it stays in zookeeper, where nobody fires it");
            return Ok(Some(Err(why)));
        }
        Err(err) => return Err(SubmissionError::Store(err)),
    }
    leave_zookeeper(client, paths, id, &submission, version).await?;
    Ok(Some(Ok(())))
}

/// Deletes `id`'s marker and node (at `version`) in one multi-op.
async fn leave_zookeeper(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
    submission: &Submission,
    version: i32,
) -> Result<(), SubmissionError> {
    let marker = paths.marker_of(id, submission);
    let node = paths.submission(id);
    let mut multi = client.zk().multi(WriteKind::Submit);
    multi
        .add_delete(&marker, None)
        .and_then(|()| multi.add_delete(&node, Some(version)))
        .map_err(|source| zk(&marker, source))?;
    match multi.commit().await {
        Ok(_) => Ok(()),
        Err(MultiFault::Op {
            fault: Fault::NoNode | Fault::BadVersion,
            ..
        }) => {
            // Another move took it out first (the owner's chore beside the command): its node
            // is gone, and the store's copy is the one. Claimed or cancelled in ZooKeeper
            // instead, its node stays (with the record beside it): only a node that keeps the
            // queue there does that, and it stands aside from this store's owner; the store's
            // copy is cancelled then, unless the store's owner claimed it already.
            if read_stored(client, paths, id).await?.is_some() {
                cancel_copy(client, id).await;
            }
            Ok(())
        }
        Err(
            MultiFault::Op { fault: source, .. }
            | MultiFault::Request(source)
            | MultiFault::Fenced(source),
        ) => Err(zk(&marker, source)),
    }
}

/// Cancels the store's copy of `id`, which left ZooKeeper's queue another way while it moved.
async fn cancel_copy(client: &Ledger, id: &SubmissionId) {
    let Some(store) = client.delayed_store() else {
        return;
    };
    let now = chrono::Utc::now().timestamp_millis();
    match store.cancel(id, now).await {
        Ok(Ok(_)) => {
            tracing::warn!(id = %id, "a submission left zookeeper's queue while it moved into the delayed store (claimed or cancelled there): its copy in the store is cancelled");
        }
        Ok(Err(_)) => {
            tracing::error!(id = %id, "a submission left zookeeper's queue while it moved into the delayed store, and the store's owner claimed it too: it may run twice");
        }
        Err(err) => {
            tracing::error!(id = %id, error = %crate::report::error_chain(&err), "a submission left zookeeper's queue while it moved into the delayed store, and its copy there could not be cancelled: it may run twice");
        }
    }
}

/// What a move of the remembered ids did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RememberedMoved {
    /// Ids the store remembers now, each with its tombstone until its window ends.
    pub moved: usize,
    /// Ids left in ZooKeeper: pending (the pending move takes them), a run still open there,
    /// a generated id, or one whose window has passed (ZooKeeper's own sweep frees it).
    pub left: usize,
}

/// Moves the ids ZooKeeper's queue remembers into the store, so that a resubmit within
/// `dedup_window` of an id that ran before the switch is told apart there as it was in
/// ZooKeeper: each tombstone as it is, and each ended run's request as the tombstone its prune
/// would make (until its end plus `window_of` its job; a job not in the schedule keeps its
/// request in ZooKeeper). The store keeps its own where it knows the id already; then the id
/// leaves ZooKeeper's index, at the version read. A run's record stays in ZooKeeper, where
/// `history` reads it and its prune finds the request gone.
///
/// # Errors
/// A listing, a read, or the store failed; what moved stays moved, and a move run again goes on.
pub async fn remember_in_store(
    client: &Ledger,
    paths: &crate::layout::LedgerPaths,
    window_of: impl Fn(&crate::ids::JobName) -> Option<std::time::Duration>,
    now_unix_ms: i64,
) -> Result<RememberedMoved, SubmissionError> {
    let mut done = RememberedMoved::default();
    let Some(store) = client.delayed_store() else {
        return Ok(done);
    };
    let ids = &paths.delayed.ids;
    for shard in super::submissions::children(client, ids).await? {
        let mut batch = Vec::new();
        let mut versions = Vec::new();
        for name in super::submissions::children(client, &format!("{ids}/{shard}")).await? {
            let Ok(id) = SubmissionId::parse(&name) else {
                continue;
            };
            match remembered(client, paths, &id, &window_of, now_unix_ms).await? {
                Some((tombstone, version)) => {
                    batch.push((
                        id.to_string(),
                        tombstone.to_bytes(),
                        tombstone.remembered_until_unix_ms,
                    ));
                    versions.push((id, version));
                }
                None => done.left += 1,
            }
        }
        if batch.is_empty() {
            continue;
        }
        store
            .remember(&batch)
            .await
            .map_err(SubmissionError::Store)?;
        for (id, version) in versions {
            let node = paths.delayed.submission(&id);
            match client
                .zk()
                .delete(WriteKind::Submit, &node, Some(version))
                .await
            {
                // Changed meanwhile (its prune made it a tombstone, or it was forgotten): the
                // store remembers it either way, and ZooKeeper's sweep frees what is left.
                Ok(()) | Err(Fault::NoNode | Fault::BadVersion) => done.moved += 1,
                Err(source) => return Err(zk(&node, source)),
            }
        }
    }
    Ok(done)
}

/// The tombstone the store should keep for `id`, with its node's version, when ZooKeeper
/// remembers it for a run that ended and its window has not passed.
async fn remembered(
    client: &Ledger,
    paths: &crate::layout::LedgerPaths,
    id: &SubmissionId,
    window_of: &impl Fn(&crate::ids::JobName) -> Option<std::time::Duration>,
    now_unix_ms: i64,
) -> Result<Option<(crate::delayed::submission::Tombstone, i32)>, SubmissionError> {
    let (submission, version) = match read_stored(client, &paths.delayed, id).await? {
        Some((Stored::Tombstone(tombstone), version)) => {
            let live = tombstone.remembered_until_unix_ms > now_unix_ms;
            return Ok(live.then_some((tombstone, version)));
        }
        Some((Stored::Request(submission), version)) if !submission.anonymous => {
            (submission, version)
        }
        Some((Stored::Request(_), _)) | None => return Ok(None),
    };
    if super::submissions::marked_pending(client, &paths.delayed, id, &submission).await? {
        return Ok(None);
    }
    let record = paths.submission_record(&submission.job, submission.due_unix_ms, id);
    let Some(run) = super::read_record(client, &record).await else {
        return Ok(None);
    };
    let ended = run.status.is_final() && run.retry_at_unix_ms.is_none();
    let Some(window) = window_of(&submission.job).filter(|_| ended) else {
        return Ok(None);
    };
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let until = run
        .finished_unix_ms
        .unwrap_or(run.claimed_unix_ms)
        .saturating_add(window_ms);
    Ok((until > now_unix_ms).then(|| (submission.tombstone(until), version)))
}
