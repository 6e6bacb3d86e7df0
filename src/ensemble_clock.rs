//! The wall clock a node schedules by: its own, or the ZooKeeper servers' when its own is off
//! theirs by more than `lock.max_clock_offset` (issue 34).
//!
//! A node whose clock is that far off stands aside while an eligible member can own the lock
//! (`lock::clock`). When none can, it owns and fires, and then fires by the servers' time: its
//! own clock corrected by the offset the clock check measured (`lock::clock_watch`, re-estimated
//! at every check), so that a node 15 s ahead does not fire every tick 15 s early and one 10
//! minutes behind does not fire nothing for ten minutes. The fire machine gets the corrected
//! time as its input; the instants this node waits for on its own clock (the driver's alarm, a
//! launcher's hold) are turned back into its own clock's readings.
//!
//! Owns: the correction in force, and the two conversions.
//! Must not: decide when to correct (the clock check does) or schedule anything.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, TimeDelta, Utc};

/// The correction in force, shared by the clock check (which sets it) and every fire driver
/// and run of the process (which read it).
#[derive(Debug, Default)]
pub struct EnsembleClock {
    /// This node's clock minus the servers', when it is corrected; 0 when it is not.
    correction_ms: AtomicI64,
}

impl EnsembleClock {
    /// The time to schedule by: this node's wall clock, corrected.
    pub fn now(&self) -> DateTime<Utc> {
        self.to_ensemble(Utc::now())
    }

    /// What this node's clock reads when the servers' reads `at`: the instant to wait for on
    /// it.
    pub fn to_local(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        at + self.correction()
    }

    /// The servers' time when this node's clock reads `local`.
    pub fn to_ensemble(&self, local: DateTime<Utc>) -> DateTime<Utc> {
        local - self.correction()
    }

    /// This node's clock minus the servers', as corrected now (0: not corrected).
    pub fn correction_ms(&self) -> i64 {
        self.correction_ms.load(Ordering::Relaxed)
    }

    /// Corrects by `ms` from now on (0: this node's own clock again).
    pub fn set_correction_ms(&self, ms: i64) {
        self.correction_ms.store(ms, Ordering::Relaxed);
    }

    fn correction(&self) -> TimeDelta {
        TimeDelta::milliseconds(self.correction_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_ahead_schedules_by_the_servers_time_and_waits_on_its_own() {
        let clock = EnsembleClock::default();
        let local = DateTime::from_timestamp_millis(1_000_000).unwrap();
        assert_eq!(clock.to_ensemble(local), local, "uncorrected");
        // 15 s ahead: the servers' 12:00:00 is this clock's 12:00:15.
        clock.set_correction_ms(15_000);
        let noon = DateTime::from_timestamp_millis(43_200_000).unwrap();
        assert_eq!(clock.to_local(noon).timestamp_millis(), 43_215_000);
        assert_eq!(clock.to_ensemble(clock.to_local(noon)), noon);
        // Ten minutes behind.
        clock.set_correction_ms(-600_000);
        assert_eq!(clock.to_local(noon).timestamp_millis(), 42_600_000);
        let drift = (clock.now() - Utc::now()).num_milliseconds();
        assert!((599_000..=601_000).contains(&drift), "{drift}");
    }
}
