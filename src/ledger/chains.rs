//! Chains (`after`) in the ledger: the marks a parent's final record leaves for its children, in
//! the same multi-op, reading a child's marks back for its group's owner, and turning a
//! submitted parent's mark into its child's submission.
//!
//! Owns: the mark's create (its path, data and parent), the listing of `after/<child>`, with
//! foreign names and unreadable marks logged by path and skipped, and the fenced multi-op that
//! takes a submitted parent's mark and submits the child.
//! Must not: decide whether a child runs (the fire machine does); a tick child's claim, which
//! deletes the marks it follows, is the [`ClaimPlan`](super::ClaimPlan)'s.

use zookeeper_client::{Acls, CheckWriteError, Client, CreateMode, CreateOptions, Error as ZkErr};

use super::error::ClaimError;
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::ids::{FencingToken, JobName};
use crate::layout::{LedgerPaths, MarkName};
use crate::run::{ChainMark, Claim, FoundMark, RunRecord};
use crate::zk::tally::{self, WriteKind};

/// One mark to create with a parent's final record.
#[derive(Debug, Clone)]
pub struct MarkCreate {
    pub path: String,
    /// `after/<child>`, made when the create finds it missing.
    pub dir: String,
    pub data: Vec<u8>,
    pub acls: Acls<'static>,
}

/// The marks `claim`'s final record leaves: one per child the fire machine named, none while
/// the record promises a retry (a retried parent counts once, at its last attempt).
pub fn marks_of(paths: &LedgerPaths, claim: &Claim, acls: Acls<'static>) -> Vec<MarkCreate> {
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
            acls,
        })
        .collect()
}

/// The marks a chained run's claim took (its `parents`), to make again when the claim is given
/// back unstarted. None for a chained submission's run: its mark was taken when it was
/// submitted, and it goes back to pending.
pub fn marks_taken_by(
    paths: &LedgerPaths,
    record: &RunRecord,
    acls: Acls<'static>,
) -> Vec<MarkCreate> {
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
            acls,
        })
        .collect()
}

/// Adds the creates of `marks` to a multi-op through `add` (its `add_create`: a plain multi-op
/// and a fenced one have one each).
///
/// # Errors
/// The op could not be built.
pub(super) fn add_creates(
    marks: &[MarkCreate],
    mut add: impl FnMut(&str, &[u8], &CreateOptions<'_>) -> Result<(), ZkErr>,
) -> Result<(), ZkErr> {
    marks.iter().try_for_each(|mark| {
        let options = CreateMode::Persistent.with_acls(mark.acls);
        add(&mark.path, &mark.data, &options)
    })
}

/// Makes the marks' parents, after a create found one missing.
pub(super) async fn make_dirs(client: &Client, marks: &[MarkCreate]) {
    for mark in marks {
        if let Err(err) = crate::zk::ensure_persistent(client, &mark.dir, mark.acls).await {
            tracing::debug!(path = mark.dir, error = %err, "chain marks' parent not made");
        }
    }
}

/// The marks left for `child`, oldest instant first. Foreign names and unreadable marks are
/// logged with their path and skipped; a mark gone between the listing and its read is not
/// there.
///
/// # Errors
/// The listing failed (no `after/<child>` means no marks).
pub async fn marks_for(
    client: &Client,
    paths: &LedgerPaths,
    child: &JobName,
) -> Result<Vec<FoundMark>, ClaimError> {
    let dir = paths.after_of(child);
    let names = crate::zk::children_if_there(client, &dir)
        .await
        .map_err(ClaimError::on(&dir))?;
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        let path = format!("{dir}/{name}");
        let Some(parsed) = MarkName::parse(&name) else {
            tracing::warn!(path, "not a chain mark's name; skipped");
            continue;
        };
        let data = match client.get_data(&path).await {
            Ok((data, _)) => data,
            Err(ZkErr::NoNode) => continue,
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
    client: &Client,
    paths: &LedgerPaths,
    child: &JobName,
    mark: &MarkName,
    id: SubmissionId,
    submission: &Submission,
    (token, acls): (FencingToken, Acls<'static>),
) -> Result<ChildSubmitted, ClaimError> {
    let mark_path = paths.mark(child, mark);
    let data = submission.to_bytes();
    let options = CreateMode::Persistent.with_acls(acls);
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
            .new_check_writer(&paths.epoch, Some(token.0))
            .map_err(|source| zk_err(&paths.epoch, source))?;
        let made = parents.len();
        parents
            .iter()
            .try_for_each(|parent| writer.add_create(parent, &[], &options))
            .and_then(|()| writer.add_delete(&mark_path, None))
            .and_then(|()| writer.add_create(&request, &data, &options))
            .and_then(|()| writer.add_create(&marker, &[], &options))
            .map_err(|source| zk_err(&mark_path, source))?;
        tally::wrote_checked(WriteKind::Submit, made + 3, 1);
        match writer.commit().await {
            Ok(_) => return Ok(ChildSubmitted::Made(id)),
            Err(CheckWriteError::CheckFailed { .. }) => return Err(ClaimError::NotOwner { token }),
            Err(CheckWriteError::OperationFailed {
                index,
                source: ZkErr::NodeExists,
            }) if index < made => {
                // Another session made a parent meanwhile: each is made on its own below.
                parents.clear();
                ensure_parents(client, paths, &id, submission, acls).await?;
            }
            Err(CheckWriteError::OperationFailed { index, source }) if index >= made => {
                match (index - made, source) {
                    (0, ZkErr::NoNode) => return Ok(ChildSubmitted::MarkGone),
                    (1, ZkErr::NodeExists) => {
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
                    (_, ZkErr::NoNode) => {
                        parents.clear();
                        ensure_parents(client, paths, &id, submission, acls).await?;
                    }
                    (op, source) => {
                        let path = [&mark_path, &request, &marker][op.min(2)];
                        return Err(zk_err(path, source));
                    }
                }
            }
            Err(CheckWriteError::OperationFailed { index, source }) => {
                let path = parents.get(index).unwrap_or(&mark_path);
                return Err(zk_err(path, source));
            }
            Err(CheckWriteError::RequestFailed { source }) => {
                return Err(zk_err(&mark_path, source));
            }
        }
    }
    Err(ClaimError::Zk {
        path: mark_path,
        source: ZkErr::NoNode,
    })
}

/// Makes the parents a child's request and marker need, each on its own.
async fn ensure_parents(
    client: &Client,
    paths: &LedgerPaths,
    id: &SubmissionId,
    submission: &Submission,
    acls: Acls<'static>,
) -> Result<(), ClaimError> {
    let bucket = DueBucket::of(submission.due_unix_ms);
    for parent in [
        paths.delayed.id_shard(id.shard()),
        paths.delayed.due_shard(bucket, id.shard()),
    ] {
        crate::zk::ensure_persistent(client, &parent, acls)
            .await
            .map_err(|err| ClaimError::from_zk(&parent, err))?;
    }
    Ok(())
}

/// A child's submit meets a missing parent, or a taken id, this many times at most.
const SUBMIT_ATTEMPTS: usize = 4;
