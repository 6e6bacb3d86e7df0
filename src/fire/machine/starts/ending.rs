//! The end of a run on the claim path: its final record, built once (the chain marks its
//! children need included), a process that never started, a claimed run that a disconnect kept
//! from starting, and the record's write answered —
//! its notice, its retry or its prune, and what the router does next.
//!
//! Owns: a run's way from `RunEnded` (or `RunNotStarted`) to `RecordWritten`.
//! Must not: claim or start anything but the same attempt of a run that never started, nor
//! reach the router's other parts but through the [`Ctx`] (`ctx`).

use chrono::DateTime;

use super::{ClaimId, Ctx, Follow, Starts, runs};
use crate::config::Concurrency;
use crate::fire::machine::claims::{PendingState, never_started};
use crate::fire::machine::housekeeping::Retention;
use crate::fire::machine::protocol::{Action, ClaimAction, FireReason, Item, RecordWrite};
use crate::ids::JobName;
use crate::run::{Claim, RunRecord, RunReport, RunStatus};

impl Starts {
    pub fn run_ended(&mut self, ctx: &mut Ctx<'_>, claim: Claim, report: &RunReport) {
        let config = ctx.jobs.config(&claim.record.job).or_else(|| {
            // A broadcast job is not among the owner's jobs: its run's own configuration.
            let run_id = &claim.record.run_id;
            self.runs
                .config_of(run_id)
                .filter(|_| self.runs.is_members(run_id))
                .cloned()
        });
        let mut finished = runs::finished(claim, report, config.as_deref(), ctx.now);
        if finished.guard.is_none() {
            // Taken since the start: its run outlived our hold of the lock.
            finished.guard = self.runs.guard_of(&finished.record.run_id).cloned();
        }
        // Its children's marks go in the record's multi-op: pending once it is recorded ended.
        let (run_id, job) = (finished.record.run_id.clone(), finished.record.job.clone());
        ctx.chains
            .leave_marks(&mut finished, || self.runs.payload_of(&run_id));
        self.runs.ended(&finished);
        ctx.out
            .push(Action::Claims(ClaimAction::WriteRecord(finished)));
        if config.is_none_or(|config| config.concurrency != Concurrency::Forbid) {
            return; // only a forbid job's claims wait behind its runs
        }
        // Claims waiting behind this run start now: its process has ended.
        for id in self.claims.waiting_on_guard(&job) {
            if matches!(
                self.claims.get(&id).map(|p| &p.state),
                Some(PendingState::AfterOwnRun(_))
            ) {
                self.after_own_run(ctx, id);
            }
        }
    }

    /// A run's process never started: nothing is recorded (its record says `claimed`, which is
    /// the truth), its guard goes, and it is claimed again as the same attempt — now if this
    /// node may fire, else by the next catch-up, ours or the next owner's (issue 31, defect 3:
    /// such runs were recorded `failed` and never run).
    pub fn run_not_started(
        &mut self,
        ctx: &mut Ctx<'_>,
        claim: &Claim,
        why: &str,
        maybe_written: bool,
    ) {
        if self.runs.is_members(&claim.record.run_id) {
            return self.members_run_not_started(ctx, claim, why);
        }
        if maybe_written {
            let run_id = claim.record.run_id.clone();
            self.claims.maybe_marked_running(run_id, claim.version + 1);
        }
        let Some(run) = self.runs.remove(&claim.record.run_id) else {
            return;
        };
        self.guards.release(claim, ctx.out);
        // As stored: the `running` write never went through.
        let mut stored = claim.record.clone();
        stored.status = RunStatus::Claimed;
        stored.started_unix_ms = None;
        let item = Item {
            tick: DateTime::from_timestamp_millis(claim.record.scheduled_unix_ms)
                .unwrap_or(ctx.now),
            reason: FireReason::CaughtUp,
            again: Some((stored, claim.version)),
            submission: run.submission.clone(),
            parents: Vec::new(),
        };
        let job = run.job.clone();
        let run_id = &claim.record.run_id;
        if ctx.stopping {
            tracing::info!(job = %job, run_id, why, "run not started before the stop; its record stays claimed for the next owner");
        } else if ctx.lock.may_fire && !ctx.jobs.busy_catching_up(&job) {
            tracing::info!(job = %job, run_id, why, "run not started; claiming it again as the same attempt");
            self.claim_item(ctx, &job, item, false);
        } else if let Some(state) = ctx.jobs.get_mut(&job) {
            tracing::info!(job = %job, run_id, why, "run not started; claimed again as the same attempt once this node can fire");
            state.not_started.push(item);
        }
        Self::run_gone(ctx, &job, run.in_backlog);
    }

    /// A claimed run that a disconnect or the lock's loss kept from starting: never sent, its
    /// record says `claimed`. It is kept for the next catch-up of its job. When this node fires
    /// again under the same token (a disconnect its session outlived), nobody else will ever
    /// read that record: its own catch-up claims the run again as the same attempt, and starts
    /// it or records why not. If the lock moved, the next owner's catch-up finds the record,
    /// and this node's, should it own the lock again first, claims it again. It was dropped
    /// here, and the soak found ticks neither run nor recorded after a server restart cut the
    /// owner off for a moment between a tick's claim and its start.
    pub(super) fn unstarted_for_catch_up(&mut self, ctx: &mut Ctx<'_>, id: ClaimId, claim: &Claim) {
        if let Some(pending) = self.claims.get(&id) {
            let back = never_started(claim);
            let item = Item {
                tick: pending.tick,
                reason: FireReason::CaughtUp,
                again: Some((back.record, claim.version)),
                submission: pending.submission.clone(),
                parents: pending.parents.clone(),
            };
            let job = pending.config.spec.name.clone();
            if let Some(state) = ctx.jobs.get_mut(&job) {
                tracing::info!(job = %job, tick = %pending.tick, "run not started; claimed again as the same attempt once this node can fire, or left to the next owner");
                state.not_started.push(item);
            }
        }
        self.settle(ctx, id);
    }

    pub fn record_written(&mut self, ctx: &mut Ctx<'_>, run_id: &str, write: RecordWrite) {
        if self.rewrites.owns(run_id) {
            if let Some(record) = self.rewrites.answered(run_id, write, ctx.now) {
                self.tell(ctx, &record, record.retry_at_unix_ms.is_some());
            }
            return;
        }
        let Some(run) = self.runs.remove(run_id) else {
            return; // the record of a tick that never started
        };
        if let (RecordWrite::Written(_), Some(finished)) = (write, &run.finished) {
            let record = &finished.record;
            self.tell(ctx, record, record.retry_at_unix_ms.is_some());
        }
        if let (RecordWrite::Failed, Some(finished)) = (write, &run.finished) {
            self.rewrites.first_failed(finished.clone(), ctx.now);
        }
        let job = run.job.clone();
        self.guard_gone(ctx, &job);
        if !ctx.stopping {
            let retry = run.finished.as_ref().and_then(|claim| {
                let at = claim.record.retry_at_unix_ms?;
                Some((DateTime::from_timestamp_millis(at)?, claim))
            });
            match (retry, write) {
                (Some((at, claim)), RecordWrite::Written(version)) => {
                    self.runs.schedule_retry(runs::Retry {
                        at,
                        record: claim.record.clone(),
                        version,
                        submission: run.submission.clone(),
                        resumed: false,
                    });
                }
                // A member's records are pruned by the owner's sweep, per member.
                _ if run.claim.record.broadcast => {}
                _ => ctx
                    .housekeeping
                    .prune(&job, Retention::of(&run.config), ctx.now, ctx.out),
            }
        }
        Self::run_gone(ctx, &job, run.in_backlog);
    }

    /// `record` is stored: the notice it calls for and the pause, if any (`again`: the run will
    /// be started again, so this is not its end).
    pub fn tell(&mut self, ctx: &mut Ctx<'_>, record: &RunRecord, again: bool) {
        if let Some(config) = ctx.jobs.config(&record.job) {
            ctx.streaks
                .tell(record, &config, again, &ctx.me.node_id, ctx.out);
        }
    }

    /// A run is gone from this node (ended and recorded, or never started): the next item of
    /// its job's backlog may go, and a stop may be done.
    fn run_gone(ctx: &mut Ctx<'_>, job: &JobName, in_backlog: bool) {
        if in_backlog {
            if let Some(state) = ctx.jobs.get_mut(job) {
                state.backlog_busy = false;
            }
            ctx.follow(Follow::Advance(job.clone()));
        }
        ctx.follow(Follow::Stopped);
    }
}
