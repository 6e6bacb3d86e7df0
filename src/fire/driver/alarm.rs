//! Wakes the fire driver at a wall-clock instant, to tens of microseconds.
//!
//! tokio's timers count whole milliseconds and round up, and its poll sleeps whole milliseconds:
//! a run woken by them starts 0.5–1.5 ms after its instant. A `timerfd` on `CLOCK_REALTIME` set to
//! the absolute instant wakes the poll itself when the instant comes (the kernel's timer slack,
//! 50 µs by default), and follows steps of the wall clock by itself.
//!
//! Owns: the timer file descriptor, and telling a step of the wall clock from time passing
//! ([`Steps`]). Must not: know what the instant is for.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::ensemble_clock::EnsembleClock;

/// The timer as tokio's `AsyncFd` wants it.
struct Timer(TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Wakes at instants; falls back to tokio's timer where no `timerfd` can be had.
pub(super) struct Alarm {
    precise: Option<AsyncFd<Timer>>,
}

impl Alarm {
    pub(super) fn new() -> Self {
        let made = TimerFd::new(
            ClockId::CLOCK_REALTIME,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(std::io::Error::from)
        .and_then(|timer| {
            // SAFETY: `Timer` owns its fd (TimerFd holds an OwnedFd) for as long as the AsyncFd
            // owns the Timer, and `as_raw_fd` always names that same fd.
            unsafe { AsyncFd::register_with_interest(Timer(timer), Interest::READABLE) }
                .map_err(|err| err.into_parts().1)
        });
        let precise = match made {
            Ok(fd) => Some(fd),
            Err(err) => {
                tracing::warn!(error = %err, "no timerfd; runs start up to 1.5 ms after their instant");
                None
            }
        };
        Self { precise }
    }

    /// Returns at `at` by `clock` (at once if it has passed). Cancel safe: the next call sets
    /// the timer anew.
    ///
    /// A node corrected to the servers' clock waits on its monotonic clock, as that time is
    /// carried: an instant of its own wall clock would move with a step of it, and the wait
    /// with it, until the next input set the timer anew.
    pub(super) async fn at(&mut self, clock: &EnsembleClock, at: DateTime<Utc>) {
        if clock.corrected() {
            let left = (at - clock.now()).to_std().unwrap_or(Duration::ZERO);
            return tokio::time::sleep(left).await;
        }
        if let Some(fd) = &self.precise {
            if wait_precisely(fd, at).await.is_some() {
                return;
            }
            // A timerfd that failed once is not tried again: the driver sets it on every input,
            // and a lasting failure would log at that rate.
            tracing::warn!(
                "runs start up to 1.5 ms after their instant from now on (tokio's timer)"
            );
            self.precise = None;
        }
        let left = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        tokio::time::sleep(left).await;
    }
}

/// A step of the wall clock beside the monotonic one smaller than this is left alone: NTP's
/// slewing moves it by at most half a millisecond a second.
const STEP_AT_LEAST: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// Tells how far the wall clock jumped since the last look, beyond the time that passed.
pub(super) struct Steps {
    /// The clock the node schedules by: a change of its correction is a step too.
    clock: Arc<EnsembleClock>,
    wall: DateTime<Utc>,
    monotonic: std::time::Instant,
}

impl Steps {
    pub(super) fn new(clock: Arc<EnsembleClock>) -> Self {
        Self {
            wall: clock.now(),
            monotonic: std::time::Instant::now(),
            clock,
        }
    }

    /// The step since the last look, if the wall clock the node schedules by moved by
    /// [`STEP_AT_LEAST`] more or less than the monotonic clock did: this node's clock stepped, or
    /// the correction to the servers' clock came, went or moved.
    pub(super) fn stepped(&mut self) -> Option<chrono::TimeDelta> {
        let (wall, monotonic) = (self.clock.now(), std::time::Instant::now());
        let passed = chrono::TimeDelta::from_std(monotonic - self.monotonic).unwrap_or_default();
        let step = (wall - self.wall) - passed;
        (self.wall, self.monotonic) = (wall, monotonic);
        (step.abs() >= STEP_AT_LEAST).then_some(step)
    }
}

/// `None` when the timer failed (logged): the caller sleeps on tokio's timer instead, for good.
async fn wait_precisely(fd: &AsyncFd<Timer>, at: DateTime<Utc>) -> Option<()> {
    // The epoch itself would disarm the timer; any instant before now rings at once.
    let secs = at.timestamp().max(1);
    let instant = TimeSpec::new(secs, i64::from(at.timestamp_subsec_nanos()));
    let set = fd.get_ref().0.set(
        Expiration::OneShot(instant),
        TimerSetTimeFlags::TFD_TIMER_ABSTIME,
    );
    if let Err(err) = set {
        tracing::warn!(error = %err, "cannot set the timerfd");
        return None;
    }
    loop {
        let mut ready = match fd.readable().await {
            Ok(ready) => ready,
            Err(err) => {
                tracing::warn!(error = %err, "cannot wait on the timerfd");
                return None;
            }
        };
        // Reading the expiration count re-arms readiness; EAGAIN: readiness left over from an
        // earlier instant (the timer was set anew since).
        match nix::unistd::read(fd.get_ref().0.as_fd(), &mut [0_u8; 8]) {
            Ok(_) => return Some(()),
            Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
            Err(nix::errno::Errno::EINTR) => {}
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the timerfd");
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generous: these check that the alarm rings and never early, not how precisely
    /// (bench/fire_lateness.sh measures that).
    const BOUND: Duration = Duration::from_secs(2);

    /// This node's own wall clock, uncorrected.
    static OWN: std::sync::LazyLock<EnsembleClock> =
        std::sync::LazyLock::new(EnsembleClock::default);

    fn in_ms(ms: i64) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(ms)
    }

    #[tokio::test]
    async fn rings_at_its_instant_never_before() {
        let mut alarm = Alarm::new();
        assert!(alarm.precise.is_some(), "this machine has timerfd");
        for ms in [30, 1, 15] {
            let at = in_ms(ms);
            tokio::time::timeout(BOUND, alarm.at(&OWN, at))
                .await
                .expect("rings");
            assert!(Utc::now() >= at, "not before its instant");
        }
    }

    #[tokio::test]
    async fn a_past_instant_rings_at_once() {
        let mut alarm = Alarm::new();
        tokio::time::timeout(BOUND, alarm.at(&OWN, in_ms(-5000)))
            .await
            .expect("rings");
        let epoch = DateTime::<Utc>::UNIX_EPOCH;
        tokio::time::timeout(BOUND, alarm.at(&OWN, epoch))
            .await
            .expect("rings");
    }

    #[tokio::test]
    async fn a_wait_given_up_leaves_nothing_behind() {
        let mut alarm = Alarm::new();
        // An instant given up before it came, which then passes unread: its readiness is
        // stale and must not ring the next, far instant.
        let given_up = tokio::time::timeout(Duration::ZERO, alarm.at(&OWN, in_ms(50))).await;
        assert!(given_up.is_err());
        tokio::time::sleep(Duration::from_millis(60)).await;
        let far =
            tokio::time::timeout(Duration::from_millis(30), alarm.at(&OWN, in_ms(3_600_000))).await;
        assert!(far.is_err(), "an hour ahead does not ring now");
        let at = in_ms(20);
        tokio::time::timeout(BOUND, alarm.at(&OWN, at))
            .await
            .expect("the next instant rings");
        assert!(Utc::now() >= at, "not before its instant");
    }

    /// A node corrected to the servers' clock (here 15 s behind its own) waits for their
    /// instant, neither its own clock's reading of it nor 15 s off.
    #[tokio::test]
    async fn a_corrected_node_rings_at_the_servers_instant() {
        let clock = EnsembleClock::default();
        let servers_behind_ms = 15_000;
        clock.follow(Some(
            Utc::now().timestamp_millis()
                - servers_behind_ms
                - crate::ensemble_clock::monotonic_ms(),
        ));
        let mut alarm = Alarm::new();
        let at = clock.now() + chrono::Duration::milliseconds(30);
        tokio::time::timeout(BOUND, alarm.at(&clock, at))
            .await
            .expect("rings within the bound, not 15 s off");
        assert!(clock.now() >= at, "not before the servers' instant");
    }
}
