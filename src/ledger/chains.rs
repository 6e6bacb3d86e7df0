//! Chains (`after`) in the ledger: the marks a parent's final record leaves for its children, in
//! the same multi-op, reading a child's marks back for its group's owner, and turning a
//! submitted parent's mark into its child's submission.
//!
//! Owns: the mark's create (its path, data and parent), the listing of `after/<child>`, with
//! foreign names and unreadable marks logged by path and skipped, and the fenced multi-op that
//! takes a submitted parent's mark and submits the child.
//! Must not: decide whether a child runs (the fire machine does); a tick child's claim, which
//! deletes the marks it follows, is the [`ClaimPlan`](super::ClaimPlan)'s.

use super::Ledger;
use super::error::{ClaimError, UpdateError};
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::ids::{FencingToken, JobName};
use crate::layout::{LedgerPaths, MarkName};
use crate::run::{ChainMark, Claim, FoundMark, RunRecord};
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, Multi, MultiFault, Zk};

/// One mark to create with a parent's final record.
#[derive(Debug, Clone)]
pub struct MarkCreate {
    pub path: String,
    /// `after/<child>`, made when the create finds it missing.
    pub dir: String,
    pub data: Vec<u8>,
}

/// The marks `claim`'s final record leaves: one per child the fire machine named, none while
/// the record promises a retry (a retried parent counts once, at its last attempt).
pub fn marks_of(paths: &LedgerPaths, claim: &Claim) -> Vec<MarkCreate> {
    let record = &claim.record;
    if record.retry_at_unix_ms.is_some() {
        return Vec::new();
    }
    let name = MarkName {
        submission: record.submission_id.clone(),
        ..MarkName::of_tick(record.scheduled_unix_ms, &record.job)
    };
    let data = ChainMark {
        payload: claim.payload.as_deref().cloned().unwrap_or_default(),
        trace: record.trace,
        ..ChainMark::of(&record.run_id, record.status)
    }
    .to_bytes();
    claim
        .children
        .iter()
        .map(|child| MarkCreate {
            path: paths.mark(child, &name),
            dir: paths.after_of(child),
            data: data.clone(),
        })
        .collect()
}

/// The marks a chained run's claim took (its `parents`), to make again when the claim is given
/// back unstarted. None for a chained submission's run: its mark was taken when it was
/// submitted, and it goes back to pending.
pub fn marks_taken_by(paths: &LedgerPaths, record: &RunRecord) -> Vec<MarkCreate> {
    if record.submission_id.is_some() {
        return Vec::new();
    }
    record
        .parents
        .iter()
        .map(|parent| MarkCreate {
            path: paths.chain_mark(&record.job, record.scheduled_unix_ms, &parent.job),
            dir: paths.after_of(&record.job),
            data: ChainMark::of(&parent.run_id, parent.status).to_bytes(),
        })
        .collect()
}

/// Adds the creates of `marks` to `multi`.
///
/// # Errors
/// The op could not be built.
pub(super) fn add_creates(marks: &[MarkCreate], multi: &mut Multi<'_>) -> Result<(), Fault> {
    marks
        .iter()
        .try_for_each(|mark| multi.add_create(&mark.path, &mark.data, Mode::Persistent))
}

/// Makes the marks' parents, after a create found one missing.
pub(super) async fn make_dirs(zk: &Zk, marks: &[MarkCreate]) {
    for mark in marks {
        if let Err(err) = zk.ensure_persistent(&mark.dir).await {
            tracing::debug!(path = mark.dir, error = %err, "chain marks' parent not made");
        }
    }
}

/// Chain marks kept per chore at most.
const KEPT_MARKS_PER_CHORE: i64 = 1_000;

/// Makes in ZooKeeper the chain marks the store kept for runs that ended at or before
/// `ended_by_unix_ms` and whose owner never made them (it died between the end and the marks),
/// then lets the store forget them. A mark a child took already is made again: the child's
/// submission under `<parent id>.<child>` is then a resubmit of the same request, which changes
/// nothing. How many are made now (by it, or found made); one whose parent could not be made
/// stays kept for the next chore.
///
/// # Errors
/// `Store` when the store failed; `Zk` when a mark could not be made (the rest wait for the
/// next chore).
pub async fn leave_kept_marks(
    client: &Ledger,
    ended_by_unix_ms: i64,
) -> Result<usize, UpdateError> {
    let Some(store) = client.delayed_store() else {
        return Ok(0);
    };
    let store_failed = |source| UpdateError::Store {
        path: format!("postgres:{}", store.lock_group()),
        source: std::sync::Arc::new(source),
    };
    let kept = store
        .marks_left(ended_by_unix_ms, KEPT_MARKS_PER_CHORE)
        .await
        .map_err(store_failed)?;
    let zk_failed = |path: &str, source| UpdateError::Zk {
        path: path.to_owned(),
        source,
    };
    let mut made = Vec::with_capacity(kept.len());
    for (path, data) in &kept {
        let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir).to_owned();
        let mark = [MarkCreate {
            path: path.clone(),
            dir,
            data: data.clone(),
        }];
        let mut there = false;
        for _ in 0..2 {
            let mut multi = client.zk().multi(WriteKind::Final);
            add_creates(&mark, &mut multi).map_err(|fault| zk_failed(path, fault))?;
            match multi.commit().await {
                Ok(_) => {
                    tracing::warn!(path, "a chain mark its parent's owner left unmade is made");
                    there = true;
                    break;
                }
                // Made by its owner, who died before the store forgot it.
                Err(MultiFault::Op {
                    fault: Fault::NodeExists,
                    ..
                }) => {
                    there = true;
                    break;
                }
                Err(MultiFault::Op {
                    fault: Fault::NoNode,
                    ..
                }) => make_dirs(client.zk(), &mark).await,
                Err(
                    MultiFault::Op { fault, .. }
                    | MultiFault::Request(fault)
                    | MultiFault::Fenced(fault),
                ) => return Err(zk_failed(path, fault)),
            }
        }
        // Its parent still missing: kept for the next chore.
        if there {
            made.push(path.as_str());
        }
    }
    if !made.is_empty() {
        store.marks_made(&made).await.map_err(store_failed)?;
    }
    Ok(made.len())
}

/// Removes the mark at `path`, which nobody will take; one gone already is fine.
///
/// # Errors
/// The delete failed.
pub async fn drop_mark(client: &Ledger, path: &str) -> Result<(), Fault> {
    client
        .zk()
        .delete_if_there(WriteKind::Record, path, None)
        .await
}

/// Mark reads out at once: a listing of thousands of marks (a submitted parent ends a hundred
/// times a second) is read in a few round trips, not one per mark.
const MARK_READ_WINDOW: usize = 256;

/// The marks left for `child`, oldest instant first. Foreign names and unreadable marks are
/// logged with their path and skipped; a mark gone between the listing and its read is not
/// there. The reads are pipelined, 256 at a time.
///
/// # Errors
/// The listing failed (no `after/<child>` means no marks), or a mark's read did.
pub async fn marks_for(
    client: &Ledger,
    paths: &LedgerPaths,
    child: &JobName,
) -> Result<Vec<FoundMark>, ClaimError> {
    let dir = paths.after_of(child);
    let names = client
        .zk()
        .children_if_there(&dir)
        .await
        .map_err(ClaimError::on(&dir))?;
    let named: Vec<(String, MarkName)> = names
        .into_iter()
        .filter_map(|name| {
            let path = format!("{dir}/{name}");
            match MarkName::parse(&name) {
                Some(parsed) => Some((path, parsed)),
                None => {
                    tracing::warn!(path, "not a chain mark's name; skipped");
                    None
                }
            }
        })
        .collect();
    let mut found = Vec::with_capacity(named.len());
    let mut named = named.into_iter().peekable();
    while named.peek().is_some() {
        // A request is sent when it is made: the window goes out before the first answer.
        let window: Vec<_> = named
            .by_ref()
            .take(MARK_READ_WINDOW)
            .map(|(path, parsed)| {
                let read = client.zk().get_data(&path);
                (path, parsed, read)
            })
            .collect();
        for (path, parsed, read) in window {
            let data = match read.await {
                Ok((data, _)) => data,
                Err(Fault::NoNode) => continue,
                Err(source) => return Err(ClaimError::Zk { path, source }),
            };
            match ChainMark::parse(&data) {
                Ok(mark) if mark.format <= crate::formats::CHAIN_MARK => {
                    found.push(FoundMark { name: parsed, mark })
                }
                Ok(mark) => crate::formats::newer_found("chain mark", mark.format, &path),
                Err(err) => tracing::warn!(path, error = %err, "unreadable chain mark; skipped"),
            }
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// What became of a submitted parent's mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildSubmitted {
    /// The mark is taken and the child submitted under this id, due as `submission` says.
    Made(SubmissionId),
    /// The mark was gone: taken already, or removed.
    MarkGone,
}

/// Submits `submission` (the child's) under `id`, taking the mark `mark` left for it, in one
/// multi-op under `check(epoch, token)`: the mark's delete, the child's request and its pending
/// marker, after the creates of the parents they lack (read first: the child's shard of its
/// parent's due bucket is new more often than not). So a mark becomes one submission at most,
/// and a stale owner's attempt writes nothing. An id a submission holds already (the parent's
/// id used again while the child's request is kept) gives way to a generated one.
///
/// # Errors
/// `NotOwner` when the epoch moved past `token`; `Zk` when a request failed (nothing was
/// written: a multi-op is all or nothing).
pub async fn submit_child(
    client: &Ledger,
    paths: &LedgerPaths,
    child: &JobName,
    mark: &MarkName,
    id: SubmissionId,
    submission: &Submission,
    token: FencingToken,
) -> Result<ChildSubmitted, ClaimError> {
    let mark_path = paths.mark(child, mark);
    if let Some(store) = client.delayed_store() {
        return submit_child_to_store(client, paths, store, &mark_path, id, submission, token)
            .await;
    }
    let data = submission.to_bytes();
    let persistent = Mode::Persistent;
    let mut id = id;
    let wanted = [(id.clone(), submission.clone())];
    let mut parents =
        super::parents::absent(client, &super::parents::parents_of(&paths.delayed, &wanted)).await;
    for _ in 0..SUBMIT_ATTEMPTS {
        let request = paths.delayed.submission(&id);
        let marker = paths.delayed.marker_of(&id, submission);
        let zk_err = |path: &str, source| ClaimError::Zk {
            path: path.to_owned(),
            source,
        };
        let mut writer = client
            .zk()
            .fenced(WriteKind::Submit, &paths.epoch, Some(token.0))
            .map_err(|source| zk_err(&paths.epoch, source))?;
        let made = parents.len();
        parents
            .iter()
            .try_for_each(|parent| writer.add_create(parent, &[], persistent))
            .and_then(|()| writer.add_delete(&mark_path, None))
            .and_then(|()| writer.add_create(&request, &data, persistent))
            .and_then(|()| writer.add_create(&marker, &[], persistent))
            .map_err(|source| zk_err(&mark_path, source))?;
        match writer.commit().await {
            Ok(_) => return Ok(ChildSubmitted::Made(id)),
            Err(MultiFault::Fenced(_)) => return Err(ClaimError::NotOwner { token }),
            Err(MultiFault::Op {
                index,
                fault: Fault::NodeExists,
            }) if index < made => {
                // Another session made a parent meanwhile: each is made on its own below.
                parents.clear();
                ensure_parents(client, paths, &id, submission).await?;
            }
            Err(MultiFault::Op { index, fault }) if index >= made => match (index - made, fault) {
                (0, Fault::NoNode) => return Ok(ChildSubmitted::MarkGone),
                (1, Fault::NodeExists) => {
                    tracing::info!(
                        path = request,
                        "a submission holds the child's id already; the child is submitted under a generated one"
                    );
                    id = SubmissionId::generate();
                    parents = super::parents::absent(
                        client,
                        &super::parents::parents_of(
                            &paths.delayed,
                            &[(id.clone(), submission.clone())],
                        ),
                    )
                    .await;
                }
                (_, Fault::NoNode) => {
                    parents.clear();
                    ensure_parents(client, paths, &id, submission).await?;
                }
                (op, source) => {
                    let path = [&mark_path, &request, &marker][op.min(2)];
                    return Err(zk_err(path, source));
                }
            },
            Err(MultiFault::Op { index, fault }) => {
                let path = parents.get(index).unwrap_or(&mark_path);
                return Err(zk_err(path, fault));
            }
            Err(MultiFault::Request(fault)) => {
                return Err(zk_err(&mark_path, fault));
            }
        }
    }
    Err(ClaimError::Zk {
        path: mark_path,
        source: Fault::NoNode,
    })
}

/// [`submit_child`] where the delayed queue is kept in PostgreSQL, where no multi-op spans the
/// mark and the request: the mark is checked under `check(epoch, token)`, the child submitted
/// to the store, then the mark deleted under the same check. The child's id is its parent run's
/// own, so a mark a crash left between the two is submitted again as the same request (a
/// no-op, [`Submitted::AlreadyThere`](crate::delayed::submission::Submitted)) and then taken:
/// one submission, as the multi-op makes it in ZooKeeper. A stale owner submits nothing.
async fn submit_child_to_store(
    client: &Ledger,
    paths: &LedgerPaths,
    store: &super::postgres::PgStore,
    mark_path: &str,
    mut id: SubmissionId,
    submission: &Submission,
    token: FencingToken,
) -> Result<ChildSubmitted, ClaimError> {
    let fenced_mark = |delete: bool| async move {
        let mut writer = client
            .zk()
            .fenced(WriteKind::Submit, &paths.epoch, Some(token.0))
            .map_err(ClaimError::on(&paths.epoch))?;
        let built = if delete {
            writer.add_delete(mark_path, None)
        } else {
            writer.add_check_version(mark_path, -1)
        };
        built.map_err(ClaimError::on(mark_path))?;
        match writer.commit().await {
            Ok(_) => Ok(true),
            Err(MultiFault::Fenced(_)) => Err(ClaimError::NotOwner { token }),
            Err(MultiFault::Op {
                fault: Fault::NoNode,
                ..
            }) => Ok(false),
            Err(MultiFault::Op { fault, .. } | MultiFault::Request(fault)) => {
                Err(ClaimError::on(mark_path)(fault))
            }
        }
    };
    if !fenced_mark(false).await? {
        return Ok(ChildSubmitted::MarkGone);
    }
    let store_failed = |source| ClaimError::Store {
        path: format!("postgres:{}", store.lock_group()),
        source: std::sync::Arc::new(source),
    };
    for _ in 0..SUBMIT_ATTEMPTS {
        match store.submit(&id, submission).await {
            Ok(_) => {
                // Taken meanwhile by another session of ours: it submitted the same request.
                fenced_mark(true).await?;
                return Ok(ChildSubmitted::Made(id));
            }
            Err(super::postgres::StoreError::Conflict { .. }) => {
                tracing::info!(
                    id = %id,
                    "a submission holds the child's id already; the child is submitted under a generated one"
                );
                id = SubmissionId::generate();
            }
            Err(source) => return Err(store_failed(source)),
        }
    }
    Err(store_failed(super::postgres::StoreError::Conflict { id }))
}

/// Makes the parents a child's request and marker need, each on its own.
async fn ensure_parents(
    client: &Ledger,
    paths: &LedgerPaths,
    id: &SubmissionId,
    submission: &Submission,
) -> Result<(), ClaimError> {
    let bucket = DueBucket::of(submission.due_unix_ms);
    for parent in [
        paths.delayed.id_shard(id.shard()),
        paths.delayed.due_shard(bucket, id.shard()),
    ] {
        client
            .zk()
            .ensure_persistent(&parent)
            .await
            .map_err(ClaimError::on(&parent))?;
    }
    Ok(())
}

/// A child's submit meets a missing parent, or a taken id, this many times at most.
const SUBMIT_ATTEMPTS: usize = 4;
