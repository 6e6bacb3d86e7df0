//! The wall clock a node schedules by: its own, or the ZooKeeper servers' when its own is off
//! theirs by more than `lock.max_clock_offset` (issue 34).
//!
//! A node whose clock is that far off stands aside while an eligible member can own the lock
//! (`lock::clock`). When none can, it owns and fires, and then fires by the servers' time, so
//! that a node 15 s ahead does not fire every tick 15 s early and one 10 minutes behind does
//! not fire nothing for ten minutes. That time is carried on this process's monotonic clock
//! from the clock check's samples (`lock::clock_watch`, re-estimated at every check), not read
//! off its wall clock minus an offset: a wall clock that steps or drifts while the node is
//! corrected (NTP waking up, a VM resumed) then moves nothing the node schedules by, and the
//! fire machine sees no step (issue 53). The fire machine gets the corrected time as its input;
//! the instants a run waits for (a launcher's hold) are [`Deadline`]s fixed on the monotonic
//! clock when they are set.
//!
//! Owns: the servers' time in force, this process's monotonic origin, the conversions, and the
//! deadlines on the clock that carries the schedule.
//! Must not: decide when to correct (the clock check does) or schedule anything.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};

/// Stored while the node schedules by its own wall clock.
const NOT_CORRECTED: i64 = i64::MIN;

/// This process's monotonic clock, in µs from its first reading.
fn monotonic_us() -> i64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    i64::try_from(origin.elapsed().as_micros()).unwrap_or(i64::MAX)
}

/// This process's monotonic clock, in ms from an origin of its own: what the clock check's
/// samples are read on.
pub fn monotonic_ms() -> i64 {
    monotonic_us() / 1000
}

/// An instant to wait for: a reading of the wall clock (a step of it moves the instant), or
/// of the monotonic clock (a step of the wall clock moves nothing). The fire driver's runs wait
/// for monotonic ones ([`EnsembleClock::deadline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    Wall(DateTime<Utc>),
    Monotonic(Instant),
}

impl From<DateTime<Utc>> for Deadline {
    fn from(at: DateTime<Utc>) -> Self {
        Self::Wall(at)
    }
}

impl Deadline {
    /// How long until it comes: zero once it has.
    pub fn left(&self) -> Duration {
        match self {
            Self::Wall(at) => (*at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
            Self::Monotonic(at) => at.saturating_duration_since(Instant::now()),
        }
    }

    /// What this node's wall clock will read when it comes, as far as can be told now.
    pub fn on_wall(&self) -> DateTime<Utc> {
        match self {
            Self::Wall(at) => *at,
            Self::Monotonic(_) => {
                Utc::now() + TimeDelta::from_std(self.left()).unwrap_or(TimeDelta::MAX)
            }
        }
    }
}

/// The time in force, shared by the clock check (which sets it) and every fire driver and run
/// of the process (which read it).
#[derive(Debug)]
pub struct EnsembleClock {
    /// The servers' clock minus [`monotonic_ms`], in ms, when corrected; [`NOT_CORRECTED`]
    /// when not.
    servers_minus_monotonic_ms: AtomicI64,
}

impl Default for EnsembleClock {
    fn default() -> Self {
        Self {
            servers_minus_monotonic_ms: AtomicI64::new(NOT_CORRECTED),
        }
    }
}

impl EnsembleClock {
    /// The time to schedule by: the servers' when corrected, else this node's wall clock.
    pub fn now(&self) -> DateTime<Utc> {
        match self.servers_minus_monotonic_ms() {
            Some(ms) => {
                DateTime::from_timestamp_micros(ms * 1000 + monotonic_us()).unwrap_or_else(Utc::now)
            }
            None => Utc::now(),
        }
    }

    /// It schedules by the servers' time, not its own wall clock.
    pub fn corrected(&self) -> bool {
        self.servers_minus_monotonic_ms().is_some()
    }

    /// The deadline for the instant `at` of the time this node schedules by, fixed now on the
    /// monotonic clock. A run is held for its instant twice, by the daemon and by its launcher
    /// (another process): on the wall clock, a step of it between their two readings made them
    /// disagree — the daemon let the job go, the launcher held it on, and a cancel then ended
    /// a job that never ran as if it had (issue 53). A step after the claim moves the instant
    /// no more than a step just after the start would have.
    pub fn deadline(&self, at: DateTime<Utc>) -> Deadline {
        let left = (at - self.now()).to_std().unwrap_or(Duration::ZERO);
        Deadline::Monotonic(Instant::now() + left)
    }

    /// The servers' time when this node's wall clock reads `local`.
    pub fn to_ensemble(&self, local: DateTime<Utc>) -> DateTime<Utc> {
        local - self.correction()
    }

    /// This node's wall clock minus the servers', as corrected now (0: not corrected).
    pub fn correction_ms(&self) -> i64 {
        self.correction().num_milliseconds()
    }

    /// Schedules by the servers' time from now on, `servers_minus_monotonic_ms` after
    /// [`monotonic_ms`] (`None`: by this node's own wall clock again).
    pub fn follow(&self, servers_minus_monotonic_ms: Option<i64>) {
        let stored = servers_minus_monotonic_ms.unwrap_or(NOT_CORRECTED);
        self.servers_minus_monotonic_ms
            .store(stored, Ordering::Relaxed);
    }

    fn servers_minus_monotonic_ms(&self) -> Option<i64> {
        let stored = self.servers_minus_monotonic_ms.load(Ordering::Relaxed);
        (stored != NOT_CORRECTED).then_some(stored)
    }

    fn correction(&self) -> TimeDelta {
        match self.servers_minus_monotonic_ms() {
            Some(_) => Utc::now() - self.now(),
            None => TimeDelta::zero(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The servers' clock minus the monotonic one, for servers `behind_ms` behind our wall
    /// clock now.
    fn servers_behind(behind_ms: i64) -> i64 {
        Utc::now().timestamp_millis() - behind_ms - monotonic_ms()
    }

    #[test]
    fn a_clock_ahead_schedules_by_the_servers_time_and_waits_on_its_own() {
        let clock = EnsembleClock::default();
        let local = DateTime::from_timestamp_millis(1_000_000).unwrap();
        assert_eq!(clock.to_ensemble(local), local, "uncorrected");
        assert_eq!(clock.correction_ms(), 0);
        // 15 s ahead: the servers' 12:00:00 is this clock's 12:00:15.
        clock.follow(Some(servers_behind(15_000)));
        let ahead = clock.correction_ms();
        assert!((14_990..=15_010).contains(&ahead), "{ahead}");
        let noon = DateTime::from_timestamp_millis(43_200_000).unwrap();
        let back = noon - clock.to_ensemble(noon);
        assert!((back.num_milliseconds() - ahead).abs() <= 10, "{back}");
        // A second ahead by the servers' time is waited for on the monotonic clock.
        let deadline = clock.deadline(clock.now() + TimeDelta::seconds(1));
        assert!(matches!(deadline, Deadline::Monotonic(_)), "{deadline:?}");
        let left = deadline.left().as_millis();
        assert!((990..=1_000).contains(&left), "{left}");
        // Ten minutes behind.
        clock.follow(Some(servers_behind(-600_000)));
        let drift = (clock.now() - Utc::now()).num_milliseconds();
        assert!((599_990..=600_010).contains(&drift), "{drift}");
        assert!((-600_010..=-599_990).contains(&clock.correction_ms()));
        clock.follow(None);
        assert_eq!(clock.correction_ms(), 0, "its own clock again");
        let deadline = clock.deadline(Utc::now() + TimeDelta::seconds(1));
        assert!(matches!(deadline, Deadline::Monotonic(_)), "{deadline:?}");
        let left = deadline.left().as_millis();
        assert!((990..=1_000).contains(&left), "{left}");
    }
}
