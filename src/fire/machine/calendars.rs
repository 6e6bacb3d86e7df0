//! Calendars (`except`, `only`), the part of the fire machine that records the ticks a job's
//! calendars skip: one `skipped` record for each run of consecutive skipped ticks, named by its
//! first tick and written when it comes, saying through which tick it reaches.
//!
//! Owns: where such a run ends, and that its later ticks are accounted for (catch-up records a
//! run that began while nobody owned the lock with [`Me::skipped_run`](super::Me::skipped_run)
//! too); that a tick is held while the job's listing is awaited (`backlog` records it once the
//! listing came).
//! Must not: decide what a calendar covers (`crate::calendar` does) or write around the claim
//! path: the record goes through the fenced, create-once claim of any record.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::backlog;
use super::{Action, FireMachine};
use crate::calendar::Skip;
use crate::config::JobConfig;

impl FireMachine {
    /// `tick` of `job` is one its calendars skip (`skip`): the first of a run, recorded once for
    /// the run, or a later one, accounted for already.
    pub(super) fn calendar_skips(
        &mut self,
        job: &Arc<JobConfig>,
        tick: DateTime<Utc>,
        skip: &Skip,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let name = &job.spec.name;
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state
            .calendar_through
            .is_some_and(|through| tick <= through)
        {
            tracing::debug!(job = %name, %tick, reason = skip.reason(), "tick skipped by calendar, recorded with its run");
            return;
        }
        let (Some(token), true) = (self.lock.token, self.lock.may_fire) else {
            return;
        };
        // The owner before us may have recorded this run already, named by an earlier first
        // tick: a record named by this one would be a second. Only the job's listing says (its
        // `skipped_through_unix_ms`, its newest tick), so the tick waits for it — behind those
        // held before it, in order; a failed listing keeps them until its relist answers.
        if state.awaits_listing()
            || !state.held_skips.is_empty()
            || self.housekeeping.relist_pending(name)
        {
            tracing::debug!(job = %name, %tick, reason = skip.reason(), "tick skipped by calendar, recorded once catch-up has listed the job's records");
            state.held_skips.push((tick, skip.clone()));
            return;
        }
        self.claim_path(now, out, |s, ctx| {
            backlog::record_skipped_run(s, ctx, job, tick, skip, token)
        });
    }
}
