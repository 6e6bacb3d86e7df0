//! What the lock group records in ZooKeeper about ticks and submissions: claims, run records,
//! pruning.
//!
//! Owns: the compare-and-set updates of a record through its life — `running`, the final record
//! (with a guard's or open marker's delete), a withdrawal, a next owner's rewrite — and the
//! promised retries' markers. Its modules own the claim, one fenced multi-op per tick or
//! submission (`claim`, DESIGN.md "ZooKeeper layout"), and its group commit (`group`), a forbid
//! run's guard outside its claim (`guard`), reading records back (`records`), pruning with the
//! tombstones that keep a pruned submission's id remembered (`prune`, `forget`), the due queue
//! (`due`), submissions (`submissions`) and the `[[limit]]` leases (`limits`).
//! Must not: spawn processes or decide lock policy.

pub mod acl;
pub mod audit;
pub mod broadcast;
pub mod chains;
pub mod changes;
mod claim;
pub mod control;
pub mod due;
mod error;
pub mod forget;
pub mod group;
mod guard;
mod handle;
pub mod inspect;
pub mod limits;
mod parents;
pub mod postgres;
mod prune;
mod records;
mod store_claims;
pub mod store_feed;
pub mod store_move;
mod submission_state;
pub mod submissions;
pub mod watch;

pub use claim::{ClaimPlan, OpenRuns, claim};
pub use error::{ClaimError, RequestFailed, StandingRefusal, UpdateError};
use guard::delete_own_guard;
pub use guard::{release_unstarted_guard, take_guard};
pub use handle::{Ledger, Unreachable};
pub use prune::{PRUNE_BATCH, Remember, prune};
pub use records::{
    Stamp, StoredRecord, guard_holder, history, jobs_with_records, read_many, read_many_stamped,
    read_record, read_to_act, read_versioned, read_versioned_checked, record_names,
    record_names_of, running_jobs,
};

use std::collections::HashSet;

use crate::ids::{JobName, SessionId};
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, MultiFault, Written};

use crate::layout::LedgerPaths;
use crate::run::{Claim, RunRecord};

/// Writes `claim.record` over the stored record if nobody else changed it since we did.
///
/// # Errors
/// `Conflict` when the record's version moved (another node marked it, e.g. as interrupted);
/// `Zk` when the request failed. Callers log both: an update is never silently dropped.
pub async fn update(client: &Ledger, claim: &mut Claim) -> Result<(), UpdateError> {
    set_record(client, claim, WriteKind::Start, &[]).await
}

/// How one compare-and-set of a record (with its marks) ended.
enum SetOutcome {
    Written(i32),
    /// A mark's parent was missing and has been made: worth once more.
    DirsMade,
    /// A mark exists already (it serves as well): the record goes on without it.
    MarkThere,
    Failed(Fault),
}

/// The record's compare-and-set, with `marks` created in the same multi-op (all or nothing).
async fn set_data_with(
    client: &Ledger,
    kind: WriteKind,
    claim: &Claim,
    marks: &[chains::MarkCreate],
) -> SetOutcome {
    let data = claim.record.to_bytes();
    if marks.is_empty() {
        return match client
            .zk()
            .set_data(kind, &claim.path, &data, Some(claim.version))
            .await
        {
            Ok(stat) => SetOutcome::Written(stat.version),
            Err(source) => SetOutcome::Failed(source),
        };
    }
    let mut multi = client.zk().multi(kind);
    let built = multi
        .add_set_data(&claim.path, &data, Some(claim.version))
        .and_then(|()| chains::add_creates(marks, &mut multi));
    if let Err(source) = built {
        return SetOutcome::Failed(source);
    }
    match multi.commit().await {
        Ok(results) => SetOutcome::Written(match results.first() {
            Some(Written::SetData { stat }) => stat.version,
            _ => claim.version + 1,
        }),
        Err(MultiFault::Op { index: 0, fault }) => SetOutcome::Failed(fault),
        Err(MultiFault::Op {
            fault: Fault::NoNode,
            ..
        }) => {
            chains::make_dirs(client.zk(), marks).await;
            SetOutcome::DirsMade
        }
        Err(MultiFault::Op {
            fault: Fault::NodeExists,
            ..
        }) => SetOutcome::MarkThere,
        Err(
            MultiFault::Op { fault, .. } | MultiFault::Request(fault) | MultiFault::Fenced(fault),
        ) => SetOutcome::Failed(fault),
    }
}

/// [`update`], counted as `kind`, with `marks` made in the same multi-op.
async fn set_record(
    client: &Ledger,
    claim: &mut Claim,
    kind: WriteKind,
    marks: &[chains::MarkCreate],
) -> Result<(), UpdateError> {
    let zk_err = |source| UpdateError::Zk {
        path: claim.path.clone(),
        source,
    };
    let mut marks = marks;
    for _ in 0..4 {
        let previous = std::mem::replace(&mut claim.sent, claim.record.clone());
        match set_data_with(client, kind, claim, marks).await {
            SetOutcome::Written(version) => {
                claim.version = version;
                return Ok(());
            }
            SetOutcome::DirsMade => claim.sent = previous,
            SetOutcome::MarkThere => {
                tracing::warn!(
                    path = claim.path,
                    "a chain mark of this run exists already; the final record is written without making it again"
                );
                marks = &[];
                claim.sent = previous;
            }
            SetOutcome::Failed(Fault::BadVersion) => {
                // Only our own earlier write, whose reply was lost, may have moved the version:
                // then the stored record is exactly what we sent before. Anything else is
                // someone else's change, and it is kept.
                let (data, stat) = client.zk().get_data(&claim.path).await.map_err(zk_err)?;
                let stored = RunRecord::parse(&data).ok();
                if stored.as_ref() != Some(&previous) {
                    return Err(UpdateError::Conflict {
                        path: claim.path.clone(),
                        stored: stored.map(|record| record.status),
                    });
                }
                claim.version = stat.version;
                if previous == claim.record {
                    // This very write, with its marks (one multi), was applied.
                    return Ok(());
                }
            }
            SetOutcome::Failed(Fault::NoNode) => break,
            SetOutcome::Failed(source) => return Err(zk_err(source)),
        }
    }
    Err(UpdateError::Conflict {
        path: claim.path.clone(),
        stored: None,
    })
}

/// Writes the run's final record and, in the same multi-op, deletes its `running/<job>` guard —
/// only when `client` is the session that made the claim, so no other session's guard is ever
/// deleted — and a submission's open-run marker. When our session has changed since the claim,
/// the guard went with the old session (or goes when the servers expire it).
///
/// # Errors
/// As [`update`].
pub async fn finish(
    client: &Ledger,
    claim: &mut Claim,
    marks: &[chains::MarkCreate],
) -> Result<(), UpdateError> {
    let same_session = SessionId(client.zk().session_id()) == claim.session;
    let guard = claim.guard.clone().filter(|_| same_session);
    let extras: Vec<String> = claim.final_deletes(same_session).cloned().collect();
    if !extras.is_empty() {
        let mut multi = client.zk().multi(WriteKind::Final);
        let built = multi
            .add_set_data(&claim.path, &claim.record.to_bytes(), Some(claim.version))
            .and_then(|()| chains::add_creates(marks, &mut multi))
            .and_then(|()| {
                extras
                    .iter()
                    .try_for_each(|path| multi.add_delete(path, None))
            });
        if built.is_ok() {
            match multi.commit().await {
                Ok(results) => {
                    if let Some(Written::SetData { stat }) = results.first() {
                        claim.version = stat.version;
                    }
                    return Ok(());
                }
                // The record moved (a lost reply of ours, or another writer), or a node to
                // delete is gone: one by one below.
                Err(MultiFault::Op { .. }) => {}
                Err(MultiFault::Request(fault) | MultiFault::Fenced(fault)) => {
                    tracing::debug!(path = claim.path, error = %fault, "final record not written with its guard");
                }
            }
        }
    }
    // A record whose reply was lost, with the guard still ours: release the guard alone.
    if let Some(guard) = &guard {
        delete_own_guard(client, guard, &claim.record.run_id).await;
    }
    // The marks go with the record or not at all: a child is made pending exactly when its
    // parent's run is recorded as ended.
    set_record(client, claim, WriteKind::Final, marks).await?;
    // Only once the record is final: an open marker is what the next owner resolves.
    if let Some(open) = claim.open_to_close() {
        delete_if_there(client, open, WriteKind::Final).await;
    }
    Ok(())
}

/// Marks `record`'s tick as promising a retry (`retries/<job>/<tick_ms>`), before the final
/// record that makes the promise is written: the next owner lists these instead of every record,
/// so a promise is found however many newer ticks the job has. A marker whose record no longer
/// promises anything is a stale hint, removed by [`promised_retries`]' reader.
///
/// # Errors
/// The create failed (the promise is then found only among the newest records).
pub async fn promise_retry(
    client: &Ledger,
    paths: &LedgerPaths,
    record: &RunRecord,
) -> Result<(), ClaimError> {
    let marker = paths.retry_marker(&record.job, record.scheduled_unix_ms);
    for _ in 0..2 {
        match client
            .zk()
            .create(WriteKind::Retry, &marker, &[], Mode::Persistent)
            .await
        {
            Ok(_) | Err(Fault::NodeExists) => return Ok(()),
            Err(Fault::NoNode) => {
                let parent = paths.retries_of(&record.job);
                client
                    .zk()
                    .ensure_persistent(&parent)
                    .await
                    .map_err(ClaimError::on(&parent))?;
            }
            Err(source) => {
                return Err(ClaimError::Zk {
                    path: marker,
                    source,
                });
            }
        }
    }
    Err(ClaimError::Zk {
        path: marker,
        source: Fault::NoNode,
    })
}

/// The ticks of `job` marked as promising a retry (foreign names logged and skipped).
///
/// # Errors
/// The listing failed; no markers means none.
pub async fn promised_retries(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
) -> Result<Vec<i64>, ClaimError> {
    let parent = paths.retries_of(job);
    let names = client
        .zk()
        .children_if_there(&parent)
        .await
        .map_err(ClaimError::on(&parent))?;
    let parse = crate::layout::parse_tick_node_name;
    Ok(records::parsed_sorted(
        &parent,
        &names,
        "retry marker",
        false,
        parse,
    ))
}

/// Removes the marker of a retry that is no longer promised.
pub async fn forget_retry(client: &Ledger, paths: &LedgerPaths, job: &JobName, tick: i64) {
    delete_if_there(client, &paths.retry_marker(job, tick), WriteKind::Retry).await;
}

async fn delete_if_there(client: &Ledger, path: &str, kind: WriteKind) {
    if let Err(err) = client.zk().delete_if_there(kind, path, None).await {
        tracing::debug!(path, error = %err, "not deleted");
    }
}

/// Gives a claimed, unstarted tick back — `check(epoch, token)` + delete the record — so that
/// the owner we hand over to can claim and fire it (a planned handoff loses no tick); a
/// submission's pending marker, and a chained run's marks, are made again with it.
///
/// # Errors
/// The epoch moved (someone acquired after us: it is theirs to resolve) or the request failed.
pub async fn withdraw(
    client: &Ledger,
    paths: &LedgerPaths,
    claim: &Claim,
) -> Result<(), ClaimError> {
    let token = claim.record.fencing_token;
    let zk_err = |source| ClaimError::Zk {
        path: claim.path.clone(),
        source,
    };
    // A submission goes back to pending: its marker again, in its bucket.
    let marker = claim.record.marker(&paths.delayed);
    if let (Some(marker), Some(id)) = (&marker, &claim.record.submission_id) {
        let bucket = crate::delayed::submission::DueBucket::of(claim.record.scheduled_unix_ms);
        let parent = paths.delayed.due_shard(bucket, id.shard());
        client
            .zk()
            .ensure_persistent(&parent)
            .await
            .map_err(ClaimError::on(marker))?;
    }
    let mut writer = client
        .zk()
        .fenced(WriteKind::Record, &paths.epoch, Some(token.0))
        .map_err(zk_err)?;
    writer
        .add_delete(&claim.path, Some(claim.version))
        .map_err(zk_err)?;
    if let Some(guard) = &claim.guard {
        writer.add_delete(guard, None).map_err(zk_err)?;
    }
    if let Some(marker) = &marker {
        writer
            .add_create(marker, &[], Mode::Persistent)
            .map_err(zk_err)?;
    }
    if let Some(open) = &claim.open {
        writer.add_delete(open, None).map_err(zk_err)?;
    }
    // A chained run goes back to its parents' marks, which its claim took.
    let marks = chains::marks_taken_by(paths, &claim.record);
    chains::add_creates(&marks, &mut writer).map_err(zk_err)?;
    match writer.commit().await {
        Ok(_) => Ok(()),
        Err(MultiFault::Fenced(_)) => Err(ClaimError::NotOwner { token }),
        Err(MultiFault::Op { fault, .. } | MultiFault::Request(fault)) => Err(zk_err(fault)),
    }
}

/// [`rewrite_record`] by this node holding `token` now (`None`: not the owner): a submission's
/// run open in the delayed queue's PostgreSQL store is taken over there, fenced by `token`, and
/// ended when `closes`; any other record (a run open in ZooKeeper too) is rewritten in ZooKeeper.
///
/// # Errors
/// As [`rewrite_record`]; `NotOwner` for a run in the store without the lock.
pub async fn rewrite_run(
    client: &Ledger,
    paths: &LedgerPaths,
    record: &RunRecord,
    version: i32,
    closes: bool,
    token: Option<crate::ids::FencingToken>,
) -> Result<i32, UpdateError> {
    match client.delayed_store() {
        // A run open in ZooKeeper (claimed there before the queue moved) is rewritten there.
        Some(store) if store_claims::holds_open(store, record).await => {
            store_claims::rewrite(store, record, version, closes, token).await
        }
        _ => rewrite_record(client, paths, record, version, closes).await,
    }
}

/// Writes `record` over the stored one at the version it was read with, so a record that changed
/// meanwhile is never overwritten: an open run a previous owner left behind marked
/// `interrupted`, or a failed run whose promised retry is cancelled or dropped. `closes`: nothing
/// will run it again, so a submission's open marker (format 1) goes in the same multi-op. Returns the
/// record's new version (for a rerun's claim).
///
/// # Errors
/// The record changed (`BadVersion`) or vanished, or the request failed.
pub async fn rewrite_record(
    client: &Ledger,
    paths: &LedgerPaths,
    record: &RunRecord,
    version: i32,
    closes: bool,
) -> Result<i32, UpdateError> {
    let path = record.path(paths);
    let conflict = |path: String| UpdateError::Conflict { path, stored: None };
    let open = match &record.submission_id {
        Some(id) if closes && !record.open_by_record => Some(paths.delayed.open_run(
            &record.job,
            record.scheduled_unix_ms,
            id,
        )),
        _ => None,
    };
    let Some(open) = open else {
        return match client
            .zk()
            .set_data(WriteKind::Record, &path, &record.to_bytes(), Some(version))
            .await
        {
            Ok(stat) => Ok(stat.version),
            Err(Fault::BadVersion | Fault::NoNode) => Err(conflict(path)),
            Err(source) => Err(UpdateError::Zk { path, source }),
        };
    };
    // Nothing will run it again: it is no longer open.
    let mut multi = client.zk().multi(WriteKind::Record);
    multi
        .add_set_data(&path, &record.to_bytes(), Some(version))
        .and_then(|()| multi.add_delete(&open, None))
        .map_err(|source| UpdateError::Zk {
            path: path.clone(),
            source,
        })?;
    match multi.commit().await {
        Ok(results) => match results.first() {
            Some(Written::SetData { stat }) => Ok(stat.version),
            _ => Ok(version + 1),
        },
        Err(MultiFault::Op { .. }) => Err(conflict(path)),
        Err(MultiFault::Request(source) | MultiFault::Fenced(source)) => {
            Err(UpdateError::Zk { path, source })
        }
    }
}

/// Creates the parents of `jobs`' records and guards, so that no tick's claim — sent ahead of
/// its tick — finds them missing and pays for extra round trips at the tick itself.
///
/// # Errors
/// A request failed; existing nodes are fine.
pub async fn ensure_parents<'j>(
    client: &Ledger,
    paths: &LedgerPaths,
    jobs: impl Iterator<Item = &'j JobName>,
) -> Result<(), RequestFailed> {
    client
        .zk()
        .ensure_persistent(&paths.running)
        .await
        .map_err(RequestFailed::on(&paths.running))?;
    let jobs: Vec<&JobName> = jobs.collect();
    ensure_children(client, &paths.runs, &jobs, |job| paths.job_runs(job)).await?;
    let open = |job: &JobName| paths.delayed.open_of(job);
    ensure_children(client, &paths.delayed.open, &jobs, open).await
}

/// Creates of missing parents out at once.
const CREATE_WINDOW: usize = 256;

/// Creates `parent` and, under it, `path_of(job)` for every job whose child is missing: one
/// listing, then only the missing ones, a window at a time. Asking for each child in turn took
/// ten thousand jobs twenty seconds of round trips at every start.
async fn ensure_children(
    client: &Ledger,
    parent: &str,
    jobs: &[&JobName],
    path_of: impl Fn(&JobName) -> String,
) -> Result<(), RequestFailed> {
    client
        .zk()
        .ensure_persistent(parent)
        .await
        .map_err(RequestFailed::on(parent))?;
    let existing: HashSet<String> = client
        .zk()
        .list_children(parent)
        .await
        .map_err(RequestFailed::on(parent))?
        .into_iter()
        .collect();
    let missing: Vec<String> = jobs
        .iter()
        .filter(|job| !existing.contains(job.as_str()))
        .map(|job| path_of(job))
        .collect();
    for window in missing.chunks(CREATE_WINDOW) {
        // A request is sent when it is made: a window of them is pipelined.
        let created: Vec<_> = window
            .iter()
            .map(|path| {
                client
                    .zk()
                    .create(WriteKind::Parents, path, &[], Mode::Persistent)
            })
            .collect();
        for (path, created) in window.iter().zip(created) {
            match created.await {
                Ok(_) | Err(Fault::NodeExists) => {}
                Err(source) => return Err(RequestFailed::on(path)(source)),
            }
        }
    }
    Ok(())
}
