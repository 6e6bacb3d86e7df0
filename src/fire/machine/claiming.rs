//! The router's side of the claim path and of catch-up: their answers, each handed to its part
//! in one place — a claim's, its leases', its run's process', its records' and guard's to
//! `starts`, a listing and a mark to the backlog (`backlog`).
//!
//! Owns: which of those answers free room for the submissions waiting under `max_running`, and
//! what follows a withdrawal or a guard taken (a stop's handover may go on).
//! Must not: keep state of its own (`starts` holds the claims and runs, `jobs` the backlogs).

use chrono::{DateTime, Utc};

use super::FireMachine;
use super::backlog::{self, Around};
use super::protocol::{Action, CatchUpInput, ClaimInput, JobRecords};
use crate::ids::JobName;

impl FireMachine {
    /// An answer to the claim path's request ([`ClaimAction`](super::ClaimAction),
    /// [`RunAction`](super::RunAction)).
    pub(super) fn claims_input(
        &mut self,
        input: ClaimInput,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        // A claim settled or a run's record written may free room under a job's `max_running`
        // for submissions that are due and waiting: no deadline wakes those.
        let may_free_room = matches!(
            input,
            ClaimInput::Done { .. }
                | ClaimInput::RecordWritten { .. }
                | ClaimInput::Withdrawn { .. }
        );
        match input {
            ClaimInput::Done { id, result } => self.claim_answered(id, result, now, out),
            ClaimInput::RunEnded { claim, report } => {
                self.claim_path(now, out, |s, ctx| s.run_ended(ctx, *claim, &report));
            }
            ClaimInput::RunNotStarted {
                claim,
                why,
                maybe_written,
            } => {
                self.claim_path(now, out, |s, ctx| {
                    s.run_not_started(ctx, &claim, &why, maybe_written);
                });
            }
            ClaimInput::RecordWritten { run_id, write } => {
                self.claim_path(now, out, |s, ctx| s.record_written(ctx, &run_id, write));
            }
            ClaimInput::LeasesTaken { id, run_id, failed } => {
                self.claim_path(now, out, |s, ctx| s.leases_taken(ctx, id, run_id, failed));
            }
            // Through the claim path: a claim held behind the withdrawn one is let go too.
            ClaimInput::Withdrawn { id } => {
                self.claim_path(now, out, |s, _| s.claims.remove(&id));
                self.maybe_hand_over(now, out);
            }
            ClaimInput::GuardReleased { run_id, settled } => {
                self.claim_path(now, out, |s, ctx| s.guard_released(ctx, &run_id, settled));
            }
            ClaimInput::GuardTaken { run_id, guard } => {
                self.claim_path(now, out, |s, ctx| s.guard_taken(ctx, &run_id, guard));
                self.maybe_hand_over(now, out);
            }
        }
        if may_free_room {
            self.claim_due_submissions(now, out);
        }
    }

    /// An answer to catch-up's request ([`CatchUpAction`](super::CatchUpAction)), through the
    /// backlog.
    pub(super) fn catch_up_input(
        &mut self,
        input: CatchUpInput,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        match input {
            CatchUpInput::Listed { job, result } => self.records_listed(job, result, now, out),
            CatchUpInput::Marked { record, result } => {
                self.claim_path(now, out, |s, ctx| backlog::marked(s, ctx, *record, result));
            }
        }
    }

    /// A job's records listed for catch-up: what its backlog becomes, around the job's next
    /// queued tick and the outage the node comes back from.
    fn records_listed(
        &mut self,
        job: JobName,
        result: Result<JobRecords, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let around = Around {
            next_queued: self.queue.next_of(&job),
            outage: self.outage,
        };
        self.claim_path(now, out, |s, ctx| {
            backlog::records_listed(s, ctx, &job, result, around)
        })
    }
}
