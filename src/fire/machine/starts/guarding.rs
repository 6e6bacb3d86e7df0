//! The claim path's part in a `forbid` job's guard: runs that outlive our hold of the lock take
//! one, and claims that found a guard in the way wait for it to go — behind a run of ours that
//! started after their tick, or for a release — then start or try again.
//!
//! Owns: when a guard is taken or released for a run, and which waiting claims its going wakes.
//! Must not: write anything itself (the driver does, on an [`Action`](super::Action)) or
//! decide the verdict of a start (`claims`).

use std::sync::Arc;

use super::{ClaimId, Ctx, Pending, PendingState, Starts};
use crate::ids::JobName;
use crate::run::{ClaimMode, RunStatus};

impl Starts {
    /// A claim that found the guard held by a run of ours that started after the claim's tick
    /// (catch-up runs first, then the ticks held behind it): that run did not overlap the tick,
    /// so the claim waits for the run's final record, which releases the guard, instead of
    /// retrying at once and skipping.
    pub(super) fn waits_on_own_run(&self, pending: &Pending) -> bool {
        self.runs
            .earliest_start_of(&pending.config.spec.name)
            .is_some_and(|started| started > pending.tick)
    }

    /// The run of ours that a claim waits behind ended: start it, unless another of ours is
    /// still alive.
    pub(super) fn after_own_run(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(pending) = self.claims.get_mut(&id) else {
            return;
        };
        if self.runs.unended_of_job(&pending.config.spec.name) {
            return;
        }
        if let PendingState::AfterOwnRun(claim) = &pending.state {
            pending.state = PendingState::Claimed(claim.clone());
        }
        self.try_start(ctx, id);
    }

    /// Our hold of the lock ends (a handover, a yield, or it was lost while our session may
    /// live): every run of a `forbid` job that will outlive it and holds no guard takes one.
    pub fn guard_outliving_runs(&mut self, ctx: &mut Ctx<'_>) {
        for claim in self.runs.unguarded_forbid() {
            self.guards.take(&claim, ctx.out);
        }
    }

    /// Guards being taken (a handover waits for them).
    pub fn guards_taking(&self) -> usize {
        self.guards.taking()
    }

    /// Answer to [`ClaimAction::TakeGuard`](super::super::ClaimAction::TakeGuard): the run holds its guard now; one whose process ended
    /// meanwhile (its final record went without it) releases it again.
    pub fn guard_taken(&mut self, ctx: &mut Ctx<'_>, run_id: &str, guard: Option<String>) {
        let Some(claim) = self.guards.taken(run_id, guard) else {
            return;
        };
        let Some(path) = claim.guard.as_deref() else {
            return;
        };
        if !self.runs.guard_taken(run_id, path) {
            self.guards.release(&claim, ctx.out);
        }
    }

    /// Answer to [`ClaimAction::ReleaseGuard`](super::super::ClaimAction::ReleaseGuard): claims waiting on a run of ours still alive wait
    /// for its end instead.
    pub fn guard_released(&mut self, ctx: &mut Ctx<'_>, run_id: &str, settled: bool) {
        if let Some(job) = self.guards.answered(run_id, settled)
            && !self.runs.alive_of(&job)
        {
            self.guard_gone(ctx, &job);
        }
    }

    /// `job`'s guard is gone: claims that found it alive try again now (issue 8, defect 1), the
    /// earliest tick first.
    pub(super) fn guard_gone(&mut self, ctx: &mut Ctx<'_>, job: &JobName) {
        for id in self.claims.waiting_on_guard(job) {
            match self.claims.get(&id).map(|p| &p.state) {
                Some(PendingState::Replacing { .. }) if !self.runs.alive_of(job) => {
                    self.start_replacing(ctx, id)
                }
                Some(PendingState::RunAlive { .. }) => self.claim_again(ctx, id),
                Some(PendingState::AfterOwnRun(_)) => self.after_own_run(ctx, id),
                _ => {}
            }
        }
    }

    /// A claim that found a run alive, tried once more.
    pub(super) fn claim_again(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(token) = self.claims.get(&id).map(|p| p.token) else {
            return;
        };
        if !ctx.lock.may_fire || ctx.lock.token != Some(token) {
            return self.settle(ctx, id);
        }
        let Some(mut pending) = self.claims.remove(&id) else {
            return;
        };
        let (record, mode) = pending.record_once_more(ctx.me, token, ctx.now);
        pending.state = PendingState::InFlight { again: true };
        self.claims.send(pending, record, mode, ctx.out);
    }

    /// A run is alive at the tick's time: the tick is recorded `skipped` (concurrency = forbid).
    pub(super) fn skip_run_alive(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let reason = if self.runs.alive_of(&pending.config.spec.name) {
            "a run of the job is still alive on this node (concurrency = forbid)"
        } else {
            "a run of the job is alive on another node (concurrency = forbid)"
        };
        tracing::warn!(job = %pending.config.spec.name, tick = %pending.tick, reason, "tick skipped");
        let (mut record, mode) = pending.record_once_more(ctx.me, pending.token, ctx.now);
        record.status = RunStatus::Skipped;
        record.error = Some(reason.to_owned());
        let config = Arc::clone(&pending.config);
        self.settle(ctx, id);
        match mode {
            // A retry (or rerun) skipped: written over its stored record, at its version.
            ClaimMode::Again { version } => self.claim_record_again(ctx, &config, record, version),
            // Not `claim_record_only`: a later tick of the job may have started meanwhile (it
            // won the guard), and this tick must still end recorded. Its claim found no record
            // (the guard refused it, not the record's create), so this create is not a second.
            ClaimMode::Create => self.send_record_only(ctx, &config, record, ClaimMode::Create),
        }
    }
}
