//! A stopping node's order: withdraw the unstarted claims, hand the lock over (once no claim is
//! out, or when [`WITHDRAW_LIMIT`] has passed), then stop the runs and say so once they ended.
//!
//! Owns: how far a stop has come and its limit.
//! Must not: withdraw or cancel anything itself (the router does, from what this says).

use chrono::{DateTime, Utc};

use super::protocol::WITHDRAW_LIMIT;

#[derive(Debug)]
pub(super) struct Stopping {
    hand_over_by: DateTime<Utc>,
    handed_over: bool,
    /// Handed over with claims still out, at the limit: the stop waits for them no longer.
    given_up: bool,
    released: bool,
    stopped: bool,
}

/// What a stopping node does about the lock now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum HandOver {
    /// Claims are out and the limit has not passed; or it was handed over already.
    Wait,
    /// Hand it over; `given_up`: with claims still out.
    Now { given_up: bool },
}

impl Stopping {
    pub fn began(now: DateTime<Utc>) -> Self {
        Self {
            hand_over_by: now + chrono::Duration::from_std(WITHDRAW_LIMIT).unwrap_or_default(),
            handed_over: false,
            given_up: false,
            released: false,
            stopped: false,
        }
    }

    /// With `outstanding` claims (or withdrawals) unanswered.
    pub fn hand_over(&mut self, outstanding: usize, now: DateTime<Utc>) -> HandOver {
        if self.handed_over || (outstanding > 0 && now < self.hand_over_by) {
            return HandOver::Wait;
        }
        self.handed_over = true;
        self.given_up = outstanding > 0;
        HandOver::Now {
            given_up: self.given_up,
        }
    }

    /// When the lock is handed over anyway; `None` once it was.
    pub fn deadline(&self) -> Option<DateTime<Utc>> {
        (!self.handed_over).then_some(self.hand_over_by)
    }

    /// The claims still out when the lock was handed over at the limit are given up: a stop
    /// waits for no answer past it (an ensemble that does not answer must not hold the exit).
    pub fn claims_given_up(&self) -> bool {
        self.given_up
    }

    pub fn released(&mut self) {
        self.released = true;
    }

    /// The lock is released and no run is left (`idle`): true once, when the stop is done.
    pub fn stopped(&mut self, idle: bool) -> bool {
        let done = self.released && idle && !self.stopped;
        self.stopped |= done;
        done
    }

    pub fn clock_stepped(&mut self, by: chrono::Duration) {
        self.hand_over_by += by;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).expect("in range")
    }

    #[test]
    fn the_lock_goes_once_no_claim_is_out_or_at_the_limit_and_once_only() {
        let limit = i64::try_from(WITHDRAW_LIMIT.as_millis()).expect("small");
        let mut stop = Stopping::began(at(0));
        assert_eq!(stop.hand_over(1, at(limit - 1)), HandOver::Wait);
        assert_eq!(stop.deadline(), Some(at(limit)));
        assert_eq!(
            stop.hand_over(1, at(limit)),
            HandOver::Now { given_up: true }
        );
        assert_eq!(stop.hand_over(0, at(limit)), HandOver::Wait, "once");
        assert_eq!(stop.deadline(), None);
        let mut stop = Stopping::began(at(0));
        assert_eq!(stop.hand_over(0, at(1)), HandOver::Now { given_up: false });
    }

    #[test]
    fn stopped_is_said_once_the_lock_is_released_and_the_runs_ended() {
        let mut stop = Stopping::began(at(0));
        assert!(!stop.stopped(true), "the lock is not released yet");
        stop.released();
        assert!(!stop.stopped(false), "a run is left");
        assert!(stop.stopped(true));
        assert!(!stop.stopped(true), "once");
    }
}
