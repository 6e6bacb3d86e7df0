//! What operators steer, as the fire machine decides it (issue "Operate it"): paused jobs and
//! handing the lock over on request. One more input each on the one claim path.
//!
//! Owns: what a pause holds back (a paused job's ticks are recorded `skipped` and never replayed
//! by catch-up, and their reruns and retries are not started; its pending submissions and
//! triggers wait until it is resumed, while one already claimed or interrupted is carried
//! through), and the order of a handover on request (withdraw unstarted claims, then
//! [`Action::YieldLock`]; firing again only if the lock did not move within [`YIELD_LIMIT`]).
//! Must not: do I/O (pauses come in as [`Input::PausesRead`]) or read a clock.
//!
//! [`Input::PausesRead`]: super::Input::PausesRead

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Action, FireMachine, Item, WITHDRAW_LIMIT, fresh_record};
use crate::control::{Pause, Pauses};
use crate::ids::JobName;
use crate::run::RunStatus;

/// A node that yielded the lock and still holds it this long after fires again (its lock could
/// not be handed over: disconnected, or the request came as it lost the lock).
pub const YIELD_LIMIT: Duration = Duration::from_secs(5);

fn chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or_default()
}

/// A handover on request, under way.
#[derive(Debug)]
pub(super) struct Yielding {
    /// Hand the lock over by then even if claims are still being withdrawn.
    hand_over_by: DateTime<Utc>,
    /// `Some` once [`Action::YieldLock`] went out: fire again from then if we still own.
    give_up_at: Option<DateTime<Utc>>,
}

impl Yielding {
    pub(super) fn deadline(&self) -> DateTime<Utc> {
        self.give_up_at.unwrap_or(self.hand_over_by)
    }

    /// The wall clock stepped by `by`: the limits last as long as they said.
    pub(super) fn clock_stepped(&mut self, by: chrono::Duration) {
        self.hand_over_by += by;
        if let Some(at) = self.give_up_at.as_mut() {
            *at += by;
        }
    }
}

impl FireMachine {
    /// The pause of `job`, when it is paused.
    pub(super) fn pause_of(&self, job: &JobName) -> Option<Pause> {
        self.pauses.as_ref()?.get(job).cloned()
    }

    /// Whether `job` starts nothing new now.
    pub(super) fn paused(&self, job: &JobName) -> bool {
        self.pauses.as_ref().is_some_and(|p| p.contains_key(job))
    }

    pub(super) fn pauses_read(
        &mut self,
        pauses: Pauses,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let before = self.pauses.replace(pauses);
        let known = self.pauses.as_ref();
        for (job, pause) in known.into_iter().flatten() {
            if before.as_ref().is_none_or(|b| !b.contains_key(job)) {
                tracing::info!(job = %job, by = pause.by, reason = pause.reason.as_deref().unwrap_or(""), "job paused: it starts nothing new until resumed");
            }
        }
        for job in before.iter().flat_map(|b| b.keys()) {
            if !known.is_some_and(|p| p.contains_key(job)) {
                tracing::info!(job = %job, "job resumed");
            }
        }
        if before.is_none() {
            // The first reading: this node may fire from now on, if the lock says so.
            self.apply_lock(now, out);
        }
        // Submissions of a resumed job wait for no deadline: claim what is due.
        self.claim_due_submissions(now, out);
    }

    /// A paused job's item: a tick is recorded `skipped`, a rerun or retry is not started.
    pub(super) fn skip_paused(
        &mut self,
        job: &JobName,
        item: Item,
        pause: &Pause,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let reason = pause.skip_reason();
        if let Some((record, _)) = &item.again {
            tracing::info!(job = %job, run_id = record.run_id, reason, "not started again: the job is paused");
            return;
        }
        tracing::info!(job = %job, tick = %item.tick, reason, "tick skipped: the job is paused");
        let (Some(token), Some(state)) = (self.lock.token, self.jobs.get(job)) else {
            return;
        };
        let config = std::sync::Arc::clone(&state.config);
        let me = (&self.me.node_id, self.me.ip.as_str());
        let mut record = fresh_record(job, item.tick, None, me, token, now.timestamp_millis());
        record.status = RunStatus::Skipped;
        record.error = Some(reason);
        self.claim_record_only(&config, record, out);
    }

    pub(super) fn release_requested(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping.is_some() || self.yielding.is_some() {
            return;
        }
        if self.reported.token.is_none() {
            tracing::info!("asked to hand the lock over, but this node does not own it");
            return;
        }
        tracing::info!("asked to hand the lock over: giving back unstarted claims, then releasing");
        self.yielding = Some(Yielding {
            hand_over_by: now + chrono(WITHDRAW_LIMIT),
            give_up_at: None,
        });
        // Withdrawn before the lock's status changes: a claim waiting for a limit's lease
        // would otherwise be settled as a lost lock's, its record and guard left behind, and
        // the guard kept the job from running on the new owner while this session lived.
        self.withdraw_unstarted(out);
        self.apply_lock(now, out);
        self.maybe_hand_over(now, out);
    }

    /// Yielding: hand over once no claim is out (`outstanding`), or when the limit has passed.
    pub(super) fn maybe_yield(
        &mut self,
        outstanding: usize,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(yielding) = self.yielding.as_mut() else {
            return;
        };
        if yielding.give_up_at.is_some() || (outstanding > 0 && now < yielding.hand_over_by) {
            return;
        }
        yielding.give_up_at = Some(now + chrono(YIELD_LIMIT));
        if outstanding > 0 {
            self.say_given_up();
        }
        out.push(Action::YieldLock);
    }

    /// The lock did not move within [`YIELD_LIMIT`] of the yield: fire again.
    pub(super) fn yield_overdue(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let overdue = self
            .yielding
            .as_ref()
            .and_then(|y| y.give_up_at)
            .is_some_and(|at| at <= now);
        if overdue {
            tracing::warn!(limit = ?YIELD_LIMIT, "the lock was not handed over; firing again");
            self.yielding = None;
            self.apply_lock(now, out);
        } else if self.yielding.is_some() {
            self.maybe_hand_over(now, out);
        }
    }
}
