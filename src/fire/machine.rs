//! The fire machine: every decision about starting a run (DESIGN.md "Data flow").
//!
//! Owns: the fire queue, ticks declined while not the owner, the late-tick rule, concurrency
//! (`forbid` / `allow` / `replace`), `on_lost`, catch-up (`on_interrupted`, `misfire`,
//! `starting_deadline`, gaps recorded as `missed`), retries and their backoff, which runs are
//! alive on this node, and the stop order (withdraw unstarted claims → hand the lock over → stop
//! the runs). Every way a run can start is one [`ClaimAction::Claim`] with a [`FireReason`].
//! Must not: do I/O, read a clock, spawn or sleep. Facts come in as [`Input`] with `now`, commands
//! go out as [`Action`]; `fire::driver` performs them against the ledger and the runner.

mod backfill;
mod backlog;
mod broadcast;
mod broadcasting;
mod calendars;
mod catch_up;
mod chained;
mod chains;
mod claiming;
mod claims;
mod controlling;
mod ctx;
mod delayed;
mod guards;
mod housekeeping;
mod jobs;
mod notices;
mod protocol;
mod rewrites;
mod runs;
mod starts;
mod steering;
mod stopping;
mod submissions;
mod sweeps;
mod unrecorded;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::JobConfig;
use crate::fire::queue::FireQueue;
use crate::ids::JobName;
use crate::lock::LockStatus;

pub use catch_up::RESOLVE_WINDOW;
use ctx::{Ctx, Follow};
pub use delayed::DELAYED_HORIZON;
use housekeeping::Housekeeping;
use jobs::{Jobs, mine};
pub use protocol::{
    Action, BroadcastAction, BroadcastInput, CatchUpAction, CatchUpInput, ChainsAction,
    ChainsInput, ClaimAction, ClaimId, ClaimInput, ClaimRefused, ControlAction, ControlInput,
    DelayedAction, DelayedInput, Fence, FireReason, Input, JobRecords, LockAction, LockInput,
    MISSED_AFTER, Me, RecordWrite, RunAction, START_LEAD, Scanned, StartWrite, TickClaim,
    TickRecords, WITHDRAW_LIMIT, Wanted,
};
use protocol::{Item, is_late};
use starts::Starts;
use stopping::{HandOver, Stopping};

/// Decides about firing for one node. See the module docs.
#[derive(Debug)]
pub struct FireMachine {
    me: Me,
    claim_ahead: chrono::Duration,
    jobs: Jobs,
    queue: FireQueue,
    lock: LockStatus,
    /// The latest stretch without a connection to ZooKeeper: `(from, until)`.
    outage: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// The claim path: claims, runs, guards and records written again.
    starts: Starts,
    delayed: delayed::DelayedQueue,
    /// When records are pruned, and failed listings listed again.
    housekeeping: Housekeeping,
    stopping: Option<Stopping>,
    /// The lock's status as the lock driver last reported it; `lock` is what the machine acts
    /// on: not able to fire until the pauses are known, nor while yielding the lock.
    reported: LockStatus,
    /// The pauses, and a handover on request.
    steering: steering::Steering,
    /// The lock group whose jobs this machine fires (`None`: the default group).
    group: Option<String>,
    /// The schedule's jobs of the other groups: their submissions are another owner's to fire,
    /// not a job missing from the schedule.
    elsewhere: HashSet<JobName>,
    /// The pending markers this machine reads.
    wanted: Wanted,
    /// Each job's failures in a row, for its notices and `pause_after_failures`.
    streaks: notices::Streaks,
    /// Backfill requests seen and not yet taken.
    backfills: backfill::Backfills,
    /// Who runs after whom (`after`), and this group's chained jobs' marks being read.
    chains: chains::Chains,
    /// The group's broadcast jobs: run here as a member, swept as the owner.
    broadcasts: broadcast::Broadcasts,
}

impl FireMachine {
    /// A machine for node `me` firing `jobs`; `claim_ahead` is how long before its tick a claim
    /// is sent, so the round trip never delays the fire.
    pub fn new(me: Me, claim_ahead: Duration, jobs: &[Arc<JobConfig>], now: DateTime<Utc>) -> Self {
        Self::for_group(me, None, claim_ahead, jobs, now)
    }

    /// A machine for node `me` firing the jobs of lock group `group` (`None`: the default
    /// group) among `jobs`, the whole schedule (issue 19).
    pub fn for_group(
        me: Me,
        group: Option<String>,
        claim_ahead: Duration,
        jobs: &[Arc<JobConfig>],
        now: DateTime<Utc>,
    ) -> Self {
        let all = jobs;
        let (jobs, elsewhere) = mine(group.as_deref(), jobs);
        let broadcasts = broadcast::Broadcasts::of(&jobs, Default::default(), now);
        let jobs = broadcast::Broadcasts::others(jobs);
        let wanted = Wanted::of(group.as_deref(), &jobs, &elsewhere);
        Self {
            broadcasts,
            chains: chains::Chains::of(all, &jobs),
            me,
            starts: Starts::default(),
            // Beyond chrono's range means "no lead": fire at the tick.
            claim_ahead: chrono::Duration::from_std(claim_ahead).unwrap_or_default(),
            jobs: Jobs::of(&jobs, now),
            queue: FireQueue::new(&jobs, now),
            lock: LockStatus::default(),
            outage: None,
            delayed: delayed::DelayedQueue::default(),
            housekeeping: Housekeeping::default(),
            stopping: None,
            reported: LockStatus::default(),
            steering: steering::Steering::default(),
            group,
            elsewhere,
            wanted,
            streaks: notices::Streaks::default(),
            backfills: backfill::Backfills::default(),
        }
    }

    /// Feeds one fact; returns the commands it implies, in order.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        match input {
            Input::Tick => self.tick(now, &mut out),
            Input::Reloaded(jobs) => self.reloaded(&jobs, now, &mut out),
            Input::Shutdown => self.shutdown(now, &mut out),
            Input::ClockStepped { by } => self.clock_stepped(by, now),
            Input::Lock(LockInput::Changed(status)) => self.lock_changed(status, now, &mut out),
            Input::Lock(LockInput::Released) => self.lock_released(&mut out),
            Input::Claims(input) => self.claims_input(input, now, &mut out),
            Input::CatchUp(input) => self.catch_up_input(input, now, &mut out),
            Input::Delayed(input) => self.delayed_input(input, now, &mut out),
            Input::Control(input) => self.control_input(input, now, &mut out),
            Input::Chains(input) => self.chains_input(input, now, &mut out),
            Input::Broadcast(input) => self.broadcast_input(input, now, &mut out),
        }
        #[cfg(test)]
        assert!(
            self.starts.claims.counts_agree() && self.starts.runs.counts_agree(),
            "the open-run counts kept match a fresh count"
        );
        out
    }

    /// Runs alive on this node (started, final record not yet written).
    pub fn running(&self) -> usize {
        self.starts.running()
    }

    /// When to feed [`Input::Tick`]; `None` means no timer is needed.
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        let queue = match &self.stopping {
            None => {
                let tick = self
                    .queue
                    .next_start()
                    .map(|start| start - self.claim_ahead);
                let delayed = self.delayed.next_deadline(|job| {
                    let config = &self.jobs.get(job)?.config;
                    let room = !self.steering.paused(job)
                        && self.starts.open_runs_of(job) < config.max_running;
                    room.then(|| self.submission_lead(config))
                });
                tick.into_iter().chain(delayed).min()
            }
            Some(stopping) => stopping.deadline(),
        };
        let starts = self
            .starts
            .next_deadline(self.lock, |job| self.steering.paused(job));
        // A stopping node prunes and lists nothing more (`tick`): the next owner does. Their
        // deadlines, left here, would wake the driver at once for ever (issue 31).
        let housekeeping = self
            .housekeeping
            .next_deadline()
            .filter(|_| self.stopping.is_none());
        let yielding = self.steering.deadline();
        let chains = self.chains.next_deadline();
        let broadcasts = self.broadcasts.next_deadline(self.claim_ahead);
        queue
            .into_iter()
            .chain(broadcasts)
            .chain(yielding)
            .chain(chains)
            .chain(starts)
            .chain(housekeeping)
            .min()
    }

    fn tick(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping.is_none() {
            while let Some(next) = self.queue.next_start() {
                if next - self.claim_ahead > now {
                    break;
                }
                let due = self.queue.pop_start(now);
                if due.is_empty() {
                    break;
                }
                for (tick, job) in due {
                    self.due(&job, tick, now, out);
                }
            }
            self.delayed_tick(now, out);
        }
        self.claim_path(now, out, |starts, ctx| starts.write_records_again(ctx));
        self.jobs.forget_late_declined(now);
        for id in self.starts.claims.ids() {
            self.claim_path(now, out, |starts, ctx| starts.claim_due(ctx, id));
        }
        self.retries_due(now, out);
        self.yield_overdue(now, out);
        if self.stopping.is_none() {
            self.housekeeping.prunes_due(now, out);
            self.relists_due(now, out);
        }
        self.chains
            .relist_due(self.lock.may_fire && self.stopping.is_none(), now, out);
        self.broadcast_tick(now, out);
        self.maybe_hand_over(now, out);
    }

    /// Runs `f` on the claim path with what it is lent of the machine, then does what it asks
    /// next, in order.
    fn claim_path<R>(
        &mut self,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
        f: impl FnOnce(&mut Starts, &mut Ctx<'_>) -> R,
    ) -> R {
        let mut ctx = Ctx {
            me: &self.me,
            lock: self.lock,
            jobs: &mut self.jobs,
            steering: &self.steering,
            chains: &self.chains,
            stopping: self.stopping.is_some(),
            streaks: &mut self.streaks,
            housekeeping: &mut self.housekeeping,
            now,
            out: &mut *out,
            follows: Vec::new(),
        };
        let result = f(&mut self.starts, &mut ctx);
        // Claims held behind a run's claim that settled go now, before what follows.
        self.starts
            .claims
            .send_released(ctx.stopping, &mut *ctx.out);
        let follows = ctx.follows;
        self.follow_up(follows, now, out);
        result
    }

    /// What the claim path asked for next, in order. Not generic, unlike
    /// [`FireMachine::claim_path`]: each of these goes through the claim path again.
    fn follow_up(&mut self, follows: Vec<Follow>, now: DateTime<Utc>, out: &mut Vec<Action>) {
        for follow in follows {
            match follow {
                Follow::Advance(job) => {
                    self.claim_path(now, out, |s, ctx| backlog::advance(s, ctx, &job))
                }
                Follow::ReleaseHeld(job) => {
                    self.claim_path(now, out, |s, ctx| backlog::release_held(s, ctx, &job))
                }
                Follow::HandOver => self.maybe_hand_over(now, out),
                Follow::Stopped => self.maybe_stopped(out),
                Follow::SweepRecorded { job, tick, result } => {
                    self.broadcasts.sweeps.recorded(&job, tick, &result, now);
                }
            }
        }
    }

    /// Sends the one claim every start goes through.
    fn claim_item(
        &mut self,
        job: &JobName,
        item: Item,
        in_backlog: bool,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        self.claim_path(now, out, |s, ctx| s.claim_item(ctx, job, item, in_backlog));
    }

    /// A job's tick has come up (`claim_ahead` before its time).
    fn due(
        &mut self,
        job: &Arc<JobConfig>,
        tick: DateTime<Utc>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let name = &job.spec.name;
        if self.lock.may_fire {
            // The owner accounts for every tick it is handed, whatever becomes of it: one let
            // go instead comes again if the clock steps back over it.
            self.queue.keep(name, tick);
        }
        if let Some(skip) = job.calendars.skips(tick) {
            return self.calendar_skips(job, tick, &skip, now, out);
        }
        let mut tick = tick;
        if is_late(job, tick, now) {
            // Popped late, at or before the newest tick recorded: the owner before us ran or
            // recorded it (our clock moved forward past it, e.g. corrected to the servers'
            // right after a takeover). Only the ticks after that one are ours to account for.
            let newest = self.jobs.get(name).and_then(|state| state.newest_tick);
            if let Some(newest) = newest.filter(|newest| tick <= *newest) {
                match job.next_tick_after(newest).filter(|next| *next <= now) {
                    None => {
                        tracing::debug!(job = %name, %tick, %newest, "late tick accounted for by the newest record");
                        return;
                    }
                    Some(next) => tick = next,
                }
            }
        }
        if is_late(job, tick, now) {
            // Popped late: the process was stopped or starved past the tick.
            tracing::warn!(job = %name, %tick, "tick missed: its time passed while this node could not fire");
            if let Some(token) = self.lock.token.filter(|_| self.lock.may_fire) {
                let record = catch_up::stalled_gap(&self.me, token, job, tick, now);
                self.claim_path(now, out, |s, ctx| s.claim_record_only(ctx, job, record));
            }
            return;
        }
        if !self.lock.may_fire {
            tracing::debug!(job = %name, %tick, "not the owner (or disconnected): not firing");
            self.jobs.decline(tick, name.clone());
            return;
        }
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        let item = Item::tick(tick, FireReason::OnTime);
        if state.busy_catching_up() {
            return state.held.push(item);
        }
        self.claim_item(name, item, false, now, out);
    }

    fn lock_changed(&mut self, status: LockStatus, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let before = std::mem::replace(&mut self.reported, status);
        if status.token.is_none() || status.token != before.token {
            self.steering.lock_moved();
        }
        self.apply_lock(now, out);
    }

    /// What the machine acts on: the reported status, unable to fire before the pauses are
    /// known or while yielding the lock.
    fn effective_lock(&self) -> LockStatus {
        LockStatus {
            may_fire: self.reported.may_fire
                && self.steering.pauses_known()
                && !self.steering.yielding(),
            ..self.reported
        }
    }

    /// Moves to the [`FireMachine::effective_lock`]: on_lost, cannot fire, can fire.
    fn apply_lock(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let status = self.effective_lock();
        let before = std::mem::replace(&mut self.lock, status);
        let (broadcasts, lent) = self.broadcasts(now);
        broadcasts.lock_changed(before, &lent, out);
        match (before.connected, status.connected) {
            (true, false) => self.outage = Some((now, None)),
            (false, true) => {
                if let Some((_, until)) = self.outage.as_mut() {
                    *until = Some(now);
                }
                self.starts.rewrites.reconnected(now);
                self.starts.unrecorded.reconnected(now);
                self.claim_path(now, out, |s, ctx| s.write_records_again(ctx));
                self.starts.guards.send_again(out);
            }
            _ => {}
        }
        if self.stopping.is_some() {
            return; // runs are stopped after the handoff, whatever `on_lost` says
        }
        // A new token is a Lost and an acquisition, even with no status between them.
        let lost = before.token.is_some() && before.token != status.token;
        if lost {
            // Taken before on_lost cancels: a cancelled run is alive until its process ended.
            self.claim_path(now, out, |s, ctx| {
                s.guard_outliving_runs(ctx);
                s.lost(ctx);
            });
        }
        if before.may_fire && (lost || !status.may_fire) {
            self.jobs.cannot_fire();
            self.delayed.stop();
            self.claim_path(now, out, |s, ctx| s.give_up_lease_waits(ctx));
        }
        if status.may_fire && (lost || !before.may_fire) {
            self.starts.lock_gained(now);
            self.can_fire(now, out);
        }
    }

    /// Acquired, or back from an outage: resolve what was left open, catch up what was missed,
    /// and fire the ticks declined moments before — in that order, per job (issue 8, defect 2).
    fn can_fire(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if let Some(token) = self.lock.token {
            tracing::info!(token = token.0, "this node owns the lock: firing jobs");
        }
        self.housekeeping.forget_relists();
        let names = self.jobs.can_fire(now);
        out.push(Action::CatchUp(CatchUpAction::PrepareJobs(names.clone())));
        out.extend(
            names
                .into_iter()
                .map(|job| Action::CatchUp(CatchUpAction::ListRecords(job))),
        );
        self.delayed.start(now);
        self.delayed_tick(now, out);
        self.take_backfills(now, out);
        self.chains.list(None, out);
    }

    /// Lists again the jobs whose catch-up listing failed, once their wait is over, while this
    /// node may fire (a new acquisition lists every job anyway).
    fn relists_due(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        for job in self.housekeeping.relists_due(now) {
            if !self.lock.may_fire {
                continue;
            }
            if self
                .jobs
                .start_catch_up(&job, |state| state.catch_up.is_none())
            {
                out.push(Action::CatchUp(CatchUpAction::ListRecords(job)));
            }
        }
    }

    /// Tries failed runs again whose backoff has passed, if this node still owns the lock (the
    /// record is claimed again under our current token, so a retry is at most once like a tick).
    fn retries_due(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        // A pause holds a promised retry, and the resume starts it (issue 24).
        let steering = &self.steering;
        for retry in self
            .starts
            .runs
            .take_due_retries(now, |job| steering.paused(job))
        {
            let job = retry.record.job.clone();
            let run_id = retry.record.run_id.as_str();
            if !self.lock.may_fire || self.stopping.is_some() {
                tracing::info!(job = %job, run_id, "retry left to the next owner: its record says when it is due");
                continue;
            }
            if self.elsewhere.contains(&job) {
                // Its record and marker stay: the catch-up of the job's new group resumes it.
                tracing::info!(job = %job, run_id, "retry left to the job's new lock group");
                continue;
            }
            if !self.jobs.contains(&job) {
                tracing::warn!(job = %job, run_id, "retry dropped: the job is no longer in the schedule");
                out.push(retry.dropped());
                continue;
            }
            let item = retry.into_item(now);
            self.claim_item(&job, item, false, now, out);
        }
    }

    fn reloaded(&mut self, jobs: &[Arc<JobConfig>], now: DateTime<Utc>, out: &mut Vec<Action>) {
        let all = jobs;
        let (jobs, elsewhere) = mine(self.group.as_deref(), jobs);
        self.broadcasts.reloaded(&jobs, now);
        let connected = self.lock.connected;
        self.broadcasts.read_membership_if_unknown(connected, out);
        let jobs = broadcast::Broadcasts::others(jobs);
        self.chains.reloaded(all, &jobs);
        if self.lock.may_fire {
            self.chains.list(None, out);
        }
        self.wanted = Wanted::of(self.group.as_deref(), &jobs, &elsewhere);
        let jobs = &jobs[..];
        let was_elsewhere = std::mem::replace(&mut self.elsewhere, elsewhere);
        self.queue = self.queue.rebuilt(jobs, now);
        let (added, gone) = self.jobs.reload(jobs, now);
        for gone in &gone {
            self.streaks.forget(gone);
        }
        // Submissions kept for a job that was missing or disabled may fire now.
        self.delayed.rescan();
        if self.lock.may_fire && !added.is_empty() {
            out.push(Action::CatchUp(CatchUpAction::PrepareJobs(added.clone())));
            // A job that moved here from another group is caught up like a gained lock: while
            // the nodes' schedules disagreed (a rolling reload), neither group may have fired
            // it, and what its old owner left open or promised is ours now.
            for name in added
                .into_iter()
                .filter(|name| was_elsewhere.contains(name))
            {
                if self
                    .jobs
                    .start_catch_up(&name, |state| state.config.enabled)
                {
                    out.push(Action::CatchUp(CatchUpAction::ListRecords(name)));
                }
            }
        }
    }

    fn shutdown(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(Stopping::began(now));
        self.broadcasts.sweeps.stop();
        self.starts.runs.drop_retries();
        self.housekeeping.stop();
        self.starts.claims.stop();
        self.jobs.stop();
        self.starts.claims.withdraw_unstarted(out);
        self.claim_path(now, out, |s, ctx| {
            s.guard_outliving_runs(ctx);
            s.stop_members(ctx);
        });
        self.maybe_hand_over(now, out);
    }

    /// Yielding: hand over once no claim is out (`outstanding`), or when the limit has passed.
    fn maybe_yield(&mut self, outstanding: usize, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(given_up) = self.steering.yield_due(outstanding, now) else {
            return;
        };
        if given_up {
            self.say_given_up();
        }
        out.push(Action::Lock(LockAction::Yield));
    }

    /// A yield that the lock did not follow in time: fire again; else hand over when due.
    fn yield_overdue(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.steering.yield_overdue(now) {
            self.apply_lock(now, out);
        } else if self.steering.yielding() {
            self.maybe_hand_over(now, out);
        }
    }

    /// Stopping: hand the lock over once no claim is out, or when the limit has passed.
    fn maybe_hand_over(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let outstanding = self.starts.claims.outstanding() + self.starts.guards_taking();
        let Some(stopping) = self.stopping.as_mut() else {
            return self.maybe_yield(outstanding, now, out);
        };
        if let HandOver::Now { given_up } = stopping.hand_over(outstanding, now) {
            if given_up {
                self.say_given_up();
            }
            out.push(Action::Lock(LockAction::HandOver));
        }
    }

    /// The handoff's limit passed with claims still out: names each, so that an operator can
    /// tell what the lock was handed over without (issue 31).
    fn say_given_up(&self) {
        let given_up = self.starts.claims.unanswered();
        tracing::warn!(limit = ?WITHDRAW_LIMIT, ?given_up, "claimed ticks not all withdrawn before the handoff; the next owner resolves them");
    }

    /// See [`Input::ClockStepped`].
    fn clock_stepped(&mut self, by: chrono::Duration, now: DateTime<Utc>) {
        tracing::warn!(
            by_ms = by.num_milliseconds(),
            "the wall clock stepped; the schedule follows it, the limits being counted do not"
        );
        if by < chrono::Duration::zero() {
            self.queue = self.queue.stepped_back(now);
            // Let go by the clock before; the queue hands them out again when they come.
            self.jobs.forget_declined_after(now);
        }
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.clock_stepped(by);
        }
        self.steering.clock_stepped(by);
        self.starts.claims.clock_stepped(by);
        self.starts.rewrites.clock_stepped(by);
        self.starts.unrecorded.clock_stepped(by);
        self.housekeeping.clock_stepped(by);
        self.delayed.clock_stepped(by);
    }

    /// The lock is handed over: each job's stop policy within its grace (the runner's TERM →
    /// grace → KILL).
    fn lock_released(&mut self, out: &mut Vec<Action>) {
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.released();
        }
        let alive = self.starts.runs.alive_ids().into_iter();
        out.extend(alive.map(|run_id| Action::Runs(RunAction::Cancel { run_id })));
        self.maybe_stopped(out);
    }

    fn maybe_stopped(&mut self, out: &mut Vec<Action>) {
        let Some(stopping) = self.stopping.as_mut() else {
            return;
        };
        // A member's claim still out is a run of this node's that its stop sees to the end (no
        // owner withdraws it) — until the handover's limit: one never answered is left to the
        // owner's sweep, which closes the runs of a member gone.
        let claims_done = stopping.claims_given_up() || !self.starts.claims.members_out();
        let idle = self.starts.runs.len() == 0 && claims_done;
        if stopping.stopped(idle) {
            out.push(Action::Stopped);
        }
    }
}

#[cfg(test)]
mod tests;
