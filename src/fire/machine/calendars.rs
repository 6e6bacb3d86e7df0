//! Calendars (`except`, `only`), the part of the fire machine that records the ticks a job's
//! calendars skip: one `skipped` record for each run of consecutive skipped ticks, named by its
//! first tick and written when it comes, saying through which tick it reaches.
//!
//! Owns: where such a run ends, and that its later ticks are accounted for (catch-up records a
//! run that began while nobody owned the lock with [`Me::skipped_run`](super::Me::skipped_run)
//! too).
//! Must not: decide what a calendar covers (`crate::calendar` does) or write around the claim
//! path: the record goes through the fenced, create-once claim of any record.

use std::sync::Arc;

use chrono::{DateTime, Utc};

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
        let (record, last) = self.me.skipped_run(job, tick, skip, token, now);
        state.calendar_through = Some(last);
        self.claim_path(now, out, |s, ctx| s.claim_record_only(ctx, job, record));
    }
}
