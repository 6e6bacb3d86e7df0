//! One claim from its send to its settling: what it is for and under which fence, where it
//! stands (in flight, claimed, waiting on a run or its leases, withdrawing), the record it
//! sends, and whether its claimed run starts now (`StartVerdict`).
//!
//! Owns: a pending claim's data and the verdicts drawn from it alone.
//! Must not: keep the set of claims or their counts (`claims`), or act on a verdict (`starts`).
//!
//! Its items are `pub(crate)` for the machine's parts; the module is private, so they are
//! reached only through `claims`' re-exports.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::{Concurrency, JobConfig};
use crate::delayed::submission::SubmissionId;
use crate::fire::machine::protocol::{
    Action, ClaimAction, Fence, FireReason, Item, Me, RunAction, START_LEAD, is_late,
};
use crate::ids::{FencingToken, JobName, NodeId};
use crate::run::{
    AttemptTrace, Claim, ClaimMode, ParentRun, RunContext, RunRecord, RunStatus, SubmissionInput,
};

/// A claim sent and not yet settled.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) config: Arc<JobConfig>,
    pub(crate) tick: DateTime<Utc>,
    pub(crate) reason: FireReason,
    pub(crate) token: FencingToken,
    /// Not before this instant: the tick itself for on-time ticks.
    pub(crate) start_at: DateTime<Utc>,
    /// Part of its job's catch-up sequence.
    pub(crate) in_backlog: bool,
    /// A submission's run: its id and payload.
    pub(crate) submission: Option<SubmissionInput>,
    pub(crate) state: PendingState,
    /// An [`RunAction::Prepare`] went out for it.
    pub(crate) prepared: bool,
    /// Its job's `limits`: where its leases stand.
    pub(crate) lease: LeaseWait,
    /// A claim of an existing record (a retry, a rerun): the record as read and its version, so
    /// a second try (after a run was found alive) claims it again the same way.
    pub(crate) stored: Option<(RunRecord, i32)>,
    /// A chained run's first claim (or record): the parents' runs whose marks it takes.
    pub(crate) parents: Vec<ParentRun>,
    /// What its claim checks: the epoch at `token` (the owner's runs), or this node's member
    /// znode (its own run of a broadcast tick, which no lock change touches).
    pub(crate) fence: Fence,
}

/// Where a claimed run stands with the leases of its job's limits (issue 19).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum LeaseWait {
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
    pub(crate) fn asked(&self) -> bool {
        *self != Self::NotAsked
    }
}

impl Pending {
    /// What the claimed run's job is told: the same when it is prepared as when it starts.
    pub(crate) fn context(&self, me: &Me, claim: &Claim) -> RunContext {
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
            trace: claim.record.trace.zip(me.trace_seed).map(|(run, seed)| {
                Box::new(AttemptTrace::of(
                    run,
                    seed,
                    &claim.record.run_id,
                    claim.record.attempt,
                ))
            }),
        }
    }

    /// The latest its start may be once it waits for a limit: `starting_deadline` after its
    /// tick, or after its claim for a run whose instant is old by design (a backfill's past
    /// tick, a chained run's parents' instant), which would otherwise be given up at once.
    pub(crate) fn lease_deadline(&self) -> DateTime<Utc> {
        let from = if self.reason.in_tick_order() {
            self.tick
        } else {
            self.start_at
        };
        from + chrono::Duration::from_std(self.config.starting_deadline).unwrap_or_default()
    }

    /// Whether to look at its start now: its instant, the next try after a failed take, or
    /// the end of its wait for a limit.
    pub(crate) fn start_due(&self, now: DateTime<Utc>) -> bool {
        match &self.lease {
            LeaseWait::Asking => now > self.lease_deadline(),
            LeaseWait::Failed { at, .. } => *at <= now,
            _ => self.start_deadline() <= now,
        }
    }

    /// When to look at it again while claimed.
    pub(crate) fn claimed_deadline(&self) -> DateTime<Utc> {
        match &self.lease {
            LeaseWait::Asking => self.lease_deadline() + chrono::Duration::milliseconds(1),
            LeaseWait::Failed { at, .. } => *at,
            _ => self.start_deadline(),
        }
    }

    /// The claim of `item` of `config`'s job under `token`: the pending claim, and the record and
    /// mode it sends.
    pub(crate) fn of_item(
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
                record.links.extend(links_to(&item.parents));
                (record, ClaimMode::Create)
            }
        };
        let record = me.traced(record);
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
    pub(crate) fn record_only(
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
    pub(crate) fn of_broadcast(
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
    pub(crate) fn is_members(&self) -> bool {
        self.fence == Fence::Member
    }

    /// The record and mode of a claim made once more: of the stored record at its version (a
    /// retry, a rerun), or a first claim's.
    pub(crate) fn record_once_more(
        &self,
        me: &Me,
        token: FencingToken,
        now: DateTime<Utc>,
    ) -> (RunRecord, ClaimMode) {
        let now_ms = now.timestamp_millis();
        let me_at = (&me.node_id, me.ip.as_str());
        let (record, mode) = match &self.stored {
            Some((stored, version)) => (
                stored.next_attempt(me_at, token, now_ms),
                ClaimMode::Again { version: *version },
            ),
            None => {
                let mut record = fresh_record(
                    &self.config.spec.name,
                    self.tick,
                    self.submission.as_ref(),
                    me_at,
                    token,
                    now_ms,
                );
                record.parents.clone_from(&self.parents);
                record.links.extend(links_to(&self.parents));
                (record, ClaimMode::Create)
            }
        };
        (me.traced(record), mode)
    }

    /// Whether its claimed run starts now. `lock_holds`: this node may fire under the claim's
    /// token; `newest_tick`: its job's newest tick started here; `run_alive`: a run of its job
    /// is alive on this node.
    pub(crate) fn start_verdict(
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
        // A rerun of a run of ours (claimed again after it never started) finds its own tick
        // as the newest: only a later one covers it.
        let rerun = self.stored.is_some();
        if first_attempt && newest_tick.is_some_and(|last| last > tick || (last == tick && !rerun))
        {
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
    pub(crate) fn give_back(&self, out: &mut Vec<Action>) {
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
    pub(crate) fn start_deadline(&self) -> DateTime<Utc> {
        if self.prepared {
            self.start_at - chrono::Duration::from_std(START_LEAD).unwrap_or_default()
        } else {
            self.start_at
        }
    }
}

/// What becomes of a claimed run at its time ([`Pending::start_verdict`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StartVerdict {
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
pub(crate) fn fresh_record(
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
            links: input.traceparent.iter().map(|tp| tp.to_string()).collect(),
            ..RunRecord::claimed_submission(job, tick_ms, &id, me, token, now_ms)
        },
        None => RunRecord::claimed(job, tick_ms, me, token, now_ms),
    }
}

/// What a chained run's span links to: its parents' runs' spans, where they were traced.
fn links_to(parents: &[ParentRun]) -> impl Iterator<Item = String> + '_ {
    parents
        .iter()
        .filter_map(|parent| parent.trace.as_ref().map(crate::run::RunTrace::traceparent))
}

/// A tick's run is claimed as `running`, from its planned start, so that its start writes
/// nothing: for a tick, unlike a submission, a record still `claimed` would prove nothing (the
/// start goes beside its write), and the next owner resolves both alike. A tick that waits for
/// its job's limits after its claim stays `claimed` until it starts, so that the record tells
/// waiting from running. A submission's claim says `running` only where it is made at the due
/// instant and the start follows its answer ([`claimed_at_its_instant`]): it is then the write
/// that fences the request, as the `running` write is otherwise.
pub(super) fn said_running_by_its_claim(mut record: RunRecord, pending: &Pending) -> RunRecord {
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
pub(crate) fn claimed_at_its_instant(config: &JobConfig) -> bool {
    config.spec.starts_submissions_with_their_claim()
        && config.limits.is_empty()
        && config.concurrency == Concurrency::Allow
}

/// A submission's run claimed as `running` that never started, as the `claimed` record to write
/// back: the run is still open (a format 1 marker stays).
pub(crate) fn never_started(claim: &Claim) -> Claim {
    let mut back = claim.clone();
    back.record.status = RunStatus::Claimed;
    back.record.started_unix_ms = None;
    back.open = None;
    back.guard = None;
    back
}

/// A claimed tick that will not start, as the `missed` record that says why.
pub(crate) fn missed_claim(claim: &Claim, why: &str) -> Claim {
    let mut missed = claim.clone();
    missed.record.status = RunStatus::Missed;
    missed.record.error = Some(why.to_owned());
    missed.record.missed_from_unix_ms = Some(missed.record.scheduled_unix_ms);
    missed.record.missed_ticks = Some(1);
    missed
}

#[derive(Debug, Clone)]
pub(crate) enum PendingState {
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
