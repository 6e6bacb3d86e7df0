//! The claims out or held, by id and by the run they are for ([`RunKey`]: at most one claim out
//! per run, whichever producer made it due); per job how many of them will start a run: the fire
//! machine's bookkeeping, pure like the machine itself.
//!
//! The count is what `max_running` bounds (with the runs alive and the retries waiting, which
//! `runs` counts). It is kept as claims come and go, not counted again for every input: with a
//! thousand runs open (a backlog of due submissions) counting took two thirds of the machine's
//! CPU (issue 23's profile). A claim's kind (record-only or not) never changes while it is held
//! here, so the count taken at insert is the one given back at removal.

use std::collections::{BTreeMap, HashMap, VecDeque};

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::{
    Action, ClaimAction, ClaimId, Fence, FireReason, Item, Me, RunAction, START_LEAD, TickClaim,
    is_late,
};
use crate::config::{Concurrency, JobConfig};
use crate::delayed::submission::SubmissionId;
use crate::ids::{FencingToken, JobName, NodeId};
use crate::run::{
    Claim, ClaimMode, ParentRun, RunContext, RunKey, RunRecord, RunStatus, SubmissionInput,
};

/// A claim sent and not yet settled.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) config: Arc<JobConfig>,
    pub(super) tick: DateTime<Utc>,
    pub(super) reason: FireReason,
    pub(super) token: FencingToken,
    /// Not before this instant: the tick itself for on-time ticks.
    pub(super) start_at: DateTime<Utc>,
    /// Part of its job's catch-up sequence.
    pub(super) in_backlog: bool,
    /// A submission's run: its id and payload.
    pub(super) submission: Option<SubmissionInput>,
    pub(super) state: PendingState,
    /// An [`RunAction::Prepare`] went out for it.
    pub(super) prepared: bool,
    /// Its job's `limits`: where its leases stand.
    pub(super) lease: LeaseWait,
    /// A claim of an existing record (a retry, a rerun): the record as read and its version, so
    /// a second try (after a run was found alive) claims it again the same way.
    pub(super) stored: Option<(RunRecord, i32)>,
    /// A chained run's first claim (or record): the parents' runs whose marks it takes.
    pub(super) parents: Vec<ParentRun>,
    /// What its claim checks: the epoch at `token` (the owner's runs), or this node's member
    /// znode (its own run of a broadcast tick, which no lock change touches).
    pub(super) fence: Fence,
}

/// Where a claimed run stands with the leases of its job's limits (issue 19).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) enum LeaseWait {
    /// Not asked for (yet, or its job has no limits).
    #[default]
    NotAsked,
    /// [`ClaimAction::TakeLeases`] is out: the driver waits in each limit's queue, holding nothing
    /// of a limit until its turn, and answers once it holds them all.
    Asking,
    /// Taking failed (ZooKeeper did not answer): try again at `at`.
    Failed { at: DateTime<Utc>, limit: String },
    /// Held: the run may start; the driver gives them back when it ends.
    Held,
}

impl LeaseWait {
    /// It asked: its start is bounded by `starting_deadline`, not by the late-tick rule.
    pub(super) fn asked(&self) -> bool {
        *self != Self::NotAsked
    }
}

impl Pending {
    /// What the claimed run's job is told: the same when it is prepared as when it starts.
    pub(super) fn context(&self, me: &Me, claim: &Claim) -> RunContext {
        RunContext {
            run_id: claim.record.run_id.clone(),
            scheduled_at: self.tick,
            node: me.node_id.clone(),
            fencing_token: claim.record.fencing_token,
            attempt: claim.record.attempt,
            resumed: self.reason.resumed(),
            // Its retries and reruns are the backfill's too.
            backfill: claim.record.backfill,
            submission: self.submission.clone(),
            parent_runs: claim
                .record
                .parents
                .iter()
                .map(|p| p.run_id.clone())
                .collect(),
        }
    }

    /// The latest its start may be once it waits for a limit: `starting_deadline` after its
    /// tick, or after its claim for a run whose instant is old by design (a backfill's past
    /// tick, a chained run's parents' instant), which would otherwise be given up at once.
    pub(super) fn lease_deadline(&self) -> DateTime<Utc> {
        let from = if self.reason.in_tick_order() {
            self.tick
        } else {
            self.start_at
        };
        from + chrono::Duration::from_std(self.config.starting_deadline).unwrap_or_default()
    }

    /// Whether to look at its start now: its instant, the next try after a failed take, or
    /// the end of its wait for a limit.
    pub(super) fn start_due(&self, now: DateTime<Utc>) -> bool {
        match &self.lease {
            LeaseWait::Asking => now > self.lease_deadline(),
            LeaseWait::Failed { at, .. } => *at <= now,
            _ => self.start_deadline() <= now,
        }
    }

    /// When to look at it again while claimed.
    pub(super) fn claimed_deadline(&self) -> DateTime<Utc> {
        match &self.lease {
            LeaseWait::Asking => self.lease_deadline() + chrono::Duration::milliseconds(1),
            LeaseWait::Failed { at, .. } => *at,
            _ => self.start_deadline(),
        }
    }

    /// The claim of `item` of `config`'s job under `token`: the pending claim, and the record and
    /// mode it sends.
    pub(super) fn of_item(
        item: Item,
        config: Arc<JobConfig>,
        token: FencingToken,
        in_backlog: bool,
        me: &Me,
        now: DateTime<Utc>,
    ) -> (Self, RunRecord, ClaimMode) {
        let me_at = (&me.node_id, me.ip.as_str());
        let now_ms = now.timestamp_millis();
        let (record, mode) = match &item.again {
            Some((stored, version)) => (
                stored.next_attempt(me_at, token, now_ms),
                ClaimMode::Again { version: *version },
            ),
            None => {
                let job = &config.spec.name;
                let submission = item.submission.as_ref();
                let mut record = fresh_record(job, item.tick, submission, me_at, token, now_ms);
                if let FireReason::Backfill { with_children } = item.reason {
                    record.backfill = true;
                    record.with_children = with_children;
                }
                record.parents.clone_from(&item.parents);
                (record, ClaimMode::Create)
            }
        };
        // A jitter moves a tick's start, never a submission's.
        let start_at = if item.reason.on_time() {
            config.start_of(item.tick).max(now)
        } else if item.reason.waits_for_its_time() {
            item.tick.max(now)
        } else {
            now
        };
        let pending = Self {
            tick: item.tick,
            reason: item.reason,
            token,
            start_at,
            in_backlog,
            submission: item.submission,
            state: PendingState::InFlight { again: false },
            prepared: false,
            lease: LeaseWait::NotAsked,
            stored: item.again,
            parents: item.parents,
            fence: Fence::Epoch,
            config,
        };
        (pending, record, mode)
    }

    /// The claim of a record that starts nothing (`skipped`, `missed`) under `token`.
    pub(super) fn record_only(
        config: Arc<JobConfig>,
        record: &RunRecord,
        token: FencingToken,
    ) -> Self {
        let tick = DateTime::from_timestamp_millis(record.scheduled_unix_ms).unwrap_or_default();
        Self {
            config,
            tick,
            reason: FireReason::OnTime,
            token,
            start_at: tick,
            in_backlog: false,
            submission: None,
            state: PendingState::RecordOnly,
            prepared: false,
            lease: LeaseWait::NotAsked,
            stored: None,
            parents: record.parents.clone(),
            fence: Fence::Epoch,
        }
    }

    /// This node's claim of its own run of a broadcast tick (`record`, made by
    /// [`RunRecord::claimed_broadcast`], `skipped` for a record only), started at `start_at`:
    /// fenced by its member znode, not the epoch.
    pub(super) fn of_broadcast(
        config: Arc<JobConfig>,
        record: &RunRecord,
        start_at: DateTime<Utc>,
    ) -> Self {
        let mut pending = Self::record_only(config, record, record.fencing_token);
        if record.status == RunStatus::Claimed {
            pending.state = PendingState::InFlight { again: false };
            pending.start_at = start_at;
        }
        pending.fence = Fence::Member;
        pending
    }

    /// Its claim is this node's own run of a broadcast tick: no lock change touches it.
    pub(super) fn is_members(&self) -> bool {
        self.fence == Fence::Member
    }

    /// The record and mode of a claim made once more: of the stored record at its version (a
    /// retry, a rerun), or a first claim's.
    pub(super) fn record_once_more(
        &self,
        me: &Me,
        token: FencingToken,
        now: DateTime<Utc>,
    ) -> (RunRecord, ClaimMode) {
        let now_ms = now.timestamp_millis();
        let me = (&me.node_id, me.ip.as_str());
        match &self.stored {
            Some((stored, version)) => (
                stored.next_attempt(me, token, now_ms),
                ClaimMode::Again { version: *version },
            ),
            None => {
                let mut record = fresh_record(
                    &self.config.spec.name,
                    self.tick,
                    self.submission.as_ref(),
                    me,
                    token,
                    now_ms,
                );
                record.parents.clone_from(&self.parents);
                (record, ClaimMode::Create)
            }
        }
    }

    /// Whether its claimed run starts now. `lock_holds`: this node may fire under the claim's
    /// token; `newest_tick`: its job's newest tick started here; `run_alive`: a run of its job
    /// is alive on this node.
    pub(super) fn start_verdict(
        &self,
        claim: &Claim,
        lock_holds: bool,
        newest_tick: Option<DateTime<Utc>>,
        run_alive: bool,
        now: DateTime<Utc>,
    ) -> StartVerdict {
        let (job, tick) = (&self.config.spec.name, self.tick);
        // A Lost (or a disconnect, or a handover) between the claim and now wins.
        if !lock_holds {
            tracing::warn!(job = %job, %tick, "not firing: the lock was lost after the claim");
            return StartVerdict::LockLost;
        }
        // Woken from a freeze (SIGSTOP, a VM pause) a claim can look fine for a moment: a tick
        // this late is not started, and its record says why.
        if self.reason.on_time() && !self.lease.asked() && is_late(&self.config, tick, now) {
            tracing::warn!(job = %job, %tick, "not firing: the claimed tick is too late to start");
            return StartVerdict::Missed(
                "claimed, but too late to start (the node was stalled)".to_owned(),
            );
        }
        let deadline =
            chrono::Duration::from_std(self.config.starting_deadline).unwrap_or_default();
        if self.lease.asked() && self.lease != LeaseWait::Held && now > tick + deadline {
            let why = match &self.lease {
                LeaseWait::Failed { limit, .. } => format!(
                    "claimed, but no lease of the limit {limit:?} could be taken before its starting_deadline"
                ),
                _ => "claimed, but its limits stayed full past its starting_deadline".to_owned(),
            };
            tracing::warn!(job = %job, %tick, why, "not firing");
            return StartVerdict::Missed(why);
        }
        if self.reason.submitted() && now > tick + deadline {
            tracing::warn!(job = %job, %tick, "not firing: the submission is past its starting_deadline");
            return StartVerdict::Missed(
                "claimed, but past its starting_deadline (the node was stalled)".to_owned(),
            );
        }
        // A backfill runs past ticks after later ones by nature (in order among themselves); a
        // chained run follows its parents' ends, which come in any order.
        let first_attempt = claim.record.attempt == 1
            && self.submission.is_none()
            && !matches!(
                self.reason,
                FireReason::Backfill { .. } | FireReason::Chained
            );
        if first_attempt && newest_tick.is_some_and(|last| last >= tick) {
            // Claims can come back out of order; a job's ticks start in scheduled order, so a
            // later tick that started first covers this one.
            tracing::warn!(job = %job, %tick, "not firing: a later tick of the job has started");
            return StartVerdict::Missed("a later tick of the job started first".to_owned());
        }
        match self.config.concurrency {
            Concurrency::Forbid if run_alive => {
                // The guard did not stop it (the run is from an older session, being
                // cancelled): this node knows better.
                let reason = "a run of the job is still alive on this node (concurrency = forbid)";
                tracing::warn!(job = %job, %tick, reason, "tick skipped");
                StartVerdict::Skipped(reason)
            }
            Concurrency::Replace if run_alive => {
                let grace = self.config.spec.kill_grace + std::time::Duration::from_secs(1);
                let until = now + chrono::Duration::from_std(grace).unwrap_or_default();
                StartVerdict::Replace { until }
            }
            _ => StartVerdict::Start,
        }
    }

    /// Settled without a run: gives back the leases held or waited for, and drops a prepared
    /// process.
    pub(super) fn give_back(&self, out: &mut Vec<Action>) {
        let (PendingState::Claimed(claim)
        | PendingState::Replacing { claim, .. }
        | PendingState::AfterOwnRun(claim)) = &self.state
        else {
            return;
        };
        if matches!(self.lease, LeaseWait::Held | LeaseWait::Asking) {
            out.push(Action::Claims(ClaimAction::GiveBackLeases {
                run_id: claim.record.run_id.clone(),
            }));
        }
        if self.prepared {
            out.push(Action::Runs(RunAction::Unprepare {
                run_id: claim.record.run_id.clone(),
            }));
        }
    }

    /// When its start goes out: its instant, or [`START_LEAD`] before it when prepared.
    pub(super) fn start_deadline(&self) -> DateTime<Utc> {
        if self.prepared {
            self.start_at - chrono::Duration::from_std(START_LEAD).unwrap_or_default()
        } else {
            self.start_at
        }
    }
}

/// What becomes of a claimed run at its time ([`Pending::start_verdict`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StartVerdict {
    /// The lock was lost after the claim: the record stays for the next owner, the guard goes.
    LockLost,
    /// Not started: recorded `missed`, for this reason.
    Missed(String),
    /// Not started: recorded `skipped` (concurrency = forbid), for this reason.
    Skipped(&'static str),
    /// Cancel the job's runs alive here and start once they ended, or at `until`.
    Replace {
        until: DateTime<Utc>,
    },
    Start,
}

/// A first claim's record: of a tick, or of a submission.
pub(super) fn fresh_record(
    job: &JobName,
    tick: DateTime<Utc>,
    submission: Option<&SubmissionInput>,
    me: (&NodeId, &str),
    token: FencingToken,
    now_ms: i64,
) -> RunRecord {
    let tick_ms = tick.timestamp_millis();
    match submission.and_then(|s| Some((SubmissionId::parse(&s.id).ok()?, s))) {
        Some((id, input)) => RunRecord {
            requested_by: input.requested_by.clone(),
            marker_names_job: input.marker_names_job,
            ..RunRecord::claimed_submission(job, tick_ms, &id, me, token, now_ms)
        },
        None => RunRecord::claimed(job, tick_ms, me, token, now_ms),
    }
}

/// A tick's run is claimed as `running`, from its planned start, so that its start writes
/// nothing: for a tick, unlike a submission, a record still `claimed` would prove nothing (the
/// start goes beside its write), and the next owner resolves both alike. A tick that waits for
/// its job's limits after its claim stays `claimed` until it starts, so that the record tells
/// waiting from running. A submission's claim says `running` only where it is made at the due
/// instant and the start follows its answer ([`claimed_at_its_instant`]): it is then the write
/// that fences the request, as the `running` write is otherwise.
fn said_running_by_its_claim(mut record: RunRecord, pending: &Pending) -> RunRecord {
    let start_ms = pending.start_at.timestamp_millis();
    let says_running = match pending.submission {
        None => pending.config.limits.is_empty(),
        // Only at its instant (the record is made now): one claimed ahead — a retry — that a
        // failover kept from starting must still read `claimed`, so that the next owner sends it.
        Some(_) => claimed_at_its_instant(&pending.config) && start_ms <= record.claimed_unix_ms,
    };
    if record.status == RunStatus::Claimed && says_running {
        record.status = RunStatus::Running;
        record.started_unix_ms = Some(pending.start_at.timestamp_millis());
    }
    record
}

/// A submission of `config`'s job is claimed at its due instant, not `claim_ahead` before, and
/// its claim says `running`: the claim is then the only write in front of its start, where a
/// claim ahead and a `running` write made two. For a job whose start waits for nothing after the
/// claim — no lease, no run of its own to let end — and whose run is not sent again after a
/// failover (an idempotent HTTP target needs no write in front and is claimed ahead). A process
/// then starts a launcher's load after its claim's answer instead of prepared ahead
/// (docs/BENCHMARKS.md: 3 ms at 100 due/s, and 555 a second sustained where 495 were).
pub(super) fn claimed_at_its_instant(config: &JobConfig) -> bool {
    config.spec.starts_submissions_with_their_claim()
        && config.limits.is_empty()
        && config.concurrency == Concurrency::Allow
}

/// A submission's run claimed as `running` that never started, as the `claimed` record to write
/// back: the run is still open (a format 1 marker stays).
pub(super) fn never_started(claim: &Claim) -> Claim {
    let mut back = claim.clone();
    back.record.status = RunStatus::Claimed;
    back.record.started_unix_ms = None;
    back.open = None;
    back.guard = None;
    back
}

/// A claimed tick that will not start, as the `missed` record that says why.
pub(super) fn missed_claim(claim: &Claim, why: &str) -> Claim {
    let mut missed = claim.clone();
    missed.record.status = RunStatus::Missed;
    missed.record.error = Some(why.to_owned());
    missed.record.missed_from_unix_ms = Some(missed.record.scheduled_unix_ms);
    missed.record.missed_ticks = Some(1);
    missed
}

#[derive(Debug, Clone)]
pub(super) enum PendingState {
    /// Sent; `again` once it is the second try after finding a run alive.
    InFlight { again: bool },
    /// Ours; starts at `start_at`.
    Claimed(Claim),
    /// Found a run alive before the tick: try once more at `at`, or as soon as this node's run
    /// of the job has ended (DESIGN.md promise 3: skip only what really overlaps).
    RunAlive { at: DateTime<Utc> },
    /// Waiting, up to `until`, for this node's run of the job to end (concurrency = replace).
    Replacing { claim: Claim, until: DateTime<Utc> },
    /// Ours, and due, but a run of the job that started here after the tick (a catch-up, a tick
    /// held behind it) is still alive: it did not overlap the tick, so this one starts once it
    /// ended, or is skipped past the late-tick rule (concurrency = forbid).
    AfterOwnRun(Claim),
    /// Given back (stopping).
    Withdrawing,
    /// A `skipped` or `missed` record: nothing starts from it.
    RecordOnly,
}

#[derive(Debug, Default)]
pub(super) struct Claims {
    by_id: BTreeMap<ClaimId, Pending>,
    next_id: u64,
    /// Runs that never started whose `running` write may have been applied all the same (its
    /// answer was lost): run id → the record's version if it was. Their claim again tries that
    /// version when the one they were claimed at is refused.
    maybe_marked_running: HashMap<String, i32>,
    /// Per job, the claims held here that start a run (not record-only).
    starting: HashMap<JobName, usize>,
    /// The run each claim is for (its [`RunKey::run`]), and the one claim out for each run: a
    /// scan finds each due submission once more per second, and asks.
    runs: HashMap<RunKey, ClaimId>,
    run_of: HashMap<ClaimId, RunKey>,
    /// Claims of a run whose claim is out, whichever producer made them: each goes, in order,
    /// once the one before it has settled (and is refused then if that one made the record).
    held: HashMap<RunKey, VecDeque<HeldClaim>>,
    /// Held claims whose run is free now, to send at the end of the input.
    released: Vec<HeldClaim>,
    /// Per `forbid` job, the token under which a claim of it took the guard: no run of the job
    /// was alive on another node then, and none can start elsewhere while that token holds
    /// (every other node's claim fails its epoch check; a run that outlives a hold takes its
    /// guard before the lock goes). Its claims under that token go without the guard.
    guard_proven: HashMap<JobName, FencingToken>,
}

/// A claim waiting for its run's claim out to settle.
#[derive(Debug)]
struct HeldClaim {
    pending: Pending,
    record: RunRecord,
    mode: ClaimMode,
}

fn starts_a_run(pending: &Pending) -> bool {
    !matches!(pending.state, PendingState::RecordOnly)
}

impl Claims {
    /// Holds `pending` under a new id, and sends its claim of `record` — or, when a claim of
    /// the same run is out, holds it until that one settles: one claim out per run, whichever
    /// producers made it due (a tick's on-time claim and catch-up's; a submission's `missed`
    /// record sent again by the next scan).
    pub fn send(
        &mut self,
        pending: Pending,
        record: RunRecord,
        mode: ClaimMode,
        out: &mut Vec<Action>,
    ) {
        let run = RunKey::of(&record).run();
        if self.runs.contains_key(&run) {
            let held = HeldClaim {
                pending,
                record,
                mode,
            };
            self.held.entry(run).or_default().push_back(held);
            return;
        }
        let id = ClaimId(self.next_id);
        self.next_id += 1;
        let guarded = pending.config.concurrency == Concurrency::Forbid
            && pending.fence == Fence::Epoch
            && record.status == RunStatus::Claimed
            && self.guard_proven.get(&pending.config.spec.name) != Some(&pending.token);
        let record = said_running_by_its_claim(record, &pending);
        let pending_fence = pending.fence;
        self.runs.insert(run.clone(), id);
        self.run_of.insert(id, run);
        self.insert(id, pending);
        out.push(Action::Claims(ClaimAction::Claim(TickClaim {
            id,
            record,
            mode,
            guarded,
            fence: pending_fence,
        })));
    }

    /// A run that never started may have its `running` write applied, at `version`.
    pub fn maybe_marked_running(&mut self, run_id: String, version: i32) {
        self.maybe_marked_running.insert(run_id, version);
    }

    /// The claim of a run settled: what may have been written before is known now; a claim
    /// that took the guard proves no run of its job alive elsewhere under its token.
    pub fn claimed(&mut self, claim: &Claim) {
        self.maybe_marked_running.remove(&claim.record.run_id);
        if claim.guard.is_some() {
            self.guard_proven
                .insert(claim.record.job.clone(), claim.record.fencing_token);
        }
    }

    /// A run that never started, claimed again at the version it was claimed at, was refused:
    /// if its `running` write may have been applied (issue 31: the answer was lost in an
    /// outage), its claim is pointed at that version instead, once. The claim's fence and
    /// compare-and-set still decide: whoever changed the record since (the next owner marking
    /// it interrupted) makes this claim fail too.
    pub fn at_its_running_version(&mut self, id: ClaimId) -> bool {
        let Some((record, version)) = self.by_id.get_mut(&id).and_then(|p| p.stored.as_mut())
        else {
            return false;
        };
        match self.maybe_marked_running.remove(&record.run_id) {
            Some(written) if written == *version + 1 => {
                tracing::info!(job = %record.job, run_id = record.run_id, "the record of a run that never started says running (a write whose answer was lost): claiming it at that version");
                *version = written;
                true
            }
            _ => false,
        }
    }

    /// Stopping: a run that never started stays `claimed` for the next owner to take over.
    pub fn stop(&mut self) {
        self.maybe_marked_running.clear();
    }

    /// Claimed but unstarted ticks are given back while we still own the lock, so the peer we
    /// hand over to fires them (a planned handoff loses no tick).
    pub fn withdraw_unstarted(&mut self, out: &mut Vec<Action>) {
        let ids: Vec<ClaimId> = self.by_id.keys().copied().collect();
        for id in ids {
            let Some(pending) = self.by_id.get_mut(&id).filter(|p| !p.is_members()) else {
                // A member's own run is not the lock's to give back (`starts::members`).
                continue;
            };
            match std::mem::replace(&mut pending.state, PendingState::Withdrawing) {
                PendingState::Claimed(claim)
                | PendingState::Replacing { claim, .. }
                | PendingState::AfterOwnRun(claim) => {
                    if std::mem::take(&mut pending.prepared) {
                        out.push(Action::Runs(RunAction::Unprepare {
                            run_id: claim.record.run_id.clone(),
                        }));
                    }
                    if matches!(
                        std::mem::take(&mut pending.lease),
                        LeaseWait::Held | LeaseWait::Asking
                    ) {
                        out.push(Action::Claims(ClaimAction::GiveBackLeases {
                            run_id: claim.record.run_id.clone(),
                        }));
                    }
                    out.push(Action::Claims(ClaimAction::Withdraw { id, claim }));
                }
                state @ (PendingState::InFlight { .. } | PendingState::RecordOnly) => {
                    pending.state = state;
                }
                PendingState::RunAlive { .. } | PendingState::Withdrawing => {
                    self.remove(&id);
                }
            }
        }
    }

    /// A claim of this node's own run of a broadcast tick is held (out, or waiting for its
    /// instant).
    pub fn members_out(&self) -> bool {
        self.by_id.values().any(Pending::is_members)
    }

    /// Claims and withdrawals whose answer is still out: a handover waits for them.
    pub fn outstanding(&self) -> usize {
        self.by_id
            .values()
            .filter(|p| {
                matches!(
                    p.state,
                    PendingState::InFlight { .. } | PendingState::Withdrawing
                )
            })
            .count()
    }

    /// Each claim whose answer is still out, for the operator: job, tick, what is unanswered.
    pub fn unanswered(&self) -> Vec<String> {
        self.by_id
            .values()
            .filter_map(|p| {
                let what = match p.state {
                    PendingState::InFlight { .. } => "claim unanswered",
                    PendingState::Withdrawing => "withdrawal unanswered",
                    _ => return None,
                };
                Some(format!("{} {}: {what}", p.config.spec.name, p.tick))
            })
            .collect()
    }

    /// The claims waiting for a limit's lease.
    pub fn asking_leases(&self) -> Vec<ClaimId> {
        let asking = self
            .by_id
            .iter()
            .filter(|(_, p)| p.lease == LeaseWait::Asking);
        asking.map(|(id, _)| *id).collect()
    }

    /// `job`'s claims that wait for its guard to go (a run found alive, or being replaced),
    /// the earliest tick first.
    pub fn waiting_on_guard(&self, job: &JobName) -> Vec<ClaimId> {
        let mut waiting: Vec<(DateTime<Utc>, ClaimId)> = self
            .by_id
            .iter()
            .filter(|(_, p)| p.config.spec.name == *job)
            .filter(|(_, p)| {
                matches!(
                    p.state,
                    PendingState::RunAlive { .. }
                        | PendingState::Replacing { .. }
                        | PendingState::AfterOwnRun(_)
                )
            })
            .map(|(id, p)| (p.tick, *id))
            .collect();
        waiting.sort();
        waiting.into_iter().map(|(_, id)| id).collect()
    }

    /// The wall clock stepped by `by`: the waits keep their length.
    pub fn clock_stepped(&mut self, by: chrono::Duration) {
        for pending in self.by_id.values_mut() {
            if let PendingState::Replacing { until, .. } = &mut pending.state {
                *until += by;
            }
            if let LeaseWait::Failed { at, .. } = &mut pending.lease {
                *at += by;
            }
        }
    }

    fn insert(&mut self, id: ClaimId, pending: Pending) {
        if starts_a_run(&pending) {
            *self
                .starting
                .entry(pending.config.spec.name.clone())
                .or_default() += 1;
        }
        if let Some(old) = self.by_id.insert(id, pending) {
            self.forget(&old);
        }
    }

    pub fn remove(&mut self, id: &ClaimId) -> Option<Pending> {
        let pending = self.by_id.remove(id)?;
        self.forget(&pending);
        if let Some(run) = self.run_of.remove(id) {
            self.runs.remove(&run);
            if let Some(queue) = self.held.get_mut(&run) {
                self.released.extend(queue.pop_front());
                if queue.is_empty() {
                    self.held.remove(&run);
                }
            }
        }
        Some(pending)
    }

    fn forget(&mut self, pending: &Pending) {
        if !starts_a_run(pending) {
            return;
        }
        let job = &pending.config.spec.name;
        if let Some(count) = self.starting.get_mut(job) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.starting.remove(job);
            }
        }
    }

    /// Sends the held claims whose run's claim has settled (during this input); a stopping
    /// node sends none, as it starts nothing new.
    pub fn send_released(&mut self, stopping: bool, out: &mut Vec<Action>) {
        for held in std::mem::take(&mut self.released) {
            if stopping {
                continue;
            }
            self.send(held.pending, held.record, held.mode, out);
        }
    }

    /// The claim out here for `run` (whichever its attempt).
    pub fn of_run(&self, run: &RunKey) -> Option<&Pending> {
        self.by_id.get(self.runs.get(&run.run())?)
    }

    /// The due time of the claim held here that runs submission `id` of `job`. A claim that
    /// records it `missed` does not hold it: the delayed queue keeps it until that record is
    /// written, and considers it again if it is not.
    pub fn due_of_submission(&self, job: &JobName, id: &SubmissionId) -> Option<i64> {
        self.of_run(&RunKey::of_submission(job, id))
            .filter(|pending| starts_a_run(pending))
            .map(|pending| pending.tick.timestamp_millis())
    }

    /// The claims of `job` held here that start a run.
    pub fn starting_of(&self, job: &JobName) -> usize {
        self.starting.get(job).copied().unwrap_or(0)
    }

    pub fn get(&self, id: &ClaimId) -> Option<&Pending> {
        self.by_id.get(id)
    }

    /// A held claim, to change its state. Its kind must stay what it was: a record-only claim
    /// stays record-only, another never becomes one (see the module's doc).
    pub fn get_mut(&mut self, id: &ClaimId) -> Option<&mut Pending> {
        self.by_id.get_mut(id)
    }

    /// The ids held now, to go through while claims come and go.
    pub fn ids(&self) -> Vec<ClaimId> {
        self.by_id.keys().copied().collect()
    }

    pub fn values(&self) -> impl Iterator<Item = &Pending> + '_ {
        self.by_id.values()
    }

    /// The count kept against one made afresh: they differ only if a claim changed kind while
    /// held (the tests check after every input).
    #[cfg(test)]
    pub fn counts_agree(&self) -> bool {
        let mut fresh: HashMap<JobName, usize> = HashMap::new();
        for pending in self.by_id.values().filter(|p| starts_a_run(p)) {
            *fresh.entry(pending.config.spec.name.clone()).or_default() += 1;
        }
        let held: std::collections::HashSet<&ClaimId> = self.by_id.keys().collect();
        // One claim out per run; a run with claims held has one out (or just settled).
        let indexed = self.run_of.len() == self.runs.len()
            && self.run_of.keys().all(|id| held.contains(id))
            && self
                .runs
                .iter()
                .all(|(run, id)| self.run_of.get(id) == Some(run))
            && self.held.values().all(|queue| !queue.is_empty())
            && self.released.is_empty();
        fresh == self.starting && indexed
    }
}

#[cfg(test)]
mod tests;
