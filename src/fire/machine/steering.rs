//! What operators steer, as the fire machine decides it (issue "Operate it"): paused jobs and
//! handing the lock over on request. One more input each on the one claim path.
//!
//! Owns: what a pause holds back (a paused job's ticks are recorded `skipped` and never replayed
//! by catch-up, and their reruns and retries are not started; its pending submissions and
//! triggers wait until it is resumed, while one already claimed or interrupted is carried
//! through), and the order of a handover on request (withdraw unstarted claims, then
//! [`LockAction::Yield`]; firing again only if the lock did not move within [`YIELD_LIMIT`]).
//! It owns the pauses as last read and the handover under way; the machine asks it and
//! applies what it says to the claims and the lock.
//! Must not: do I/O (pauses come in as [`ControlInput::PausesRead`]), read a clock, or reach into
//! the rest of the machine.
//!
//! [`ControlInput::PausesRead`]: super::protocol::ControlInput::PausesRead
//! [`LockAction::Yield`]: super::protocol::LockAction::Yield

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::protocol::WITHDRAW_LIMIT;
use crate::control::{Pause, Pauses};
use crate::ids::JobName;

/// A node that yielded the lock and still holds it this long after fires again (its lock could
/// not be handed over: disconnected, or the request came as it lost the lock).
pub const YIELD_LIMIT: Duration = Duration::from_secs(5);

fn chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or_default()
}

/// A handover on request, under way.
#[derive(Debug)]
struct Yielding {
    /// Hand the lock over by then even if claims are still being withdrawn.
    hand_over_by: DateTime<Utc>,
    /// `Some` once the yield went out: fire again from then if we still own.
    give_up_at: Option<DateTime<Utc>>,
}

/// The pauses and a handover on request.
#[derive(Debug, Default)]
pub(super) struct Steering {
    /// `None` until the first reading: nothing fires before it.
    pauses: Option<Pauses>,
    yielding: Option<Yielding>,
}

impl Steering {
    /// Whether the pauses have been read once.
    pub(super) fn pauses_known(&self) -> bool {
        self.pauses.is_some()
    }

    /// The pause of `job`, when it is paused.
    pub(super) fn pause_of(&self, job: &JobName) -> Option<Pause> {
        self.pauses.as_ref()?.get(job).cloned()
    }

    /// Whether `job` starts nothing new now.
    pub(super) fn paused(&self, job: &JobName) -> bool {
        self.pauses.as_ref().is_some_and(|p| p.contains_key(job))
    }

    /// A reading of the pauses; says who was paused or resumed since the last. `true`: the
    /// first reading (this node may fire from now on, if the lock says so).
    pub(super) fn pauses_read(&mut self, pauses: Pauses) -> bool {
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
        before.is_none()
    }

    /// A handover on request is under way.
    pub(super) fn yielding(&self) -> bool {
        self.yielding.is_some()
    }

    /// Starts a handover on request: claims are withdrawn until [`WITHDRAW_LIMIT`] from now.
    pub(super) fn start_yielding(&mut self, now: DateTime<Utc>) {
        self.yielding = Some(Yielding {
            hand_over_by: now + chrono(WITHDRAW_LIMIT),
            give_up_at: None,
        });
    }

    /// The lock moved (or was lost): the handover is done.
    pub(super) fn lock_moved(&mut self) {
        if self.yielding.take().is_some() {
            tracing::info!("lock handed over on request");
        }
    }

    /// Yielding with `outstanding` claims still out: `Some` when the yield is to go out now —
    /// once none is out, or at the limit (`Some(true)`: some were given up on).
    pub(super) fn yield_due(&mut self, outstanding: usize, now: DateTime<Utc>) -> Option<bool> {
        let yielding = self.yielding.as_mut()?;
        if yielding.give_up_at.is_some() || (outstanding > 0 && now < yielding.hand_over_by) {
            return None;
        }
        yielding.give_up_at = Some(now + chrono(YIELD_LIMIT));
        Some(outstanding > 0)
    }

    /// `true` when the lock did not move within [`YIELD_LIMIT`] of the yield: the handover is
    /// given up, and this node fires again.
    pub(super) fn yield_overdue(&mut self, now: DateTime<Utc>) -> bool {
        let overdue = self
            .yielding
            .as_ref()
            .and_then(|y| y.give_up_at)
            .is_some_and(|at| at <= now);
        if overdue {
            tracing::warn!(limit = ?YIELD_LIMIT, "the lock was not handed over; firing again");
            self.yielding = None;
        }
        overdue
    }

    /// When to look at the handover again.
    pub(super) fn deadline(&self) -> Option<DateTime<Utc>> {
        self.yielding
            .as_ref()
            .map(|y| y.give_up_at.unwrap_or(y.hand_over_by))
    }

    /// The wall clock stepped by `by`: the limits last as long as they said.
    pub(super) fn clock_stepped(&mut self, by: chrono::Duration) {
        if let Some(yielding) = self.yielding.as_mut() {
            yielding.hand_over_by += by;
            if let Some(at) = yielding.give_up_at.as_mut() {
                *at += by;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).expect("in range")
    }

    fn pause() -> Pause {
        Pause {
            reason: None,
            by: "alice".to_owned(),
            since_unix_ms: 0,
        }
    }

    #[test]
    fn the_first_reading_of_the_pauses_is_told_apart_from_the_next() {
        let mut steering = Steering::default();
        assert!(!steering.pauses_known());
        let job = JobName::new("report");
        assert!(steering.pauses_read(Pauses::from([(job.clone(), pause())])));
        assert!(steering.paused(&job) && steering.pause_of(&job).is_some());
        assert!(!steering.pauses_read(Pauses::new()), "not the first");
        assert!(!steering.paused(&job), "resumed");
    }

    #[test]
    fn a_yield_waits_for_the_claims_out_until_its_limit_then_gives_up_after_its_own() {
        let mut steering = Steering::default();
        steering.start_yielding(at(0));
        assert_eq!(steering.yield_due(1, at(1_000)), None, "a claim is out");
        let limit = i64::try_from(WITHDRAW_LIMIT.as_millis()).expect("small");
        assert_eq!(
            steering.yield_due(1, at(limit)),
            Some(true),
            "given up on it"
        );
        assert_eq!(steering.yield_due(0, at(limit)), None, "yielded once");
        let give_up = limit + i64::try_from(YIELD_LIMIT.as_millis()).expect("small");
        assert_eq!(steering.deadline(), Some(at(give_up)));
        assert!(!steering.yield_overdue(at(give_up - 1)));
        // The wall clock steps back a minute: the limit is as far ahead as it was.
        steering.clock_stepped(chrono::Duration::seconds(-60));
        assert!(!steering.yield_overdue(at(give_up - 60_001)));
        assert!(steering.yield_overdue(at(give_up - 60_000)));
        assert!(!steering.yielding(), "overdue: firing again");
    }

    #[test]
    fn a_lock_that_moves_ends_the_handover() {
        let mut steering = Steering::default();
        steering.start_yielding(at(0));
        assert_eq!(steering.yield_due(0, at(10)), Some(false));
        steering.lock_moved();
        assert!(!steering.yielding() && steering.deadline().is_none());
    }
}
