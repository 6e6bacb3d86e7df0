//! This node's clock against the ZooKeeper servers' and the other members': the offset measured
//! on a write of our member node (the server stamps it with the leader's clock), and whether the
//! node is too far off the fleet to own the lock (issue 24: a clock behind fires ticks again,
//! one ahead fires them early).
//!
//! Owns: what one sample says (the servers' time against our monotonic clock, good to half
//! the round trip), the estimate over recent samples, our wall clock's offset from it, and the
//! verdict against the members.
//! Must not: read a clock or do I/O (the lock driver measures and feeds the samples in).

use std::collections::VecDeque;

use serde::Serialize;

/// One write of our member node: this process's monotonic clock (ms from an origin of its own)
/// when the request left and when its answer came, and the server's stamp on it (`mtime`, Unix
/// ms). Monotonic, so that a step of our wall clock — during a sample or between two — moves
/// neither the round trip nor the servers' time that the samples carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub sent_monotonic_ms: i64,
    pub received_monotonic_ms: i64,
    pub server_unix_ms: i64,
}

impl ClockSample {
    /// The servers' clock minus our monotonic one: added to a monotonic reading, the servers'
    /// time then (the server stamped the write at the middle of the round trip, as near as we
    /// can tell).
    pub fn servers_minus_monotonic_ms(&self) -> i64 {
        self.server_unix_ms - (self.sent_monotonic_ms + self.round_trip_ms() / 2)
    }

    /// The least the servers' clock can be ahead of our monotonic one: the write was stamped
    /// before its answer came (and `mtime` is truncated to the ms, which only makes it earlier).
    /// What a node schedules by when it follows the servers' time: a tick comes at or after
    /// its instant on their clock, never before, late by at most the round trip.
    pub fn servers_at_least_minus_monotonic_ms(&self) -> i64 {
        self.server_unix_ms - self.received_monotonic_ms.max(self.sent_monotonic_ms)
    }

    /// How long the write took: twice the sample's uncertainty.
    pub fn round_trip_ms(&self) -> i64 {
        (self.received_monotonic_ms - self.sent_monotonic_ms).max(0)
    }
}

/// Our wall clock and our monotonic clock, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    pub unix_ms: i64,
    pub monotonic_ms: i64,
}

/// Samples an estimate is taken from: the one with the shortest round trip wins, so one slow
/// answer does not move the estimate.
const SAMPLES: usize = 3;

/// The offset estimate from the last few samples.
#[derive(Debug, Clone, Default)]
pub struct ClockEstimate {
    samples: VecDeque<ClockSample>,
}

impl ClockEstimate {
    /// Takes `sample` in, unless its round trip is longer than `max_round_trip_ms`: an answer
    /// that slow (a stalled ensemble, a GC pause) says nothing about the clock, and would
    /// otherwise make a healthy node look off by half the stall.
    pub fn add(&mut self, sample: ClockSample, max_round_trip_ms: i64) {
        if sample.round_trip_ms() > max_round_trip_ms {
            return;
        }
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The servers' clock minus our monotonic one, from the most precise recent sample; `None`
    /// before one.
    pub fn servers_minus_monotonic_ms(&self) -> Option<i64> {
        self.samples
            .iter()
            .min_by_key(|sample| sample.round_trip_ms())
            .map(ClockSample::servers_minus_monotonic_ms)
    }

    /// [`ClockSample::servers_at_least_minus_monotonic_ms`] of the same most precise sample:
    /// the servers' time to schedule by, never ahead of theirs.
    pub fn servers_at_least_minus_monotonic_ms(&self) -> Option<i64> {
        self.samples
            .iter()
            .min_by_key(|sample| sample.round_trip_ms())
            .map(ClockSample::servers_at_least_minus_monotonic_ms)
    }

    /// Our wall clock minus the servers' as `now` reads them: positive when ours is ahead.
    /// `None` before a sample.
    pub fn offset_ms(&self, now: ClockReading) -> Option<i64> {
        let servers = self.servers_minus_monotonic_ms()? + now.monotonic_ms;
        Some(now.unix_ms - servers)
    }
}

/// What the offsets say about this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClockVerdict {
    /// Our clock minus the servers'.
    pub offset_ms: i64,
    /// Our clock minus the fleet's: the median of every member's offset and the servers' own
    /// (zero), so that neither one skewed member nor one skewed server moves it.
    pub off_fleet_ms: i64,
    /// Off the fleet by more than the limit, with other members to take over: this node must not
    /// own the lock. Alone, a node keeps firing, by the servers' clock (`correction_ms`): no one
    /// else could fire instead.
    pub skewed: bool,
    /// What this node's clock is corrected by to schedule by the servers' time: its offset to
    /// them when that is more than the limit and no other member publishes one, else 0
    /// (`ensemble_clock`). With members, the fleet's median is the reference (one skewed server
    /// must not move a fleet that agrees), and a node off it stands aside instead.
    pub correction_ms: i64,
}

/// Judges our offset `mine` against the other members' published offsets and the servers'.
pub fn judge(mine: i64, others: &[i64], max_offset_ms: i64) -> ClockVerdict {
    let mut votes: Vec<i64> = others.iter().copied().chain([mine, 0]).collect();
    votes.sort_unstable();
    let middle = votes.len() / 2;
    let fleet = if votes.len() % 2 == 0 {
        votes[middle - 1] + (votes[middle] - votes[middle - 1]) / 2
    } else {
        votes[middle]
    };
    let off_fleet_ms = mine - fleet;
    ClockVerdict {
        offset_ms: mine,
        off_fleet_ms,
        skewed: !others.is_empty() && off_fleet_ms.abs() > max_offset_ms,
        correction_ms: if others.is_empty() && mine.abs() > max_offset_ms {
            mine
        } else {
            0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample whose write left at monotonic `sent`, was stamped `server` and answered at
    /// monotonic `received`.
    fn sample(sent: i64, server: i64, received: i64) -> ClockSample {
        ClockSample {
            sent_monotonic_ms: sent,
            received_monotonic_ms: received,
            server_unix_ms: server,
        }
    }

    /// Our clocks when the wall clock reads the monotonic one plus `wall_ahead_ms`.
    fn reading(monotonic_ms: i64, wall_ahead_ms: i64) -> ClockReading {
        ClockReading {
            unix_ms: monotonic_ms + wall_ahead_ms,
            monotonic_ms,
        }
    }

    #[test]
    fn a_sample_compares_the_middle_of_the_round_trip_with_the_servers_stamp() {
        assert_eq!(sample(1_000, 1_005, 1_010).servers_minus_monotonic_ms(), 0);
        // The servers' clock 15 s after our monotonic one.
        assert_eq!(
            sample(1_000, 16_002, 1_004).servers_minus_monotonic_ms(),
            15_000
        );
        // The monotonic clock never goes back; an answer before its request is read as none.
        assert_eq!(sample(1_000, 1_000, 990).round_trip_ms(), 0);
    }

    /// CI once saw a node 15 s ahead start a tick 3 ms before its instant by the true clock:
    /// the middle of a round trip is only the likeliest moment of the stamp. Scheduled by, the
    /// servers' time is the least the sample allows.
    #[test]
    fn the_servers_time_scheduled_by_is_never_ahead_of_theirs() {
        // Stamped 1 005, answered at 1 010: the servers' clock is at least 5 behind ours then.
        assert_eq!(
            sample(1_000, 1_005, 1_010).servers_at_least_minus_monotonic_ms(),
            -5
        );
        assert_eq!(sample(1_000, 1_005, 1_010).servers_minus_monotonic_ms(), 0);
        let mut estimate = ClockEstimate::default();
        estimate.add(sample(0, 15_003, 6), 1_000);
        estimate.add(sample(100, 15_100, 104), 1_000);
        // The most precise sample's bound (round trip 4), not the loosest or the tightest.
        assert_eq!(estimate.servers_at_least_minus_monotonic_ms(), Some(14_996));
        assert_eq!(estimate.servers_minus_monotonic_ms(), Some(14_998));
    }

    #[test]
    fn the_estimate_takes_the_most_precise_of_the_last_samples() {
        let mut estimate = ClockEstimate::default();
        let add = |estimate: &mut ClockEstimate, s| estimate.add(s, 1_000);
        let now = reading(3_000, 0);
        assert_eq!(estimate.offset_ms(now), None);
        add(&mut estimate, sample(0, 0, 2)); // -1, round trip 2
        add(&mut estimate, sample(100, 0, 400)); // -250, round trip 300: a slow answer
        assert_eq!(estimate.offset_ms(now), Some(1));
        add(&mut estimate, sample(1_000, 995, 1_010)); // -10
        add(&mut estimate, sample(2_000, 1_000, 2_010)); // -1005: the first sample has left
        assert_eq!(estimate.offset_ms(now), Some(10));
        // An answer held up by a stalled ensemble (8 s): left out, whatever it would say.
        let mut fresh = ClockEstimate::default();
        add(&mut fresh, sample(10_000, 18_000, 18_000));
        assert_eq!(fresh.offset_ms(now), None, "no estimate from a stall");
    }

    /// Issue 53: our wall clock steps back 15 s between two checks, the servers' does not. The
    /// offset follows the step at once — the samples taken before it still say what the
    /// servers' time is — and the servers' time carried on the monotonic clock does not move.
    #[test]
    fn a_step_of_our_wall_clock_moves_the_offset_at_once_and_not_the_servers_time() {
        let mut estimate = ClockEstimate::default();
        // Our wall clock 15 s ahead of the servers', which are the monotonic clock plus 500.
        estimate.add(sample(0, 502, 4), 1_000);
        let before = estimate.servers_minus_monotonic_ms();
        assert_eq!(estimate.offset_ms(reading(5_000, 15_500)), Some(15_000));
        // Stepped back by NTP: the next reading of our wall clock is 15 s lower.
        assert_eq!(estimate.offset_ms(reading(6_000, 500)), Some(0));
        // A later sample, slower than the first, does not displace it; the estimate holds.
        estimate.add(sample(7_000, 7_510, 7_020), 1_000);
        assert_eq!(estimate.servers_minus_monotonic_ms(), before);
    }

    #[test]
    fn a_node_off_the_fleet_is_skewed_but_not_a_fleet_off_its_server() {
        let max = 1_000;
        // Two members, one 15 s behind: it is the one off, not the healthy one.
        assert!(judge(-15_000, &[0], max).skewed);
        assert!(!judge(0, &[-15_000], max).skewed);
        // The whole fleet 20 s off one skewed server: the members agree, no one yields.
        for n in 1..5 {
            let others = vec![20_000; n];
            let verdict = judge(20_000, &others, max);
            assert!(!verdict.skewed, "{n} others: {verdict:?}");
        }
        // Within the limit, or alone: never skewed; alone, the offset is still reported.
        assert!(!judge(900, &[0, 0], max).skewed);
        let alone = judge(-15_000, &[], max);
        assert_eq!((alone.skewed, alone.offset_ms), (false, -15_000));
        assert_eq!(judge(-15_000, &[0, 10, -10], max).off_fleet_ms, -15_000);
    }

    #[test]
    fn a_node_alone_and_off_the_servers_fires_by_their_clock_and_no_other_does() {
        let max = 1_000;
        // Alone, 15 s ahead or ten minutes behind: corrected by its offset.
        assert_eq!(judge(15_000, &[], max).correction_ms, 15_000);
        assert_eq!(judge(-600_000, &[], max).correction_ms, -600_000);
        // Alone within the limit: its own clock.
        assert_eq!(judge(900, &[], max).correction_ms, 0);
        // With members: never corrected. Off them, it stands aside; agreeing with them against
        // one skewed server, it keeps the fleet's time.
        let off = judge(-15_000, &[0], max);
        assert_eq!((off.skewed, off.correction_ms), (true, 0));
        let fleet = judge(20_000, &[20_000, 20_000], max);
        assert_eq!((fleet.skewed, fleet.correction_ms), (false, 0));
    }
}
