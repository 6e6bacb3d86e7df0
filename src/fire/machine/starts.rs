//! The claim path, the part of the fire machine every start goes through: one fenced claim per
//! run (a tick, a retry, a rerun, a submission, a backfill), its answer, the start at the run's
//! instant (in time, in order, as its `concurrency` and its limits' leases allow), the run's end
//! and its final record, and records that start nothing (`skipped`, `missed`).
//!
//! Owns: the claims out or held (`claims`), the runs alive and the retries waiting (`runs`),
//! the guards of claims that never started (`guards`), the final records written again
//! (`rewrites`); a `forbid` job's guard taken, released and waited for (`guarding`).
//! Must not: decide what is due or when (the router hands it items), or reach the router's other
//! parts: what it needs of them comes in a [`Ctx`], and what they must do next goes back as a
//! [`Follow`], in order (`ctx`).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::claims::{
    self, LeaseWait, Pending, PendingState, StartVerdict, fresh_record, missed_claim, never_started,
};
use super::ctx::{Ctx, Follow};
use super::guards::Guards;
use super::housekeeping::Retention;
use super::protocol::{
    Action, ClaimAction, ClaimId, ClaimRefused, FireReason, Item, LockAction, MISSED_AFTER,
    RunAction, StartWrite, is_late, on_time_until,
};
use super::rewrites::Rewrites;
use super::runs::{self, Runs};
use super::unrecorded::Unrecorded;
use crate::config::{Concurrency, JobConfig};
use crate::control::Pause;
use crate::delayed::submission::SubmissionId;
use crate::ids::JobName;
use crate::lock::LockStatus;
use crate::run::{Claim, ClaimMode, RunRecord, RunStatus};

/// A run whose lease could not be taken (ZooKeeper failed) asks again this much later.
const LEASE_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// The claim path's state. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Starts {
    pub claims: claims::Claims,
    pub runs: Runs,
    pub guards: Guards,
    pub rewrites: Rewrites,
    pub unrecorded: Unrecorded,
    /// A tick was declined for being at or before its job's newest recorded tick since the
    /// lock was gained: said once, not per tick.
    behind_the_ledger_said: bool,
}

impl Starts {
    /// When the claim path needs a tick: claims at their instant or waiting, retries (`paused`
    /// jobs' wait), records to write again (only while `connected`: an outage does not use up
    /// the attempts).
    pub fn next_deadline(
        &self,
        lock: LockStatus,
        paused: impl Fn(&JobName) -> bool,
    ) -> Option<DateTime<Utc>> {
        let connected = lock.connected;
        let claims = self.claims.values().filter_map(|p| match &p.state {
            PendingState::Claimed(_) => Some(p.claimed_deadline()),
            // Waiting on our own run: its end wakes the claim, the late-tick rule bounds it.
            PendingState::RunAlive { .. } if self.waits_on_own_run(p) => {
                p.reason.on_time().then(|| on_time_until(&p.config, p.tick))
            }
            PendingState::RunAlive { at } => Some(*at),
            PendingState::Replacing { until, .. } => Some(*until),
            PendingState::AfterOwnRun(_) => {
                p.reason.on_time().then(|| on_time_until(&p.config, p.tick))
            }
            _ => None,
        });
        let retries = self.runs.retry_deadlines(paused);
        let rewrites = self.rewrites.next_deadline().filter(|_| connected);
        let unrecorded = self
            .unrecorded
            .next_deadline()
            .filter(|_| connected && lock.may_fire);
        claims
            .chain(retries)
            .chain(rewrites)
            .chain(unrecorded)
            .min()
    }

    /// Claim `id` at a tick: started at its instant, tried again once a run found alive should
    /// be gone, skipped once its own run outlived the late-tick rule, or started once the run it
    /// replaces had its grace.
    pub fn claim_due(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let now = ctx.now;
        match &pending.state {
            PendingState::Claimed(_) if pending.start_due(now) => self.try_start(ctx, id),
            PendingState::RunAlive { at } if *at <= now => {
                if !self.waits_on_own_run(pending) {
                    self.claim_again(ctx, id);
                } else if pending.reason.on_time() && is_late(&pending.config, pending.tick, now) {
                    // Our own later run stayed alive past the late-tick rule.
                    self.skip_run_alive(ctx, id);
                }
            }
            PendingState::Replacing { until, .. } if *until <= now => {
                tracing::warn!(job = %pending.config.spec.name, tick = %pending.tick, "replaced run did not end within its grace; starting anyway");
                self.start_replacing(ctx, id);
            }
            PendingState::AfterOwnRun(claim)
                if pending.reason.on_time() && is_late(&pending.config, pending.tick, now) =>
            {
                let reason = "a run of the job is still alive on this node (concurrency = forbid)";
                tracing::warn!(job = %pending.config.spec.name, tick = %pending.tick, reason, "tick skipped: our own later run outlived the late-tick rule");
                let mut skipped = claim.clone();
                skipped.record.status = RunStatus::Skipped;
                skipped.record.error = Some(reason.to_owned());
                if pending.is_members() {
                    return self.members_unstarted(ctx, id, skipped);
                }
                ctx.out
                    .push(Action::Claims(ClaimAction::WriteRecord(skipped)));
                self.settle(ctx, id);
            }
            _ => {}
        }
    }

    /// The lock was gained at `now`: the next tick behind the ledger is worth a warning again,
    /// and the records kept from an earlier turn as owner go now.
    pub fn lock_gained(&mut self, now: DateTime<Utc>) {
        self.behind_the_ledger_said = false;
        self.unrecorded.reconnected(now);
    }

    /// Runs alive on this node (started, final record not yet written).
    pub fn running(&self) -> usize {
        self.runs.len()
    }

    /// `job`'s runs open on this node: claims out or held, runs alive, retries waiting. What
    /// `max_running` bounds; a record-only claim starts nothing and does not count.
    pub fn open_runs_of(&self, job: &JobName) -> usize {
        self.claims.starting_of(job) + self.runs.open_of(job)
    }

    /// Sends the one claim every start goes through.
    pub fn claim_item(&mut self, ctx: &mut Ctx<'_>, job: &JobName, item: Item, in_backlog: bool) {
        // A paused job's ticks (and their retries and reruns) do not start; its submissions
        // wait pending, and one already claimed or interrupted is carried through.
        if let Some(pause) = ctx
            .steering
            .pause_of(job)
            .filter(|_| item.submission.is_none() && !in_backlog)
        {
            return self.skip_paused(ctx, job, item, &pause);
        }
        let (Some(token), Some(state)) = (ctx.lock.token, ctx.jobs.get(job)) else {
            return;
        };
        let fresh_tick =
            item.again.is_none() && item.submission.is_none() && item.reason.in_tick_order();
        if let Some(newest) = state
            .newest_tick
            .filter(|newest| fresh_tick && item.tick <= *newest)
        {
            return self.behind_the_ledger(job, item.tick, newest, ctx.now);
        }
        let config = Arc::clone(&state.config);
        let (pending, record, mode) =
            Pending::of_item(item, config, token, in_backlog, ctx.me, ctx.now);
        self.claims.send(pending, record, mode, ctx.out);
    }

    /// A tick at or before the job's newest recorded one: it was run, or recorded, by whoever
    /// owned the lock at its time. This node's clock is behind that owner's; it claims nothing
    /// until its clock passes the newest recorded tick, so the job's ticks stay in order and
    /// none runs twice.
    ///
    /// A newest tick that is not ahead of our clock says nothing of the clock: the previous
    /// owner ran or recorded a tick this node had passed over while it waited for the lock (a
    /// handoff, a takeover), and that is only worth a debug line.
    pub fn behind_the_ledger(
        &mut self,
        job: &JobName,
        tick: DateTime<Utc>,
        newest: DateTime<Utc>,
        now: DateTime<Utc>,
    ) {
        if newest <= now {
            tracing::debug!(job = %job, %tick, %newest, "tick not claimed: the previous owner ran or recorded it");
        } else if std::mem::replace(&mut self.behind_the_ledger_said, true) {
            tracing::debug!(job = %job, %tick, %newest, "tick not claimed: at or before the newest recorded tick");
        } else {
            tracing::warn!(job = %job, %tick, newest_recorded = %newest, "tick not claimed: it is at or before the job's newest recorded tick, so this node's clock is behind the previous owner's; ticks start again once the clock passes it (said once)");
        }
    }

    /// A stored record overwritten, at its version, by one that records what became of it
    /// (a retry that came too late): the same fenced claim as a run's next attempt.
    pub fn claim_record_again(
        &mut self,
        ctx: &mut Ctx<'_>,
        config: &Arc<JobConfig>,
        record: RunRecord,
        version: i32,
    ) {
        self.send_record_only(ctx, config, record, ClaimMode::Again { version });
    }

    /// A record that stands for ticks nobody ran (skipped or missed): sent through the same
    /// fenced claim, so only the owner writes it and never over another record.
    pub fn claim_record_only(
        &mut self,
        ctx: &mut Ctx<'_>,
        config: &Arc<JobConfig>,
        record: RunRecord,
    ) {
        let tick = DateTime::from_timestamp_millis(record.scheduled_unix_ms).unwrap_or_default();
        let newest = ctx.jobs.newest_tick(&config.spec.name);
        let own_tick = record.submission_id.is_none() && record.parents.is_empty();
        if let Some(newest) = newest.filter(|newest| own_tick && tick <= *newest) {
            // Its owner accounted for it: a skipped or missed record here would be a second one.
            let claimed =
                DateTime::from_timestamp_millis(record.claimed_unix_ms).unwrap_or_default();
            return self.behind_the_ledger(&config.spec.name, tick, newest, claimed);
        }
        self.send_record_only(ctx, config, record, ClaimMode::Create);
    }

    /// Sends the fenced claim of a record that starts nothing.
    fn send_record_only(
        &mut self,
        ctx: &mut Ctx<'_>,
        config: &Arc<JobConfig>,
        record: RunRecord,
        mode: ClaimMode,
    ) {
        let Some(token) = ctx.lock.token else {
            self.unrecorded.owe_without_a_lock(config, &record, ctx.now);
            return;
        };
        let pending = Pending::record_only(Arc::clone(config), &record, token);
        if mode == ClaimMode::Create {
            self.unrecorded.sending(config, &record);
        }
        self.claims.send(pending, record, mode, ctx.out);
    }

    /// Answer to [`ClaimAction::Claim`]: settles the claim. The submission it was for, and whether
    /// its pending marker was gone, for the delayed queue.
    pub fn claim_done(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
    ) -> Option<(SubmissionId, bool)> {
        let submission = match &result {
            Ok(claim) => claim.record.submission_id.clone(),
            Err(_) => self
                .claims
                .get(&id)
                .and_then(|p| p.submission.as_ref())
                .and_then(|s| SubmissionId::parse(&s.id).ok()),
        };
        if let Ok(claim) = &result {
            let record = &claim.record;
            self.unrecorded
                .claimed(&record.job, record.scheduled_unix_ms, ctx.now);
        }
        let lost = matches!(result, Err(ClaimRefused::AlreadyClaimed));
        if lost && self.claims.at_its_running_version(id) {
            self.claim_again(ctx, id);
            return None;
        }
        if let Ok(claim) = &result {
            self.claims.claimed(claim);
        }
        self.claim_settled(ctx, id, result);
        submission.map(|submission| (submission, lost))
    }

    fn claim_settled(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
    ) {
        let Some(pending) = self.claims.get_mut(&id) else {
            return;
        };
        let job = pending.config.spec.name.clone();
        let tick = pending.tick;
        if matches!(result, Err(ClaimRefused::Vanished)) {
            return self.record_vanished(ctx, id);
        }
        let again = match &pending.state {
            PendingState::RecordOnly => return self.record_only_settled(ctx, id, result),
            PendingState::InFlight { again } => *again,
            _ => return,
        };
        let result = if pending.is_members() {
            match self.members_claimed(ctx, id, result) {
                Some(claim) => Ok(claim),
                None => return,
            }
        } else {
            result
        };
        let Some(pending) = self.claims.get_mut(&id) else {
            return;
        };
        if !pending.is_members() && (ctx.stopping || ctx.steering.yielding()) {
            // A claim that came back after the stop (or a handover) began is given back like
            // the others.
            match result {
                Ok(claim) => {
                    pending.state = PendingState::Withdrawing;
                    ctx.out
                        .push(Action::Claims(ClaimAction::Withdraw { id, claim }));
                }
                Err(_) => {
                    self.claims.remove(&id);
                    ctx.follow(Follow::HandOver);
                }
            }
            return;
        }
        match result {
            Ok(claim) => {
                if pending.start_at <= ctx.now {
                    pending.state = PendingState::Claimed(claim);
                    self.try_start(ctx, id);
                } else {
                    // Its process waits for the instant, not the other way round.
                    pending.prepared = true;
                    ctx.out.push(Action::Runs(RunAction::Prepare {
                        spec: Arc::clone(&pending.config.spec),
                        context: pending.context(ctx.me, &claim),
                        not_before: pending.start_at,
                    }));
                    pending.state = PendingState::Claimed(claim);
                }
            }
            Err(ClaimRefused::RunAlive) if self.guards.send_again_of(&job, ctx.out) => {
                // The guard in the way is likely our own, of a claim that never started, whose
                // release got no answer: sent again; its answer wakes this claim, which waits
                // for it no longer than the late-tick rule allows (issue 31, defect 3).
                pending.state = PendingState::RunAlive {
                    at: pending.start_at
                        + chrono::Duration::from_std(MISSED_AFTER).unwrap_or_default(),
                };
            }
            Err(ClaimRefused::RunAlive) if !again => {
                // Found a run alive ahead of the tick: skip only if it is still alive at the
                // tick's time (issue 8, defect 1). Try again then, or once ours has ended.
                pending.state = PendingState::RunAlive {
                    at: pending.start_at,
                };
                if pending.start_at <= ctx.now && !self.runs.alive_of(&job) {
                    self.claim_again(ctx, id);
                }
            }
            Err(ClaimRefused::RunAlive) => self.skip_run_alive(ctx, id),
            Err(ClaimRefused::AlreadyClaimed) => {
                tracing::debug!(job = %job, %tick, "tick claimed by someone else");
                self.settle(ctx, id);
            }
            Err(ClaimRefused::NotOwner) => {
                let token = pending.token;
                tracing::warn!(job = %job, %tick, token = token.0, "not firing: the epoch has moved past our token");
                // Still the lock node's holder in our own eyes: let the lock re-verify.
                ctx.out.push(Action::Lock(LockAction::FenceFailed(token)));
                self.settle(ctx, id);
            }
            Err(ClaimRefused::Failed(why)) => self.claim_failed(ctx, id, again, &why),
            // Answered before any state was looked at (above); here for the match's sake.
            Err(ClaimRefused::Vanished) => self.record_vanished(ctx, id),
        }
    }

    /// A `skipped` or `missed` record's claim answered: told and pruned like a run's (a paused
    /// job writes only these, kept to `history` like runs).
    fn record_only_settled(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
    ) {
        let Some(pending) = self.claims.remove(&id) else {
            return;
        };
        let (job, tick) = (&pending.config.spec.name, pending.tick);
        let broadcast = pending.config.broadcast.is_some();
        let refused = matches!(result, Err(ClaimRefused::Failed(_)));
        self.unrecorded
            .answered(job, tick.timestamp_millis(), refused, ctx.now);
        match &result {
            // The sweep's record: the sweep reads the answer (a record there is the member's).
            _ if broadcast && !pending.is_members() => {
                let result = result.as_ref().map(|_| ()).map_err(Clone::clone);
                let (job, tick) = (job.clone(), tick);
                ctx.follow(Follow::SweepRecorded { job, tick, result });
            }
            Err(ClaimRefused::Failed(why)) => {
                tracing::warn!(job = %job, %tick, error = why, "skipped or missed ticks not recorded yet: written again once the ledger takes writes")
            }
            Err(why) => {
                tracing::info!(job = %job, %tick, ?why, "skipped or missed ticks not recorded here: another owner's or record stands for them")
            }
            // A broadcast job's records are pruned by the owner's sweep, per member.
            Ok(_) if broadcast => {}
            Ok(claim) => {
                self.tell(ctx, &claim.record, false);
                let retention = Retention::of(&pending.config);
                ctx.housekeeping.prune(job, retention, ctx.now, ctx.out);
            }
        }
        if pending.is_members() {
            ctx.follow(Follow::Stopped); // a stop waits for a member's claims too
        }
    }

    /// Starts a claimed tick at its time, if this node still may.
    fn try_start(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let PendingState::Claimed(claim) = &pending.state else {
            return;
        };
        let job = &pending.config.spec.name;
        if pending.is_members() && ctx.stopping {
            let claim = claim.clone();
            return self.stopped_before_its_start(ctx, id, &claim);
        }
        // A member's own run is fenced by its membership, which its claim checked: the lock
        // and the owner's ticks say nothing of it.
        let members = pending.is_members();
        let lock_holds = members || (ctx.lock.may_fire && ctx.lock.token == Some(pending.token));
        let newest_tick = ctx.jobs.newest_tick(job).filter(|_| !members);
        // Forbid asks whether two processes would overlap: a run whose final record is still
        // being written has ended. (Where the claim took the guard, a run of ours whose final
        // record had not deleted it yet made the claim wait for that write.)
        let run_alive = match pending.config.concurrency {
            Concurrency::Forbid => self.runs.unended_of_job(job),
            _ => self.runs.alive_of(job),
        };
        if run_alive
            && pending.config.concurrency == Concurrency::Forbid
            && lock_holds
            && self.waits_on_own_run(pending)
        {
            let claim = claim.clone();
            if let Some(pending) = self.claims.get_mut(&id) {
                pending.state = PendingState::AfterOwnRun(claim);
            }
            return;
        }
        match pending.start_verdict(claim, lock_holds, newest_tick, run_alive, ctx.now) {
            StartVerdict::Start => {}
            // The record stays for the next owner to resolve, and the guard must not outlive
            // the claim while our session does (the next owner would skip the job for a run
            // that never was).
            StartVerdict::LockLost => {
                self.guards.release(claim, ctx.out);
                let claim = claim.clone();
                if pending.submission.is_some() && claim.sent.status == RunStatus::Running {
                    return self.unsent_at_its_instant(ctx, id, &claim);
                }
                return self.unstarted_for_catch_up(ctx, id, &claim);
            }
            StartVerdict::Missed(why) if members => {
                return self.members_unstarted(ctx, id, missed_claim(claim, &why));
            }
            StartVerdict::Missed(why) => {
                ctx.out
                    .push(Action::Claims(ClaimAction::WriteRecord(missed_claim(
                        claim, &why,
                    ))));
                return self.settle(ctx, id);
            }
            StartVerdict::Skipped(reason) => {
                let mut skipped = claim.clone();
                skipped.record.status = RunStatus::Skipped;
                skipped.record.error = Some(reason.to_owned());
                if members {
                    return self.members_unstarted(ctx, id, skipped);
                }
                ctx.out
                    .push(Action::Claims(ClaimAction::WriteRecord(skipped)));
                return self.settle(ctx, id);
            }
            StartVerdict::Replace { until } => {
                let cancel = self.runs.unended_of(job);
                ctx.out
                    .extend(cancel.map(|run_id| Action::Runs(RunAction::Cancel { run_id })));
                let claim = claim.clone();
                if let Some(pending) = self.claims.get_mut(&id) {
                    pending.state = PendingState::Replacing { claim, until };
                }
                return;
            }
        }
        self.start(ctx, id);
    }

    /// The replaced run ended (or its grace passed): start the replacing one.
    fn start_replacing(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(pending) = self.claims.get_mut(&id) else {
            return;
        };
        if let PendingState::Replacing { claim, .. } = &pending.state {
            pending.state = PendingState::Claimed(claim.clone());
        }
        if !ctx.lock.may_fire || ctx.lock.token != Some(pending.token) {
            tracing::warn!(job = %pending.config.spec.name, tick = %pending.tick, "not firing: the lock was lost after the claim");
            if let PendingState::Claimed(claim) = &pending.state {
                let claim = claim.clone();
                self.guards.release(&claim, ctx.out);
                return self.unstarted_for_catch_up(ctx, id, &claim);
            }
            return self.settle(ctx, id);
        }
        self.start(ctx, id);
    }

    /// A submission claimed at its instant, its claim saying `running`, that the lock's loss
    /// kept from starting: it was never sent. Its record is written back to `claimed`, so that a
    /// next owner sends it; and should this node own the lock again first, its catch-up leaves
    /// the record to it, and it claims the run again as the same attempt — at the version the
    /// write-back made, if that landed (as for a `running` write whose answer was lost). Where
    /// both fail (the session is gone and another node owns the lock first), the next owner
    /// records it `interrupted`: at most once.
    fn unsent_at_its_instant(&mut self, ctx: &mut Ctx<'_>, id: ClaimId, claim: &Claim) {
        let back = never_started(claim);
        let run_id = claim.record.run_id.clone();
        self.claims.maybe_marked_running(run_id, claim.version + 1);
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let item = Item {
            tick: pending.tick,
            reason: FireReason::CaughtUp,
            again: Some((back.record.clone(), claim.version)),
            submission: pending.submission.clone(),
            parents: Vec::new(),
        };
        let job = pending.config.spec.name.clone();
        tracing::info!(job = %job, run_id = claim.record.run_id, "lock lost before the run was sent: its record goes back to claimed");
        ctx.out.push(Action::Claims(ClaimAction::WriteRecord(back)));
        // Owning the lock again already, with the job's catch-up decided (its listing left the
        // run to this claim's answer): the run is taken over now, as that catch-up's would be.
        // Otherwise the next catch-up takes it.
        let owns_again =
            ctx.lock.may_fire && ctx.lock.token.is_some_and(|token| token > pending.token);
        let mut advance = false;
        if let Some(state) = ctx.jobs.get_mut(&job) {
            if owns_again && state.catch_up.is_none() {
                state.backlog.push_back(item);
                advance = true;
            } else {
                state.not_started.push(item);
            }
        }
        self.settle(ctx, id);
        if advance {
            ctx.follow(Follow::Advance(job));
        }
    }

    fn start(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        if self.ask_for_leases(ctx, id) {
            return;
        }
        let Some(mut pending) = self.claims.remove(&id) else {
            return;
        };
        let PendingState::Claimed(mut claim) =
            std::mem::replace(&mut pending.state, PendingState::RecordOnly)
        else {
            return;
        };
        let context = pending.context(ctx.me, &claim);
        let record = if claim.sent.status == RunStatus::Running {
            StartWrite::InClaim
        } else if pending.submission.is_none() {
            StartWrite::Beside
        } else if pending.config.spec.resends_after_failover() {
            StartWrite::Never
        } else {
            StartWrite::Before
        };
        claim.record.status = RunStatus::Running;
        // A prepared run's job starts at its instant, a little after this decision.
        claim.record.started_unix_ms = Some(ctx.now.max(pending.start_at).timestamp_millis());
        let name = &pending.config.spec.name;
        if let (Some(state), None) = (ctx.jobs.get_mut(name), &pending.submission) {
            state.raise_newest_tick(pending.tick);
            if pending.in_backlog {
                state.backlog_claiming = false;
            }
        }
        self.runs.started(
            &claim,
            &pending.config,
            pending.in_backlog,
            pending.submission.clone(),
            ctx.now,
        );
        ctx.out.push(Action::Runs(RunAction::Start {
            spec: Arc::clone(&pending.config.spec),
            claim,
            context,
            record,
            not_before: pending.start_at,
        }));
        if pending.in_backlog {
            ctx.follow(Follow::ReleaseHeld(name.clone()));
        }
    }

    /// A run whose job names limits starts only once it holds a lease of each: asks for them
    /// (`true`: not yet, the answer comes as [`ClaimInput::LeasesTaken`]).
    ///
    /// [`ClaimInput::LeasesTaken`]: super::protocol::ClaimInput::LeasesTaken
    fn ask_for_leases(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) -> bool {
        let Some(pending) = self.claims.get_mut(&id) else {
            return false;
        };
        if pending.config.limits.is_empty() || pending.lease == LeaseWait::Held {
            return false;
        }
        let (PendingState::Claimed(claim)
        | PendingState::Replacing { claim, .. }
        | PendingState::AfterOwnRun(claim)) = &pending.state
        else {
            return false;
        };
        if pending.lease != LeaseWait::Asking {
            ctx.out.push(Action::Claims(ClaimAction::TakeLeases {
                id,
                run_id: claim.record.run_id.clone(),
                limits: pending.config.limits.clone(),
            }));
            pending.lease = LeaseWait::Asking;
        }
        true
    }

    /// Answer to [`ClaimAction::TakeLeases`]: start, or try again after a failed take.
    pub fn leases_taken(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: ClaimId,
        run_id: String,
        failed: Option<String>,
    ) {
        let Some(pending) = self
            .claims
            .get_mut(&id)
            .filter(|p| p.lease == LeaseWait::Asking)
        else {
            // Settled meanwhile (the lock lost, a stop): what was taken goes back.
            if failed.is_none() {
                ctx.out
                    .push(Action::Claims(ClaimAction::GiveBackLeases { run_id }));
            }
            return;
        };
        match failed {
            None => {
                pending.lease = LeaseWait::Held;
                self.try_start(ctx, id);
            }
            Some(limit) => {
                let at = ctx.now + chrono::Duration::from_std(LEASE_RETRY).unwrap_or_default();
                pending.lease = LeaseWait::Failed { at, limit };
            }
        }
    }

    /// A claim ends without a run: forget it, and let its job's catch-up sequence go on.
    fn settle(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(pending) = self.claims.remove(&id) else {
            return;
        };
        // Leases held, or still waited for: either way given back (a wait is given up).
        pending.give_back(ctx.out);
        if pending.in_backlog {
            if let Some(state) = ctx.jobs.get_mut(&pending.config.spec.name) {
                state.backlog_done();
            }
            ctx.follow(Follow::Advance(pending.config.spec.name.clone()));
        }
        ctx.follow(Follow::HandOver);
        if pending.is_members() {
            ctx.follow(Follow::Stopped); // a stop waits for a member's claims too
        }
    }

    /// Runs waiting for a limit's lease cannot start any more: their waits are given up now,
    /// not at their deadline (the records stay for the next owner, as every claimed tick's).
    pub fn give_up_lease_waits(&mut self, ctx: &mut Ctx<'_>) {
        for id in self.claims.asking_leases() {
            self.try_start(ctx, id);
        }
    }

    /// Final records whose write failed, due to go again (only while connected); the
    /// `missed` and `skipped` records the ledger did not take, while this node may fire.
    pub fn write_records_again(&mut self, ctx: &mut Ctx<'_>) {
        if !ctx.lock.connected {
            return;
        }
        ctx.out.extend(
            self.rewrites
                .due(ctx.now)
                .into_iter()
                .map(|claim| Action::Claims(ClaimAction::WriteRecord(claim))),
        );
        let Some(token) = ctx.lock.token.filter(|_| ctx.lock.may_fire) else {
            return;
        };
        for owed in self.unrecorded.due(ctx.now, token) {
            self.send_record_only(ctx, &owed.config, owed.record, ClaimMode::Create);
        }
    }

    /// on_lost: cancel what must not run without the lock; let `finish` jobs end.
    pub fn lost(&mut self, ctx: &mut Ctx<'_>) {
        for (run_id, job, on_lost) in self.runs.unended() {
            if self.runs.is_members(&run_id) {
                continue; // a member's own run: the lock is not what it runs under
            }
            if on_lost == crate::config::OnLost::Cancel {
                tracing::warn!(job = %job, run_id, "lock lost: cancelling the running job (on_lost = cancel)");
                ctx.out.push(Action::Runs(RunAction::Cancel { run_id }));
            } else {
                tracing::info!(job = %job, run_id, "lock lost: letting the running job finish (on_lost = finish)");
            }
        }
        self.runs.drop_retries();
        self.unrecorded.left_to_the_next_owner();
    }

    /// A paused job's item: a tick is recorded `skipped`, a rerun or retry is not started.
    pub fn skip_paused(&mut self, ctx: &mut Ctx<'_>, job: &JobName, item: Item, pause: &Pause) {
        let reason = pause.skip_reason();
        if let Some((record, _)) = &item.again {
            tracing::info!(job = %job, run_id = record.run_id, reason, "not started again: the job is paused");
            return;
        }
        tracing::info!(job = %job, tick = %item.tick, reason, "tick skipped: the job is paused");
        let (Some(token), Some(state)) = (ctx.lock.token, ctx.jobs.get(job)) else {
            return;
        };
        let config = std::sync::Arc::clone(&state.config);
        let me = (&ctx.me.node_id, ctx.me.ip.as_str());
        let mut record = fresh_record(job, item.tick, None, me, token, ctx.now.timestamp_millis());
        record.status = RunStatus::Skipped;
        record.error = Some(reason);
        self.claim_record_only(ctx, &config, record);
    }
}

mod ending;
mod guarding;
mod members;
mod refused;
#[cfg(test)]
mod tests;
