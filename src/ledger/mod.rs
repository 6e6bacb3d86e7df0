//! What the lock group records in ZooKeeper about ticks: claims, run records, pruning.
//!
//! Owns: the tick claim — one multi-op that checks the epoch at our fencing token and creates
//! the tick's run record, so a tick fires at most once in the cluster even when two nodes both
//! believe they own the lock (DESIGN.md "ZooKeeper layout") — and the compare-and-set updates of
//! a record through its life, reading records back for `history`, and pruning old ones (with
//! the tombstones that keep a pruned submission's id remembered, `prune` and `forget`).
//! Must not: spawn processes or decide lock policy.

pub mod due;
mod error;
pub mod forget;
pub mod group;
pub mod limits;
mod prune;
mod records;
pub mod submissions;

pub use error::{ClaimError, UpdateError};
pub use prune::{PRUNE_BATCH, Remember, prune};
pub use records::{
    guard_holder, history, jobs_with_records, read_many, read_record, read_versioned,
    read_versioned_checked, record_names, record_names_of, running_jobs, ticks,
};

use std::collections::HashSet;

use zookeeper_client::{Acls, CheckWriteError, CheckWriter, Client, CreateMode, Error as ZkErr};

use crate::ids::{FencingToken, JobName, SessionId};
use crate::zk::tally::{self, WriteKind};

use crate::layout::LedgerPaths;
use crate::run::{Claim, ClaimMode, RunRecord, RunStatus};

/// Claims `record`'s tick in one round trip: `check(epoch, token)` + create the record (or,
/// [`ClaimMode::Again`], overwrite it at its version) [+ create the `running/<job>` guard].
///
/// The request is sent when this is called (so a claim sent ahead of its tick is on the wire
/// while the caller sleeps); only the very first claim of a job, whose parent node is missing,
/// takes a second round trip to create it.
///
/// # Errors
/// `NotOwner` when anyone acquired the lock after us (the check fails); `AlreadyClaimed` when the
/// record exists (or changed since it was read); `RunAlive` when the guard exists; `Zk`
/// otherwise — an expired session fails here with `SessionExpired`.
///
/// # Cancellation safety
/// Dropping the future drops the answer, not the request: the claim may still happen.
pub fn claim<'c>(
    client: &'c Client,
    paths: &LedgerPaths,
    record: RunRecord,
    mode: ClaimMode,
    guarded: bool,
    acls: Acls<'static>,
) -> impl Future<Output = Result<Claim, ClaimError>> + Send + 'c {
    ClaimPlan::new(paths, record, mode, guarded, acls).send_alone(client)
}

type ClaimReply = Result<Vec<zookeeper_client::MultiWriteResult>, CheckWriteError>;

/// One claim, ready to go out alone or in a [`group::GroupCommit`]: the nodes its ops touch, in
/// order — the record, the guard, then a submission's marker delete and open-run create — and
/// how a failure of one of them reads.
#[derive(Debug, Clone)]
pub struct ClaimPlan {
    path: String,
    record: RunRecord,
    /// The record as stored, made once for every send.
    data: Vec<u8>,
    mode: ClaimMode,
    guard: Option<String>,
    pending: Option<PendingSubmission>,
    /// Made once when the record's create fails with `NoNode` (the job's first claim).
    parents: Vec<String>,
    epoch: String,
    acls: Acls<'static>,
}

/// A submission's claim also takes it out of `pending`, and (for a run) marks it open.
#[derive(Debug, Clone)]
struct PendingSubmission {
    marker: String,
    open: Option<String>,
}

impl ClaimPlan {
    /// The claim of `record`'s tick (or submission) at its fencing token.
    pub fn new(
        paths: &LedgerPaths,
        record: RunRecord,
        mode: ClaimMode,
        guarded: bool,
        acls: Acls<'static>,
    ) -> Self {
        let mut parents = vec![paths.job_runs(&record.job), paths.running.clone()];
        let pending = match (&record.submission_id, mode) {
            (Some(id), ClaimMode::Create) => {
                let open = (record.status == RunStatus::Claimed).then(|| {
                    paths
                        .delayed
                        .open_run(&record.job, record.scheduled_unix_ms, id)
                });
                parents.push(paths.delayed.open_of(&record.job));
                Some(PendingSubmission {
                    marker: paths.delayed.pending(
                        record.scheduled_unix_ms,
                        id,
                        record.marker_job(),
                    ),
                    open,
                })
            }
            _ => None,
        };
        Self {
            path: record.path(paths),
            guard: guarded.then(|| paths.running(&record.job)),
            data: record.to_bytes(),
            record,
            mode,
            pending,
            parents,
            epoch: paths.epoch.clone(),
            acls,
        }
    }

    /// The path of the tick's run record.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The fencing token the claim checks the epoch at: claims in one group share it.
    pub fn token(&self) -> FencingToken {
        self.record.fencing_token
    }

    /// How many ops [`ClaimPlan::add_ops`] adds.
    fn op_count(&self) -> usize {
        1 + usize::from(self.guard.is_some())
            + self
                .pending
                .as_ref()
                .map_or(0, |pending| 1 + usize::from(pending.open.is_some()))
    }

    /// About how many bytes its ops take in a request.
    fn request_size(&self) -> usize {
        let nodes = self.path.len()
            + self.guard.as_ref().map_or(0, String::len)
            + self.pending.as_ref().map_or(0, |pending| {
                pending.marker.len() + pending.open.as_ref().map_or(0, String::len)
            });
        // Each op adds an ACL and a header.
        nodes + self.data.len() + 64 * self.op_count()
    }

    fn add_ops(&self, writer: &mut CheckWriter<'_>) -> Result<(), ZkErr> {
        let options = CreateMode::Persistent.with_acls(self.acls);
        match self.mode {
            ClaimMode::Create => writer.add_create(&self.path, &self.data, &options)?,
            ClaimMode::Again { version } => {
                writer.add_set_data(&self.path, &self.data, Some(version))?;
            }
        }
        if let Some(guard) = &self.guard {
            writer.add_create(
                guard,
                self.record.run_id.as_bytes(),
                &CreateMode::Ephemeral.with_acls(self.acls),
            )?;
        }
        if let Some(pending) = &self.pending {
            writer.add_delete(&pending.marker, None)?;
            if let Some(open) = &pending.open {
                writer.add_create(open, &[], &options)?;
            }
        }
        Ok(())
    }

    /// Builds and sends the claim's own multi; the returned future only awaits the reply.
    fn send<'c>(
        &self,
        client: &'c Client,
    ) -> Result<impl Future<Output = ClaimReply> + Send + use<'c>, CheckWriteError> {
        let mut writer = client.new_check_writer(&self.epoch, Some(self.token().0))?;
        self.add_ops(&mut writer)?;
        tally::wrote_checked(WriteKind::Claim, self.op_count(), 1);
        Ok(writer.commit())
    }

    /// Sends the claim in a multi of its own (see [`claim`]).
    pub fn send_alone<'c>(
        self,
        client: &'c Client,
    ) -> impl Future<Output = Result<Claim, ClaimError>> + Send + 'c {
        let session = SessionId(client.session_id().0);
        let first = self.send(client);
        async move {
            let result = match first {
                Ok(sent) => sent.await,
                Err(err) => Err(err),
            };
            let results = match self.classify(result) {
                Err(ClaimError::Zk {
                    source: ZkErr::NoNode,
                    ..
                }) if self.mode == ClaimMode::Create => {
                    // The job's first tick: make the parents, then claim once more.
                    for dir in &self.parents {
                        crate::zk::ensure_persistent(client, dir, self.acls)
                            .await
                            .map_err(|err| ClaimError::from_zk(dir, err))?;
                    }
                    let result = match self.send(client) {
                        Ok(sent) => sent.await,
                        Err(err) => Err(err),
                    };
                    self.classify(result)?
                }
                other => other?,
            };
            Ok(self.into_claim(&results, session))
        }
    }

    /// The multi's results, or why the claim failed: the epoch check (`NotOwner`), the record's
    /// create or compare-and-set (`AlreadyClaimed`: it exists, or changed since it was read),
    /// the guard's create (`RunAlive`), the submission's marker delete (`AlreadyClaimed`: claimed
    /// by another node, or cancelled). An `OperationFailed` index counts this claim's ops only.
    fn classify(
        &self,
        result: ClaimReply,
    ) -> Result<Vec<zookeeper_client::MultiWriteResult>, ClaimError> {
        let record = &self.record;
        let marker_index = self
            .pending
            .as_ref()
            .map(|_| 1 + usize::from(self.guard.is_some()));
        match result {
            Ok(results) => Ok(results),
            Err(CheckWriteError::OperationFailed {
                index,
                source: ZkErr::NoNode,
            }) if Some(index) == marker_index => Err(ClaimError::AlreadyClaimed {
                job: record.job.clone(),
                scheduled_unix_ms: record.scheduled_unix_ms,
            }),
            Err(CheckWriteError::CheckFailed {
                source: ZkErr::BadVersion | ZkErr::NoNode,
            }) => Err(ClaimError::NotOwner {
                token: record.fencing_token,
            }),
            Err(CheckWriteError::CheckFailed { source }) => Err(ClaimError::Zk {
                path: self.epoch.clone(),
                source,
            }),
            Err(CheckWriteError::OperationFailed {
                index: 0,
                source: ZkErr::NodeExists | ZkErr::BadVersion,
            }) => Err(ClaimError::AlreadyClaimed {
                job: record.job.clone(),
                scheduled_unix_ms: record.scheduled_unix_ms,
            }),
            // The guard exists: a run of the job is alive somewhere (concurrency = forbid).
            Err(CheckWriteError::OperationFailed {
                index: 1,
                source: ZkErr::NodeExists,
            }) if self.guard.is_some() => Err(ClaimError::RunAlive {
                job: record.job.clone(),
            }),
            Err(
                CheckWriteError::OperationFailed { source, .. }
                | CheckWriteError::RequestFailed { source },
            ) => Err(ClaimError::Zk {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Whether this claim, sent from `session` without an answer (see
    /// [`ClaimError::unanswered`]), was applied, read back from its record: `Some(claim)` when
    /// the record is exactly what was sent (its guard, marker and open-run create went with
    /// it: a multi is all or nothing), `None` when nothing of it was applied (no record, or
    /// the record claimed again still at the version we claimed it at).
    ///
    /// A read that waits for the session to connect again is the standard way out of an
    /// unknown outcome. The `sync` first: the server we reconnected to may be behind the leader
    /// that applied the multi; a request of the old connection that reaches the leader after
    /// the session moved is refused (`SessionMoved`), so it cannot land after this read.
    ///
    /// # Errors
    /// `AlreadyClaimed` when the record is someone else's; `Zk` when the read failed (the
    /// outcome is still unknown: read again).
    pub async fn read_back(
        &self,
        client: &Client,
        session: SessionId,
    ) -> Result<Option<Claim>, ClaimError> {
        let zk_err = |source| ClaimError::Zk {
            path: self.path.clone(),
            source,
        };
        client.sync(&self.path).await.map_err(zk_err)?;
        let (data, stat) = match client.get_data(&self.path).await {
            Ok(found) => found,
            Err(ZkErr::NoNode) => return Ok(None),
            Err(source) => return Err(zk_err(source)),
        };
        if data == self.data {
            return Ok(Some(self.clone().claim_at(stat.version, session)));
        }
        match self.mode {
            ClaimMode::Again { version } if stat.version == version => Ok(None),
            _ => Err(ClaimError::AlreadyClaimed {
                job: self.record.job.clone(),
                scheduled_unix_ms: self.record.scheduled_unix_ms,
            }),
        }
    }

    /// Why the claim failed, for a multi that failed as a whole (its check or its request).
    fn refusal(&self, err: CheckWriteError) -> ClaimError {
        match self.classify(Err(err)) {
            Err(refused) => refused,
            Ok(_) => ClaimError::Zk {
                path: self.path.clone(),
                source: ZkErr::UnexpectedError("a failed multi read as a success".into()),
            },
        }
    }

    /// The claim made, from this claim's share of the multi's results.
    fn into_claim(
        self,
        results: &[zookeeper_client::MultiWriteResult],
        session: SessionId,
    ) -> Claim {
        let version = match (self.mode, results.first()) {
            // A node just created has data version 0.
            (ClaimMode::Create, _) => 0,
            (
                ClaimMode::Again { .. },
                Some(zookeeper_client::MultiWriteResult::SetData { stat }),
            ) => stat.version,
            (ClaimMode::Again { version }, _) => version + 1,
        };
        self.claim_at(version, session)
    }

    /// The claim made, its record stored at `version`.
    fn claim_at(self, version: i32, session: SessionId) -> Claim {
        let open = self.pending.and_then(|pending| pending.open);
        Claim {
            path: self.path,
            version,
            sent: self.record.clone(),
            record: self.record,
            guard: self.guard,
            open,
            session,
        }
    }
}

/// Writes `claim.record` over the stored record if nobody else changed it since we did.
///
/// # Errors
/// `Conflict` when the record's version moved (another node marked it, e.g. as interrupted);
/// `Zk` when the request failed. Callers log both: an update is never silently dropped.
pub async fn update(client: &Client, claim: &mut Claim) -> Result<(), UpdateError> {
    set_record(client, claim, WriteKind::Start).await
}

/// [`update`], counted as `kind`.
async fn set_record(
    client: &Client,
    claim: &mut Claim,
    kind: WriteKind,
) -> Result<(), UpdateError> {
    let zk_err = |source| UpdateError::Zk {
        path: claim.path.clone(),
        source,
    };
    for _ in 0..2 {
        let previous = std::mem::replace(&mut claim.sent, claim.record.clone());
        tally::wrote(kind, 1);
        match client
            .set_data(&claim.path, &claim.record.to_bytes(), Some(claim.version))
            .await
        {
            Ok(stat) => {
                claim.version = stat.version;
                return Ok(());
            }
            Err(ZkErr::BadVersion) => {
                // Only our own earlier write, whose reply was lost, may have moved the version:
                // then the stored record is exactly what we sent before. Anything else is
                // someone else's change, and it is kept.
                let (data, stat) = client.get_data(&claim.path).await.map_err(zk_err)?;
                let stored = RunRecord::parse(&data).ok();
                if stored.as_ref() != Some(&previous) {
                    return Err(UpdateError::Conflict {
                        path: claim.path.clone(),
                        stored: stored.map(|record| record.status),
                    });
                }
                claim.version = stat.version;
            }
            Err(ZkErr::NoNode) => break,
            Err(source) => return Err(zk_err(source)),
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
pub async fn finish(client: &Client, claim: &mut Claim) -> Result<(), UpdateError> {
    let same_session = SessionId(client.session_id().0) == claim.session;
    let guard = claim.guard.clone().filter(|_| same_session);
    let extras: Vec<String> = claim.final_deletes(same_session).cloned().collect();
    if !extras.is_empty() {
        let mut multi = client.new_multi_writer();
        let built = multi
            .add_set_data(&claim.path, &claim.record.to_bytes(), Some(claim.version))
            .and_then(|()| {
                extras
                    .iter()
                    .try_for_each(|path| multi.add_delete(path, None))
            });
        if built.is_ok() {
            tally::wrote(WriteKind::Final, 1 + extras.len());
            match multi.commit().await {
                Ok(results) => {
                    if let Some(zookeeper_client::MultiWriteResult::SetData { stat }) =
                        results.first()
                    {
                        claim.version = stat.version;
                    }
                    return Ok(());
                }
                // The record moved (a lost reply of ours, or another writer), or a node to
                // delete is gone: one by one below.
                Err(zookeeper_client::MultiWriteError::OperationFailed { .. }) => {}
                Err(zookeeper_client::MultiWriteError::RequestFailed { source }) => {
                    tracing::debug!(path = claim.path, error = %source, "final record not written with its guard");
                }
            }
        }
    }
    // A record whose reply was lost, with the guard still ours: release the guard alone.
    if let Some(guard) = &guard {
        delete_own_guard(client, guard, &claim.record.run_id).await;
    }
    set_record(client, claim, WriteKind::Final).await?;
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
    client: &Client,
    paths: &LedgerPaths,
    record: &RunRecord,
    acls: Acls<'static>,
) -> Result<(), ClaimError> {
    let marker = paths.retry_marker(&record.job, record.scheduled_unix_ms);
    let options = CreateMode::Persistent.with_acls(acls);
    for _ in 0..2 {
        tally::wrote(WriteKind::Retry, 1);
        match client.create(&marker, &[], &options).await {
            Ok(_) | Err(ZkErr::NodeExists) => return Ok(()),
            Err(ZkErr::NoNode) => {
                let parent = paths.retries_of(&record.job);
                crate::zk::ensure_persistent(client, &parent, acls)
                    .await
                    .map_err(|err| ClaimError::from_zk(&parent, err))?;
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
        source: ZkErr::NoNode,
    })
}

/// The ticks of `job` marked as promising a retry (foreign names logged and skipped).
///
/// # Errors
/// The listing failed; no markers means none.
pub async fn promised_retries(
    client: &Client,
    paths: &LedgerPaths,
    job: &JobName,
) -> Result<Vec<i64>, ClaimError> {
    let parent = paths.retries_of(job);
    let names = crate::zk::children_if_there(client, &parent)
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
pub async fn forget_retry(client: &Client, paths: &LedgerPaths, job: &JobName, tick: i64) {
    delete_if_there(client, &paths.retry_marker(job, tick), WriteKind::Retry).await;
}

/// Deletes the `running/<job>` guard of a claim that will never start (the lock moved between
/// the claim and its start, or its withdrawal was refused) — only when the guard is our session's
/// own node: a forbid job's guard left behind by a live session would keep every next owner from
/// running the job. The record stays `claimed`, for the next owner to resolve.
///
/// Returns whether that is settled: the guard is gone, or is not ours (another session's, or
/// another run's); `false` when ZooKeeper did not answer, and the release is worth sending again.
pub async fn release_unstarted_guard(client: &Client, claim: &Claim) -> bool {
    if SessionId(client.session_id().0) != claim.session {
        // The guard went with the session that made it.
        return true;
    }
    match &claim.guard {
        Some(guard) => delete_own_guard(client, guard, &claim.record.run_id).await,
        None => true,
    }
}

/// Makes the `running/<job>` guard of `claim`'s run, which was claimed without one and outlives
/// our hold of the lock, on the session that claimed it; the guard's path when our session holds
/// it now. `None` when that session is gone (its guard would have gone with it), and when the
/// guard is another run's (logged: a run of the job is alive elsewhere too).
///
/// # Errors
/// The request failed.
pub async fn take_guard(
    client: &Client,
    paths: &LedgerPaths,
    claim: &Claim,
    acls: Acls<'static>,
) -> Result<Option<String>, ClaimError> {
    let session = client.session_id().0;
    if SessionId(session) != claim.session {
        return Ok(None);
    }
    let path = paths.running(&claim.record.job);
    let run_id = claim.record.run_id.as_bytes();
    tally::wrote(WriteKind::Guard, 1);
    match client
        .create(&path, run_id, &CreateMode::Ephemeral.with_acls(acls))
        .await
    {
        Ok(_) => Ok(Some(path)),
        Err(ZkErr::NodeExists) => match client.get_data(&path).await {
            // Ours: a reply lost before.
            Ok((data, stat)) if stat.ephemeral_owner == session && data == run_id => Ok(Some(path)),
            Ok((data, _)) => {
                tracing::warn!(path, holder = %String::from_utf8_lossy(&data), run_id = claim.record.run_id, "the guard is another run's: a run of the job is alive elsewhere too");
                Ok(None)
            }
            Err(ZkErr::NoNode) => Ok(None),
            Err(source) => Err(ClaimError::Zk { path, source }),
        },
        Err(source) => Err(ClaimError::Zk { path, source }),
    }
}

/// Deletes the guard at `path` if it is still run `run_id`'s, made by our session; whether that
/// is settled (see [`release_unstarted_guard`]). A delete after a lost reply must not take a
/// guard made since: a peer's (another session), or our own next run's (another run id). Only
/// the session that made a guard deletes it, so one read as this run's stays so until we delete
/// it.
async fn delete_own_guard(client: &Client, path: &str, run_id: &str) -> bool {
    let (data, stat) = match client.get_data(path).await {
        Ok(read) => read,
        Err(ZkErr::NoNode) => return true,
        Err(err) => {
            tracing::debug!(path, error = %err, "not deleted");
            return false;
        }
    };
    if stat.ephemeral_owner != client.session_id().0 || data != run_id.as_bytes() {
        return true;
    }
    tally::wrote(WriteKind::Guard, 1);
    match crate::zk::delete_if_there(client, path, Some(stat.version)).await {
        Ok(()) => true,
        Err(err) => {
            tracing::debug!(path, error = %err, "not deleted");
            false
        }
    }
}

async fn delete_if_there(client: &Client, path: &str, kind: WriteKind) {
    tally::wrote(kind, 1);
    if let Err(err) = crate::zk::delete_if_there(client, path, None).await {
        tracing::debug!(path, error = %err, "not deleted");
    }
}

/// Gives a claimed, unstarted tick back — `check(epoch, token)` + delete the record — so that
/// the owner we hand over to can claim and fire it (a planned handoff loses no tick).
///
/// # Errors
/// The epoch moved (someone acquired after us: it is theirs to resolve) or the request failed.
pub async fn withdraw(
    client: &Client,
    paths: &LedgerPaths,
    claim: &Claim,
    acls: Acls<'static>,
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
        crate::zk::ensure_persistent(client, &parent, acls)
            .await
            .map_err(|err| ClaimError::from_zk(marker, err))?;
    }
    let mut writer = client
        .new_check_writer(&paths.epoch, Some(token.0))
        .map_err(zk_err)?;
    writer
        .add_delete(&claim.path, Some(claim.version))
        .map_err(zk_err)?;
    if let Some(guard) = &claim.guard {
        writer.add_delete(guard, None).map_err(zk_err)?;
    }
    if let Some(marker) = &marker {
        let options = CreateMode::Persistent.with_acls(acls);
        writer.add_create(marker, &[], &options).map_err(zk_err)?;
    }
    if let Some(open) = &claim.open {
        writer.add_delete(open, None).map_err(zk_err)?;
    }
    let ops = 1
        + usize::from(claim.guard.is_some())
        + usize::from(marker.is_some())
        + usize::from(claim.open.is_some());
    tally::wrote_checked(WriteKind::Record, ops, 1);
    match writer.commit().await {
        Ok(_) => Ok(()),
        Err(CheckWriteError::CheckFailed { .. }) => Err(ClaimError::NotOwner { token }),
        Err(
            CheckWriteError::OperationFailed { source, .. }
            | CheckWriteError::RequestFailed { source },
        ) => Err(zk_err(source)),
    }
}

/// Writes `record` over the stored one at the version it was read with, so a record that changed
/// meanwhile is never overwritten: an open run a previous owner left behind marked
/// `interrupted`, or a failed run whose promised retry is cancelled or dropped. `closes`: nothing
/// will run it again, so a submission's open marker goes in the same multi-op. Returns the
/// record's new version (for a rerun's claim).
///
/// # Errors
/// The record changed (`BadVersion`) or vanished, or the request failed.
pub async fn rewrite_record(
    client: &Client,
    paths: &LedgerPaths,
    record: &RunRecord,
    version: i32,
    closes: bool,
) -> Result<i32, UpdateError> {
    let path = record.path(paths);
    let conflict = |path: String| UpdateError::Conflict { path, stored: None };
    let open = match &record.submission_id {
        Some(id) if closes => Some(paths.delayed.open_run(
            &record.job,
            record.scheduled_unix_ms,
            id,
        )),
        _ => None,
    };
    let Some(open) = open else {
        tally::wrote(WriteKind::Record, 1);
        return match client
            .set_data(&path, &record.to_bytes(), Some(version))
            .await
        {
            Ok(stat) => Ok(stat.version),
            Err(ZkErr::BadVersion | ZkErr::NoNode) => Err(conflict(path)),
            Err(source) => Err(UpdateError::Zk { path, source }),
        };
    };
    // Nothing will run it again: it is no longer open.
    let mut multi = client.new_multi_writer();
    multi
        .add_set_data(&path, &record.to_bytes(), Some(version))
        .and_then(|()| multi.add_delete(&open, None))
        .map_err(|source| UpdateError::Zk {
            path: path.clone(),
            source,
        })?;
    tally::wrote(WriteKind::Record, 2);
    match multi.commit().await {
        Ok(results) => match results.first() {
            Some(zookeeper_client::MultiWriteResult::SetData { stat }) => Ok(stat.version),
            _ => Ok(version + 1),
        },
        Err(zookeeper_client::MultiWriteError::OperationFailed { .. }) => Err(conflict(path)),
        Err(zookeeper_client::MultiWriteError::RequestFailed { source }) => {
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
    client: &Client,
    paths: &LedgerPaths,
    jobs: impl Iterator<Item = &'j JobName>,
    acls: Acls<'_>,
) -> Result<(), crate::zk::ZkError> {
    crate::zk::ensure_persistent(client, &paths.running, acls).await?;
    let jobs: Vec<&JobName> = jobs.collect();
    ensure_children(client, &paths.runs, &jobs, |job| paths.job_runs(job), acls).await?;
    let open = |job: &JobName| paths.delayed.open_of(job);
    ensure_children(client, &paths.delayed.open, &jobs, open, acls).await
}

/// Creates of missing parents out at once.
const CREATE_WINDOW: usize = 256;

/// Creates `parent` and, under it, `path_of(job)` for every job whose child is missing: one
/// listing, then only the missing ones, a window at a time. Asking for each child in turn took
/// ten thousand jobs twenty seconds of round trips at every start.
async fn ensure_children(
    client: &Client,
    parent: &str,
    jobs: &[&JobName],
    path_of: impl Fn(&JobName) -> String,
    acls: Acls<'_>,
) -> Result<(), crate::zk::ZkError> {
    crate::zk::ensure_persistent(client, parent, acls).await?;
    let request_err = |path: &str, source| crate::zk::ZkError::Request {
        path: path.to_owned(),
        source,
    };
    let existing: HashSet<String> = client
        .list_children(parent)
        .await
        .map_err(|source| request_err(parent, source))?
        .into_iter()
        .collect();
    let missing: Vec<String> = jobs
        .iter()
        .filter(|job| !existing.contains(job.as_str()))
        .map(|job| path_of(job))
        .collect();
    let options = CreateMode::Persistent.with_acls(acls);
    for window in missing.chunks(CREATE_WINDOW) {
        // The client sends a request when it is made: a window of them is pipelined.
        let created: Vec<_> = window
            .iter()
            .map(|path| {
                tally::wrote(WriteKind::Parents, 1);
                client.create(path, &[], &options)
            })
            .collect();
        for (path, created) in window.iter().zip(created) {
            match created.await {
                Ok(_) | Err(ZkErr::NodeExists) => {}
                Err(source) => return Err(request_err(path, source)),
            }
        }
    }
    Ok(())
}
