//! The claim of a tick or a submission: one fenced multi-op, built once ([`ClaimPlan`]) and sent
//! alone or in a group commit, with what its failure means and how an unanswered one is read
//! back.
//!
//! Owns: the ops of a claim — `check(epoch, token)`, the record's create (or compare-and-set),
//! a `forbid` job's guard, a submission's marker delete and open-run create — and their order.
//! Must not: decide whether to claim (the fire machine does) or retry on its own.

use super::Ledger;
use std::future::Future;

use crate::ids::{FencingToken, SessionId};
use crate::layout::LedgerPaths;
use crate::run::{Claim, ClaimMode, RunRecord, RunStatus};
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, Multi, MultiFault, Written, Zk};

use super::ClaimError;

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
    client: &'c Ledger,
    paths: &LedgerPaths,
    record: RunRecord,
    mode: ClaimMode,
    guarded: bool,
) -> impl Future<Output = Result<Claim, ClaimError>> + Send + 'c {
    ClaimPlan::new(paths, record, mode, guarded, OpenRuns::ByRecord).send_alone(client)
}

/// How a submission's claimed run shows as open until its final record — the ledger's format,
/// which every node that may own the lock next must read ([`crate::layout::LEDGER_FORMAT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenRuns {
    /// Format 1: an `open/<job>/<due>-<id>` marker, made by the claim and deleted by the final
    /// record. Two more write ops a run; what a zkcron before format 2 reads.
    Marked,
    /// Format 2: by its record alone (`open_by_record`), which a next owner reads among the
    /// job's records.
    ByRecord,
}

type ClaimReply = Result<Vec<Written>, MultiFault>;

/// One claim, ready to go out alone or in a [`GroupCommit`](super::group::GroupCommit): the nodes its ops touch, in
/// order — the record, the guard, then a submission's marker delete and open-run create — and
/// how a failure of one of them reads.
#[derive(Debug, Clone)]
pub struct ClaimPlan {
    pub(super) path: String,
    record: RunRecord,
    /// The record as stored, made once for every send.
    data: Vec<u8>,
    mode: ClaimMode,
    guard: Option<String>,
    pending: Option<PendingSubmission>,
    /// The open marker a format 1 run claimed again still has.
    marked_before: Option<String>,
    /// A chained run's first claim: the marks of the parents' runs it follows, deleted by it
    /// (one gone: another claim took them).
    follows: Vec<String>,
    /// Made once when the record's create fails with `NoNode` (the job's first claim).
    parents: Vec<String>,
    /// The node the claim checks: the epoch (at the token), or a broadcast run's member znode.
    pub(super) epoch: String,
    /// A broadcast run's claim: `epoch` is the member znode, checked at any version.
    by_member: bool,
}

/// A submission's claim also takes it out of `pending`, and (for a run in format 1) marks it
/// open.
#[derive(Debug, Clone)]
struct PendingSubmission {
    marker: String,
    open: Option<String>,
}

impl ClaimPlan {
    /// The claim of `record`'s tick (or submission) at its fencing token; a submission's run
    /// shows as open as `open_runs` says.
    pub fn new(
        paths: &LedgerPaths,
        mut record: RunRecord,
        mode: ClaimMode,
        guarded: bool,
        open_runs: OpenRuns,
    ) -> Self {
        let mut parents = vec![paths.job_runs(&record.job), paths.running.clone()];
        // A format 1 run claimed again (a retry, a rerun) still has its marker, which its final
        // record deletes.
        let marked_before = match (&record.submission_id, mode) {
            (Some(id), ClaimMode::Again { .. }) if !record.open_by_record => Some(
                paths
                    .delayed
                    .open_run(&record.job, record.scheduled_unix_ms, id),
            ),
            _ => None,
        };
        let pending = match (&record.submission_id, mode) {
            (Some(id), ClaimMode::Create) => {
                let run = matches!(record.status, RunStatus::Claimed | RunStatus::Running);
                record.open_by_record = run && open_runs == OpenRuns::ByRecord;
                let open = (run && !record.open_by_record).then(|| {
                    paths
                        .delayed
                        .open_run(&record.job, record.scheduled_unix_ms, id)
                });
                if open.is_some() {
                    parents.push(paths.delayed.open_of(&record.job));
                }
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
        // A chained submission's mark went when it was submitted.
        let follows = match mode {
            ClaimMode::Create if record.submission_id.is_none() => record
                .parents
                .iter()
                .map(|parent| paths.chain_mark(&record.job, record.scheduled_unix_ms, &parent.job))
                .collect(),
            _ => Vec::new(),
        };
        Self {
            path: record.path(paths),
            guard: guarded.then(|| paths.running(&record.job)),
            follows,
            data: record.to_bytes(),
            record,
            mode,
            pending,
            marked_before,
            parents,
            epoch: paths.epoch.clone(),
            by_member: false,
        }
    }

    /// A broadcast run's claim (issue 36): fenced by `member`, this node's ephemeral member
    /// znode, instead of the epoch, so a node whose session has gone claims nothing however
    /// long it was frozen; `NotOwner` then says the member znode is gone.
    #[must_use]
    pub fn fenced_by_member(mut self, member: String) -> Self {
        self.epoch = member;
        self.by_member = true;
        self
    }

    /// The path of the tick's run record.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The record the claim writes.
    pub(super) fn record(&self) -> &RunRecord {
        &self.record
    }

    /// Created, or written again at a version.
    pub(super) fn mode(&self) -> ClaimMode {
        self.mode
    }

    /// The `running/<job>` guard the claim takes (`concurrency = "forbid"`).
    pub(super) fn guard_path(&self) -> Option<&str> {
        self.guard.as_deref()
    }

    /// The node the claim's check reads: the epoch, or a broadcast run's member znode.
    pub(super) fn epoch(&self) -> &str {
        &self.epoch
    }

    /// A submission's run: its claim, records and end go to the delayed queue's store.
    pub(super) fn is_submission(&self) -> bool {
        self.record.submission_id.is_some() && !self.by_member
    }

    /// Whether `err` says the stored record of a scheduled tick this claim would write over is
    /// gone (its `Again` found no node): nothing stands for the tick any more. A submission's
    /// or a chained run's record has its own way back (a pending marker, its parents' marks).
    pub fn record_vanished(&self, err: &ClaimError) -> bool {
        matches!(self.mode, ClaimMode::Again { .. })
            && self.record.submission_id.is_none()
            && self.record.parents.is_empty()
            && !self.by_member
            && matches!(
                err,
                ClaimError::Zk {
                    source: Fault::NoNode,
                    ..
                }
            )
    }

    /// The fencing token the claim checks the epoch at: claims in one group share it.
    pub fn token(&self) -> FencingToken {
        self.record.fencing_token
    }

    /// How many ops [`ClaimPlan::add_ops`] adds.
    pub(super) fn op_count(&self) -> usize {
        self.ops_before_follows() + self.follows.len()
    }

    /// The ops before the chain marks' deletes.
    fn ops_before_follows(&self) -> usize {
        1 + usize::from(self.guard.is_some())
            + self
                .pending
                .as_ref()
                .map_or(0, |pending| 1 + usize::from(pending.open.is_some()))
    }

    /// About how many bytes its ops take in a request.
    pub(super) fn request_size(&self) -> usize {
        let nodes = self.path.len()
            + self.guard.as_ref().map_or(0, String::len)
            + self.pending.as_ref().map_or(0, |pending| {
                pending.marker.len() + pending.open.as_ref().map_or(0, String::len)
            })
            + self.follows.iter().map(String::len).sum::<usize>();
        // Each op adds an ACL and a header.
        nodes + self.data.len() + 64 * self.op_count()
    }

    /// The version the claim's check expects of its fence: the token's, or any for a member.
    pub(super) fn fence_version(&self) -> Option<i32> {
        (!self.by_member).then_some(self.token().0)
    }

    pub(super) fn add_ops(&self, writer: &mut Multi<'_>) -> Result<(), Fault> {
        let persistent = Mode::Persistent;
        match self.mode {
            ClaimMode::Create => writer.add_create(&self.path, &self.data, persistent)?,
            ClaimMode::Again { version } => {
                writer.add_set_data(&self.path, &self.data, Some(version))?;
            }
        }
        if let Some(guard) = &self.guard {
            writer.add_create(guard, self.record.run_id.as_bytes(), Mode::Ephemeral)?;
        }
        if let Some(pending) = &self.pending {
            writer.add_delete(&pending.marker, None)?;
            if let Some(open) = &pending.open {
                writer.add_create(open, &[], persistent)?;
            }
        }
        for mark in &self.follows {
            writer.add_delete(mark, None)?;
        }
        Ok(())
    }

    /// Builds and sends the claim's own multi; the returned future only awaits the reply.
    fn send<'c>(
        &self,
        client: &'c Zk,
    ) -> Result<impl Future<Output = ClaimReply> + Send + use<'c>, MultiFault> {
        let mut writer = client
            .fenced(WriteKind::Claim, &self.epoch, self.fence_version())
            .map_err(MultiFault::Request)?;
        self.add_ops(&mut writer).map_err(MultiFault::Request)?;
        Ok(writer.unbounded().commit())
    }

    /// Sends the claim in a multi of its own (see [`claim`]).
    pub fn send_alone<'c>(
        self,
        ledger: &'c Ledger,
    ) -> impl Future<Output = Result<Claim, ClaimError>> + Send + 'c {
        let session = ledger.session();
        let client = ledger.zk();
        let first = self.send(client);
        async move {
            let result = match first {
                Ok(sent) => sent.await,
                Err(err) => Err(err),
            };
            let results = match self.classify(result) {
                Err(ClaimError::Zk {
                    source: Fault::NoNode,
                    ..
                }) if self.mode == ClaimMode::Create => {
                    // The job's first tick: make the parents, then claim once more.
                    for dir in &self.parents {
                        client
                            .ensure_persistent(dir)
                            .await
                            .map_err(ClaimError::on(dir))?;
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
    pub(super) fn classify(&self, result: ClaimReply) -> Result<Vec<Written>, ClaimError> {
        let record = &self.record;
        let marker_index = self
            .pending
            .as_ref()
            .map(|_| 1 + usize::from(self.guard.is_some()));
        let follows = self.ops_before_follows()..self.op_count();
        match result {
            Ok(results) => Ok(results),
            Err(MultiFault::Op {
                index,
                fault: Fault::NoNode,
            }) if Some(index) == marker_index || follows.contains(&index) => {
                Err(ClaimError::AlreadyClaimed {
                    job: record.job.clone(),
                    scheduled_unix_ms: record.scheduled_unix_ms,
                })
            }
            Err(MultiFault::Fenced(Fault::BadVersion | Fault::NoNode)) => {
                Err(ClaimError::NotOwner {
                    token: record.fencing_token,
                })
            }
            Err(MultiFault::Fenced(source)) => Err(ClaimError::Zk {
                path: self.epoch.clone(),
                source,
            }),
            Err(MultiFault::Op {
                index: 0,
                fault: Fault::NodeExists | Fault::BadVersion,
            }) => Err(ClaimError::AlreadyClaimed {
                job: record.job.clone(),
                scheduled_unix_ms: record.scheduled_unix_ms,
            }),
            // The guard exists: a run of the job is alive somewhere (concurrency = forbid).
            Err(MultiFault::Op {
                index: 1,
                fault: Fault::NodeExists,
            }) if self.guard.is_some() => Err(ClaimError::RunAlive {
                job: record.job.clone(),
            }),
            Err(MultiFault::Op { fault: source, .. } | MultiFault::Request(source)) => {
                Err(ClaimError::Zk {
                    path: self.path.clone(),
                    source,
                })
            }
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
        client: &Ledger,
        session: SessionId,
    ) -> Result<Option<Claim>, ClaimError> {
        let zk_err = |source| ClaimError::Zk {
            path: self.path.clone(),
            source,
        };
        client.zk().sync(&self.path).await.map_err(zk_err)?;
        let (data, stat) = match client.zk().get_data(&self.path).await {
            Ok(found) => found,
            Err(Fault::NoNode) => return Ok(None),
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
    pub(super) fn refusal(&self, err: MultiFault) -> ClaimError {
        match self.classify(Err(err)) {
            Err(refused) => refused,
            Ok(_) => ClaimError::Zk {
                path: self.path.clone(),
                source: Fault::Other("a failed multi read as a success".into()),
            },
        }
    }

    /// The claim made, from this claim's share of the multi's results.
    pub(super) fn into_claim(self, results: &[Written], session: SessionId) -> Claim {
        let version = match (self.mode, results.first()) {
            // A node just created has data version 0.
            (ClaimMode::Create, _) => 0,
            (ClaimMode::Again { .. }, Some(Written::SetData { stat })) => stat.version,
            (ClaimMode::Again { version }, _) => version + 1,
        };
        self.claim_at(version, session)
    }

    /// The claim made, its record stored at `version`.
    fn claim_at(self, version: i32, session: SessionId) -> Claim {
        let open = self
            .pending
            .and_then(|pending| pending.open)
            .or(self.marked_before);
        Claim {
            path: self.path,
            version,
            sent: self.record.clone(),
            record: self.record,
            guard: self.guard,
            open,
            session,
            children: Vec::new(),
            payload: None,
        }
    }
}
