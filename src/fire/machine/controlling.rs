//! The router's side of the operators' `control/` nodes: the pauses, a release request and the
//! backfill requests, as the driver's watch read them, and the machine's own writes there (a
//! backfill request taken, a job paused after its failures).
//!
//! Owns: what each of those readings sets off (the lock applied again, the submissions and
//! chained runs of a resumed job, a handover, a backfill's ticks into its job's backlog).
//! Must not: keep state of its own (`steering` holds the pauses and the handover, `backfill`
//! the requests).

use chrono::{DateTime, Utc};

use super::protocol::{Action, ControlAction, ControlInput};
use super::{FireMachine, backfill, backlog};
use crate::control::Pauses;

impl FireMachine {
    /// What the operators asked, as the driver's watch on `control/` read it.
    pub(super) fn control_input(
        &mut self,
        input: ControlInput,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        match input {
            ControlInput::PausesRead(pauses) => self.pauses_read(pauses, now, out),
            ControlInput::ReleaseRequested => self.release_requested(now, out),
            ControlInput::BackfillsRead(requests) => {
                self.backfills.read(requests);
                self.take_backfills(now, out);
            }
        }
    }

    /// Once this node may fire: each request for one of its jobs goes into the job's backlog,
    /// its ticks oldest first, and is removed. One for a job that no group fires is removed
    /// too; one for another group's job is that group's.
    pub(super) fn take_backfills(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        let elsewhere = &self.elsewhere;
        for (name, request) in self.backfills.take(|job| elsewhere.contains(job)) {
            let job = request.job.clone();
            let Some(state) = self.jobs.get_mut(&job) else {
                tracing::warn!(job = %job, by = request.by, "backfill of a job not in the schedule: dropped");
                out.push(Action::Control(ControlAction::RemoveBackfill(name)));
                continue;
            };
            tracing::info!(job = %job, ticks = request.ticks.len(), by = request.by, "backfill taken: its ticks run in order");
            state.backlog.extend(backfill::items(&request));
            out.push(Action::Control(ControlAction::RemoveBackfill(name)));
            self.claim_path(now, out, |s, ctx| backlog::advance(s, ctx, &job));
        }
    }

    /// The pauses as read now (the driver's watch on `control/`).
    fn pauses_read(&mut self, pauses: Pauses, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.steering.pauses_read(pauses) {
            self.apply_lock(now, out);
        }
        // Submissions of a resumed job wait for no deadline: claim what is due; its chained
        // runs, likewise, are read again.
        self.claim_due_submissions(now, out);
        if self.lock.may_fire {
            self.chains.list(None, out);
        }
    }

    fn release_requested(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping.is_some() || self.steering.yielding() {
            return;
        }
        if self.reported.token.is_none() {
            tracing::info!("asked to hand the lock over, but this node does not own it");
            return;
        }
        tracing::info!("asked to hand the lock over: giving back unstarted claims, then releasing");
        self.steering.start_yielding(now);
        // Withdrawn before the lock's status changes: a claim waiting for a limit's lease
        // would otherwise be settled as a lost lock's, its record and guard left behind, and
        // the guard kept the job from running on the new owner while this session lived.
        self.starts.claims.withdraw_unstarted(out);
        self.claim_path(now, out, |s, ctx| s.guard_outliving_runs(ctx));
        self.apply_lock(now, out);
        self.maybe_hand_over(now, out);
    }
}
