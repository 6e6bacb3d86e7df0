//! Calendars (`except`, `only`), the part of the fire machine that records the ticks a job's
//! calendars skip: one `skipped` record for each run of consecutive skipped ticks, named by its
//! first tick and written when it comes, saying through which tick it reaches.
//!
//! Owns: where such a run ends, and that its later ticks are accounted for (catch-up records a
//! run that began while nobody owned the lock with [`skipped_run`] too).
//! Must not: decide what a calendar covers (`crate::calendar` does) or write around the claim
//! path: the record goes through the fenced, create-once claim of any record.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Action, FireMachine, Me};
use crate::calendar::Skip;
use crate::config::JobConfig;
use crate::ids::FencingToken;
use crate::run::RunRecord;

/// A run of skipped ticks is followed this far at most (a calendar that skips every tick for
/// ever, say): the next tick starts another record.
const MAX_RUN: u64 = 10_000;

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
        let (record, last) = skipped_run(&self.me, job, tick, skip, token, now);
        state.calendar_through = Some(last);
        self.claim_path(now, out, |s, ctx| s.claim_record_only(ctx, job, record));
    }
}

/// The `skipped` record of the run of skipped ticks that starts at `tick`, followed forward
/// ([`MAX_RUN`] ticks at most), and its last tick: what the owner writes when the run's first
/// tick comes, and what catch-up writes for a run that began while nobody owned the lock.
pub(super) fn skipped_run(
    me: &Me,
    job: &JobConfig,
    tick: DateTime<Utc>,
    skip: &Skip,
    token: FencingToken,
    now: DateTime<Utc>,
) -> (RunRecord, DateTime<Utc>) {
    let (mut last, mut count) = (tick, 1);
    while let Some(next) = job
        .next_tick_after(last)
        .filter(|next| count < MAX_RUN && job.calendars.skips(*next).is_some())
    {
        last = next;
        count += 1;
    }
    let name = &job.spec.name;
    tracing::info!(job = %name, %tick, through = %last, ticks = count, reason = skip.reason(), "ticks skipped by calendar");
    let mut record = me.skipped(name, tick, token, now, skip.reason());
    record.missed_ticks = Some(count);
    record.skipped_through_unix_ms = Some(last.timestamp_millis());
    (record, last)
}
