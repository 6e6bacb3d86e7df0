//! A submission's run when the delayed queue is kept in PostgreSQL (`[delayed] store =
//! "postgres"`): its claim, its records and its end go to the store instead of ZooKeeper,
//! through the same [`GroupCommit`](super::group::GroupCommit) calls and with the same answers,
//! so the fire machine and its driver take one road whichever store holds the queue.
//!
//! A claim checks the store's fence at the claimer's ZooKeeper token in its own statement. The
//! first claim of a new owner finds the fence at its predecessor's token: the fence is raised to
//! ours then (which waits for the predecessor's claims in flight), and the claim sent again. A
//! `forbid` job's guard stays in ZooKeeper: it is taken, fenced by the epoch, before the claim,
//! and given back when the store refuses the claim.
//!
//! Owns: batching one session's claims into `claim_chosen` statements (one out at a time, each
//! carrying what queued behind it), raising the fence, reading an unanswered claim back, the
//! guard around the claim, and a run's record writes and end in the store.
//! Must not: decide what to claim (the fire machine does), or change what a claim means.

use std::sync::Arc;

use chrono::Utc;
use tokio::sync::{mpsc, oneshot};

use super::chains::MarkCreate;
use super::claim::ClaimPlan;
use super::error::{ClaimError, UpdateError};
use super::postgres::{Chosen, ChosenClaim, PgStore, StoreError, Updated, Where};
use crate::delayed::submission::SubmissionId;
use crate::ids::{FencingToken, SessionId};
use crate::run::Claim;
use crate::run::{ClaimMode, RunRecord};
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, MultiFault, Zk};

/// Claims per statement at most: 100 take 2.3 ms at p50 (docs/BENCHMARKS.md).
const MAX_BATCH: usize = 100;

/// Where a run kept in the store shows in logs, in place of a znode's path.
pub(super) fn path_of(store: &PgStore, id: &SubmissionId) -> String {
    format!("postgres:{}/{id}", store.lock_group())
}

/// Whether `claim`'s run was claimed in `store` (not in ZooKeeper).
pub(super) fn kept_by(store: &PgStore, claim: &Claim) -> bool {
    claim
        .record
        .submission_id
        .as_ref()
        .is_some_and(|id| claim.path == path_of(store, id))
}

/// Whether `record`'s run is open in `store`, rather than in ZooKeeper: a run claimed there
/// before the queue moved is resolved there (rerun, marked interrupted) by the same calls. A
/// store that does not answer is taken to hold it: the write then fails and is tried again,
/// never sent to ZooKeeper for a run it does not hold.
pub(super) async fn holds_open(store: &PgStore, record: &RunRecord) -> bool {
    let Some(id) = &record.submission_id else {
        return false;
    };
    !matches!(
        store.find(id).await,
        Ok(None | Some(Where::Pending(_) | Where::Ended { .. } | Where::Remembered(_)))
    )
}

/// One session's claims to the store. Cloning shares the queue; the future
/// [`StoreClaims::new`] returns ends once every clone is dropped and the queue is drained.
#[derive(Debug, Clone)]
pub(super) struct StoreClaims {
    store: Arc<PgStore>,
    queue: mpsc::UnboundedSender<Unit>,
}

struct Unit {
    plan: ClaimPlan,
    reply: oneshot::Sender<Result<Claim, ClaimError>>,
}

impl StoreClaims {
    /// The queue of `zk`'s session (its guards) to `store`, and the future that sends it.
    pub(super) fn new(
        store: Arc<PgStore>,
        zk: Zk,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (queue, queued) = mpsc::unbounded_channel();
        let lane = lane(Arc::clone(&store), zk, queued);
        (Self { store, queue }, lane)
    }

    pub(super) fn store(&self) -> &PgStore {
        &self.store
    }

    /// The claim of a submission chosen by the fire machine (see [`super::claim()`]).
    ///
    /// # Errors
    /// As [`super::claim()`]; `Store` when the store failed and the claim was not applied, or
    /// could not be read back.
    pub(super) async fn claim(&self, zk: &Zk, plan: ClaimPlan) -> Result<Claim, ClaimError> {
        if let ClaimMode::Again { version } = plan.mode() {
            // A submission's run claimed again (a retry, a rerun of an interrupted one): its
            // open row rewritten at its version, by our token.
            return again(&self.store, zk, plan, version).await;
        }
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError(unit)) = self.queue.send(Unit { plan, reply }) {
            return claim_batch(&self.store, zk, vec![unit.plan])
                .await
                .pop()
                .unwrap_or_else(|| Err(unit_lost()));
        }
        answer.await.unwrap_or_else(|_| Err(unit_lost()))
    }

    /// A run's `running` record, by compare-and-set on its row's version.
    ///
    /// # Errors
    /// `Conflict` when the row moved on (a next owner took it over, or it ended); `Store`.
    pub(super) async fn update(&self, claim: &mut Claim) -> Result<(), UpdateError> {
        claim.sent = claim.record.clone();
        let id = submission_of(&claim.record, &claim.path)?;
        let written = self
            .store
            .update_open(
                &id,
                &claim.record,
                claim.version,
                claim.record.fencing_token,
            )
            .await;
        match written.map_err(store_failed(&claim.path))? {
            Updated::Written(version) => {
                claim.version = version;
                Ok(())
            }
            Updated::Conflict => Err(UpdateError::Conflict {
                path: claim.path.clone(),
                stored: None,
            }),
        }
    }

    /// Leaves `marks` and deletes the claim's guard (and open marker) in one multi-op, after the
    /// run's end is recorded in the store.
    async fn leave_marks(
        &self,
        zk: &Zk,
        claim: &Claim,
        marks: &[MarkCreate],
        same_session: bool,
    ) -> Result<(), MultiFault> {
        let mut multi = zk.multi(WriteKind::Final);
        let mut ops = 0;
        let built = (|| {
            super::chains::add_creates(marks, &mut multi)?;
            ops += marks.len();
            for path in claim.final_deletes(same_session) {
                multi.add_delete(path, None)?;
                ops += 1;
            }
            Ok::<(), Fault>(())
        })();
        match built {
            Ok(()) if ops == 0 => Ok(()),
            Ok(()) => multi.commit().await.map(drop),
            Err(fault) => Err(MultiFault::Request(fault)),
        }
    }

    /// A run's last record from this claim: a final one moves its row to the ended runs (one
    /// that promises a retry, or a write-back to `claimed`, stays open); then its guard (the
    /// claiming session's only) goes and its chain marks are left in ZooKeeper.
    ///
    /// # Errors
    /// `Conflict` when the run is no longer ours (a next owner took it over); `Store`; `Zk`
    /// when the marks could not be left.
    pub(super) async fn finish(
        &self,
        zk: &Zk,
        claim: &mut Claim,
        mut marks: Vec<MarkCreate>,
    ) -> Result<(), UpdateError> {
        claim.sent = claim.record.clone();
        let id = submission_of(&claim.record, &claim.path)?;
        // The store keeps them with the end until they are made in ZooKeeper
        // (`chains::leave_kept_marks`).
        let kept: Vec<(String, Vec<u8>)> = marks
            .iter()
            .map(|mark| (mark.path.clone(), mark.data.clone()))
            .collect();
        if claim.record.retry_at_unix_ms.is_some() || !claim.record.status.is_final() {
            // A retry promised, or a record written back to `claimed` (a run whose lock was
            // lost before it was sent): the run stays open, its record saying so, for the
            // retry's claim or a next owner's catch-up to take it up.
            self.update(claim).await?;
        } else {
            let token = claim.record.fencing_token;
            let now = Utc::now().timestamp_millis();
            let ended = self
                .store
                .end_leaving(&id, token, &claim.record, now, &kept)
                .await;
            match ended.map_err(store_failed(&claim.path))? {
                super::postgres::Ended::Recorded => claim.version += 1,
                super::postgres::Ended::NotOurs => {
                    return Err(UpdateError::Conflict {
                        path: claim.path.clone(),
                        stored: None,
                    });
                }
            }
        }
        let same_session = SessionId(zk.session_id()) == claim.session;
        let mut left = Ok(());
        // As the ZooKeeper store's final write: a mark's missing parent is made and the marks
        // go again; a mark there already (our own lost reply) is not made twice.
        for _ in 0..3 {
            left = self.leave_marks(zk, claim, &marks, same_session).await;
            match &left {
                Err(MultiFault::Op {
                    index,
                    fault: Fault::NoNode,
                }) if *index < marks.len() => super::chains::make_dirs(zk, &marks).await,
                Err(MultiFault::Op {
                    index,
                    fault: Fault::NodeExists,
                }) if *index < marks.len() => marks.clear(),
                _ => break,
            }
        }
        if left.is_ok() && !kept.is_empty() {
            let made: Vec<&str> = kept.iter().map(|(path, _)| path.as_str()).collect();
            if let Err(err) = self.store.marks_made(&made).await {
                // Made again by the owner's next chore: a child's submission under its id is
                // then a resubmit that changes nothing.
                tracing::debug!(path = claim.path, error = %err, "chain marks made, but still kept in the store");
            }
        }
        // The end is recorded: what is left undone here is told, never undone there (the
        // store keeps the marks for the owner's chores).
        left.map_err(|err| {
            let source = match err {
                MultiFault::Op { fault, .. }
                | MultiFault::Request(fault)
                | MultiFault::Fenced(fault) => fault,
            };
            tracing::warn!(path = claim.path, error = %source, "run ended in the store, but its guard or chain marks were not written in zookeeper");
            UpdateError::Zk {
                path: claim.path.clone(),
                source,
            }
        })
    }
}

/// Rewrites the record of a run kept in `store` that the owner holding `token` resolves (catch-up
/// marks it interrupted, or a dropped retry is recorded): the run is taken over at `version`,
/// fenced by `token`, and ended when `closes`. Returns the record's new version.
///
/// # Errors
/// `NotOwner` without a token, or when the fence holds a newer one; `Conflict` when the row
/// moved on or ended; `Store`.
pub(super) async fn rewrite(
    store: &PgStore,
    record: &RunRecord,
    version: i32,
    closes: bool,
    token: Option<FencingToken>,
) -> Result<i32, UpdateError> {
    let Some(id) = record.submission_id.clone() else {
        return Err(UpdateError::NotOwner);
    };
    let path = path_of(store, &id);
    let token = token.ok_or(UpdateError::NotOwner)?;
    let conflict = || UpdateError::Conflict {
        path: path.clone(),
        stored: None,
    };
    let node = (&record.node_id, record.ip.as_str());
    let taken = match take_over(store, &id, token, node, record, version).await {
        Ok(taken) => taken,
        Err(StoreError::Fenced { .. }) => return Err(UpdateError::NotOwner),
        Err(err) => return Err(store_failed(&path)(err)),
    };
    let Updated::Written(version) = taken else {
        return Err(conflict());
    };
    if !closes {
        return Ok(version);
    }
    let now = Utc::now().timestamp_millis();
    match store
        .end(&id, token, record, now)
        .await
        .map_err(store_failed(&path))?
    {
        super::postgres::Ended::Recorded => Ok(version + 1),
        super::postgres::Ended::NotOurs => Err(conflict()),
    }
}

/// [`PgStore::take_over`], the fence raised to `token` first when it is behind it: a new
/// owner's first write to the store may be a take-over (a rerun, a run marked interrupted).
async fn take_over(
    store: &PgStore,
    id: &SubmissionId,
    token: FencingToken,
    node: (&crate::ids::NodeId, &str),
    record: &RunRecord,
    version: i32,
) -> Result<Updated, StoreError> {
    match store.take_over(id, token, node, record, version).await {
        // At our token already: another of our statements raised it between this one's check
        // and its read of the fence (see `claim_chosen`).
        Err(StoreError::Fenced { current, .. }) if current <= i64::from(token.0) => {
            store.raise_fence(token).await?;
            tracing::info!(lock_group = store.lock_group(), %token, "the delayed store's fence raised to our token");
            store.take_over(id, token, node, record, version).await
        }
        answered => answered,
    }
}

/// The claim of a unit whose queue ended without answering it: it may have been applied.
fn unit_lost() -> ClaimError {
    ClaimError::Store {
        path: "postgres".to_owned(),
        source: Arc::new(StoreError::Unanswered),
    }
}

fn submission_of(record: &RunRecord, path: &str) -> Result<SubmissionId, UpdateError> {
    record
        .submission_id
        .clone()
        .ok_or_else(|| UpdateError::Conflict {
            path: path.to_owned(),
            stored: None,
        })
}

fn store_failed(path: &str) -> impl FnOnce(StoreError) -> UpdateError + '_ {
    move |source| UpdateError::Store {
        path: path.to_owned(),
        source: Arc::new(source),
    }
}

/// Sends the claims queued: one statement out at a time, each carrying up to [`MAX_BATCH`]
/// claims at one token that queued while the one before was out.
async fn lane(store: Arc<PgStore>, zk: Zk, mut queue: mpsc::UnboundedReceiver<Unit>) {
    let mut held: Option<Unit> = None;
    loop {
        let first = match held.take() {
            Some(unit) => unit,
            None => match queue.recv().await {
                Some(unit) => unit,
                None => return,
            },
        };
        let token = first.plan.token();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(unit) if unit.plan.token() == token => batch.push(unit),
                Ok(unit) => {
                    held = Some(unit);
                    break;
                }
                Err(_) => break,
            }
        }
        let (plans, replies): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .map(|unit| (unit.plan, unit.reply))
            .unzip();
        let answers = claim_batch(&store, &zk, plans).await;
        for (reply, answer) in replies.into_iter().zip(answers) {
            let _ = reply.send(answer);
        }
    }
}

/// Claims `plans` (one token) in one statement, each `forbid` job's guard taken first; the
/// answers in `plans`' order.
async fn claim_batch(
    store: &PgStore,
    zk: &Zk,
    plans: Vec<ClaimPlan>,
) -> Vec<Result<Claim, ClaimError>> {
    let session = SessionId(zk.session_id());
    let mut answers: Vec<Option<Result<Claim, ClaimError>>> = Vec::with_capacity(plans.len());
    let mut going = Vec::with_capacity(plans.len());
    for (slot, plan) in plans.iter().enumerate() {
        answers.push(None);
        if plan.guard_path().is_some() {
            if let Err(refused) = take_guard(zk, plan).await {
                answers[slot] = Some(Err(refused));
                continue;
            }
        }
        going.push(slot);
    }
    let sent: Vec<&ClaimPlan> = going.iter().map(|&slot| &plans[slot]).collect();
    let outcomes = claim_chosen(store, &sent).await;
    for (slot, outcome) in going.into_iter().zip(outcomes) {
        let plan = &plans[slot];
        let answer = match outcome {
            Ok(true) => Ok(claim_of(store, plan.clone(), 0, session)),
            Ok(false) => Err(ClaimError::AlreadyClaimed {
                job: plan.record().job.clone(),
                scheduled_unix_ms: plan.record().scheduled_unix_ms,
            }),
            Err(err) => Err(err),
        };
        if answer.is_err()
            && let Some(guard) = plan.guard_path()
        {
            // Ours and unused: the claim it guarded was refused.
            if let Err(fault) = zk.delete_if_there(WriteKind::Guard, guard, None).await {
                tracing::warn!(guard, error = %fault, "guard of a refused claim not given back; it goes with the session");
            }
        }
        answers[slot] = Some(answer);
    }
    answers
        .into_iter()
        .map(|answer| answer.unwrap_or_else(|| Err(unit_lost())))
        .collect()
}

/// Each plan claimed (`true`) or found gone (`false`), or why not: the fence raised to our
/// token once when it is behind it; a statement without an answer read back claim by claim.
async fn claim_chosen(store: &PgStore, plans: &[&ClaimPlan]) -> Vec<Result<bool, ClaimError>> {
    let Some(first) = plans.first() else {
        return Vec::new();
    };
    let token = first.token();
    let record = first.record();
    let ids: Vec<SubmissionId> = plans
        .iter()
        .map(|plan| {
            plan.record()
                .submission_id
                .clone()
                .unwrap_or_else(SubmissionId::generate)
        })
        .collect();
    let chosen: Vec<Chosen<'_>> = plans
        .iter()
        .zip(&ids)
        .map(|(plan, id)| Chosen {
            id,
            due_unix_ms: plan.record().scheduled_unix_ms,
            record: plan.record(),
        })
        .collect();
    let node = (&record.node_id, record.ip.as_str());
    let mut raised = false;
    loop {
        let now = Utc::now().timestamp_millis();
        match store.claim_chosen(token, &chosen, node, now).await {
            Ok(answers) => {
                return answers
                    .into_iter()
                    .map(|answer| Ok(answer == ChosenClaim::Claimed))
                    .collect();
            }
            // Behind our token, or at it already: the listing of a new owner raises the fence
            // too, and when it does between this statement's check and its read of the fence,
            // the fence reads as ours. Taken for a newer owner's, that sent the lock machine
            // to verify a lock it held, and the claims it had out were left unrun.
            Err(StoreError::Fenced { current, .. }) if !raised && current <= i64::from(token.0) => {
                raised = true;
                match store.raise_fence(token).await {
                    Ok(()) => {
                        tracing::info!(lock_group = store.lock_group(), %token, "the delayed store's fence raised to our token");
                    }
                    Err(err) => return refused_all(store, token, plans.len(), err),
                }
            }
            Err(err) if unknown_outcome(&err) => {
                tracing::warn!(claims = plans.len(), error = %crate::report::error_chain(&err), "claims unanswered by the store: reading them back");
                let why = Arc::new(err);
                let mut answers = Vec::with_capacity(plans.len());
                for (plan, id) in plans.iter().zip(&ids) {
                    answers.push(read_back(store, id, plan.record(), &why).await);
                }
                return answers;
            }
            Err(err) => return refused_all(store, token, plans.len(), err),
        }
    }
}

/// Whether a failed statement may have been applied: it went out and no answer came back.
fn unknown_outcome(err: &StoreError) -> bool {
    matches!(err, StoreError::TimedOut { .. } | StoreError::Query { .. })
}

/// The claims' answer from a refusal that holds for each of the statement's `count`.
fn refused_all(
    store: &PgStore,
    token: FencingToken,
    count: usize,
    err: StoreError,
) -> Vec<Result<bool, ClaimError>> {
    let err = Arc::new(err);
    (0..count)
        .map(|_| Err(refused(store, token, Arc::clone(&err))))
        .collect()
}

/// The claim's answer from the store's refusal.
fn refused(store: &PgStore, token: FencingToken, err: Arc<StoreError>) -> ClaimError {
    match *err {
        StoreError::Fenced { .. } => ClaimError::NotOwner { token },
        _ => ClaimError::Store {
            path: format!("postgres:{}", store.lock_group()),
            source: err,
        },
    }
}

/// Whether the claim of `id` with `record` was applied, read back from the store: claimed when
/// its open row holds exactly that record, not when it is still pending.
async fn read_back(
    store: &PgStore,
    id: &SubmissionId,
    record: &RunRecord,
    why: &Arc<StoreError>,
) -> Result<bool, ClaimError> {
    let path = path_of(store, id);
    match store.find(id).await {
        Ok(Some(Where::Open { record: stored, .. })) if *stored == *record => Ok(true),
        // Not applied: the machine reads it again and claims it once more.
        Ok(Some(Where::Pending(_))) => Err(ClaimError::Store {
            path,
            source: Arc::clone(why),
        }),
        Ok(_) => Ok(false),
        Err(source) => {
            tracing::error!(path, error = %crate::report::error_chain(&source), "claim's outcome unknown: the store answers no read; the next owner resolves the run if it was claimed");
            Err(ClaimError::Store {
                path,
                source: Arc::new(source),
            })
        }
    }
}

/// A `forbid` job's guard, fenced by the epoch at our token: `RunAlive` when a run of the job
/// holds it, `NotOwner` when the epoch moved on.
async fn take_guard(zk: &Zk, plan: &ClaimPlan) -> Result<(), ClaimError> {
    let Some(guard) = plan.guard_path() else {
        return Ok(());
    };
    let record = plan.record();
    let sent = zk
        .fenced(WriteKind::Claim, plan.epoch(), plan.fence_version())
        .and_then(|mut multi| {
            multi.add_create(guard, record.run_id.as_bytes(), Mode::Ephemeral)?;
            Ok(multi.commit())
        });
    let answer = match sent {
        Ok(commit) => commit.await,
        Err(fault) => Err(MultiFault::Request(fault)),
    };
    match answer {
        Ok(_) => Ok(()),
        Err(MultiFault::Fenced(Fault::BadVersion | Fault::NoNode)) => Err(ClaimError::NotOwner {
            token: record.fencing_token,
        }),
        Err(MultiFault::Op {
            fault: Fault::NodeExists,
            ..
        }) => Err(ClaimError::RunAlive {
            job: record.job.clone(),
        }),
        Err(
            MultiFault::Op { fault, .. } | MultiFault::Request(fault) | MultiFault::Fenced(fault),
        ) => Err(ClaimError::Zk {
            path: guard.to_owned(),
            source: fault,
        }),
    }
}

/// A submission's run claimed again (a retry, a rerun): its open row rewritten at the version
/// the machine read, taken over for our token and node.
async fn again(
    store: &PgStore,
    zk: &Zk,
    plan: ClaimPlan,
    version: i32,
) -> Result<Claim, ClaimError> {
    let record = plan.record().clone();
    let Some(id) = record.submission_id.clone() else {
        return Err(ClaimError::Store {
            path: format!("postgres:{}", store.lock_group()),
            source: Arc::new(StoreError::NotASubmission {
                job: record.job.to_string(),
            }),
        });
    };
    take_guard(zk, &plan).await?;
    let node = (&record.node_id, record.ip.as_str());
    let taken = take_over(store, &id, record.fencing_token, node, &record, version).await;
    let answer = match taken {
        Ok(Updated::Written(version)) => {
            let session = SessionId(zk.session_id());
            return Ok(claim_of(store, plan, version, session));
        }
        Ok(Updated::Conflict) => ClaimError::AlreadyClaimed {
            job: record.job.clone(),
            scheduled_unix_ms: record.scheduled_unix_ms,
        },
        Err(err) => refused(store, record.fencing_token, Arc::new(err)),
    };
    if let Some(guard) = plan.guard_path() {
        let _ = zk.delete_if_there(WriteKind::Guard, guard, None).await;
    }
    Err(answer)
}

/// The claim made: its record stored in the store's open run at `version`.
fn claim_of(store: &PgStore, plan: ClaimPlan, version: i32, session: SessionId) -> Claim {
    let record = plan.record().clone();
    let path = record
        .submission_id
        .as_ref()
        .map_or_else(|| plan.path().to_owned(), |id| path_of(store, id));
    Claim {
        path,
        version,
        sent: record.clone(),
        record,
        guard: plan.guard_path().map(str::to_owned),
        open: None,
        session,
        children: Vec::new(),
        payload: None,
    }
}
