//! What a schedule does around daylight-saving transitions, for `zkcron check --explain`
//! (issue 20): its next fires, each zone transition between them, and what the DST rules of the
//! module docs make of the wall times the transition skips or repeats.
//!
//! Owns: finding the transitions between fires and naming, for each, the matching wall times it
//! skips or repeats, and which fires were moved out of a gap or fall in a repeat.
//! Must not: format for people (the CLI does), or decide anything [`Schedule::next_after`] does
//! not: every fire listed is one `next_after` gives.

use chrono::{DateTime, FixedOffset, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};

use super::{DstRule, Schedule};

/// The most matching wall times a transition lists; the rest are counted.
pub const LISTED_PER_TRANSITION: usize = 12;
/// How finely the time between two fires is searched for a transition: no zone has had two
/// within a day.
const PROBE: TimeDelta = TimeDelta::hours(12);

/// One line of an explanation, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Explained {
    Fire(ExplainedFire),
    Transition(Transition),
}

/// A fire, and what DST did to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainedFire {
    pub at: DateTime<Utc>,
    /// Its wall time, with the zone's offset then.
    pub local: DateTime<FixedOffset>,
    pub note: Option<FireNote>,
}

/// Why a fire is not simply "the wall time the expression names".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireNote {
    /// A fixed time that fell in a spring gap (`wanted`, the first such): fired at the gap's end.
    MovedOutOfGap { wanted: NaiveDateTime },
    /// A wall time that happens twice: this is its first pass.
    FirstPass,
    /// A wall time that happens twice: this is its second pass (wildcard jobs only).
    SecondPass,
}

/// A change of the zone's offset between two fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The instant of the change.
    pub at: DateTime<Utc>,
    pub from: FixedOffset,
    pub to: FixedOffset,
    /// The wall times skipped (spring: `to` ahead of `from`) or repeated (autumn): from
    /// `start`, up to but not including `end`.
    pub start: NaiveDateTime,
    pub end: NaiveDateTime,
    /// The schedule's matching wall times in that range (at most [`LISTED_PER_TRANSITION`]).
    pub matches: Vec<NaiveDateTime>,
    /// How many there are in all.
    pub match_count: usize,
    /// What the schedule does with them.
    pub rule: DstRule,
}

impl Transition {
    /// True for a spring gap (wall times skipped); false for an autumn repeat.
    pub fn is_gap(&self) -> bool {
        self.to.local_minus_utc() > self.from.local_minus_utc()
    }
}

impl Schedule {
    /// The next `count` fires after `after`, with every offset change of the zone between
    /// `after` and the last of them.
    pub fn explain(&self, after: DateTime<Utc>, count: usize) -> Vec<Explained> {
        let fires = self.upcoming(after, count);
        let mut lines = Vec::new();
        let mut from = after;
        for at in fires {
            lines.extend(
                self.transitions(from, at)
                    .into_iter()
                    .map(Explained::Transition),
            );
            lines.push(Explained::Fire(self.explain_fire(at)));
            from = at;
        }
        lines
    }

    fn explain_fire(&self, at: DateTime<Utc>) -> ExplainedFire {
        let local = at.with_timezone(&self.tz).fixed_offset();
        let wall = local.naive_local();
        let note = match self.tz.from_local_datetime(&wall) {
            LocalResult::Ambiguous(first, _) if first.to_utc() == at => Some(FireNote::FirstPass),
            LocalResult::Ambiguous(..) => Some(FireNote::SecondPass),
            _ if self.matcher.next_match(wall, true) != Some(wall) => {
                // Not a match of its own: the end of a gap a fixed time fell into.
                wall.checked_sub_signed(TimeDelta::seconds(1))
                    .and_then(|last| self.run_start(last, super::Run::Skipped))
                    .and_then(|start| self.matcher.next_match(start, true))
                    .map(|wanted| FireNote::MovedOutOfGap { wanted })
            }
            _ => None,
        };
        ExplainedFire { at, local, note }
    }

    /// The offset changes in `(from, to]`, each with the matching wall times it skips or
    /// repeats.
    fn transitions(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Transition> {
        let offset = |at: DateTime<Utc>| self.tz.offset_from_utc_datetime(&at.naive_utc()).fix();
        let mut found = Vec::new();
        let mut probe = from;
        while probe < to {
            let next = (probe + PROBE).min(to);
            if offset(probe) != offset(next) {
                // Bisect over whole seconds (zones change on one): the offset is `offset(low)`
                // up to `high`.
                let second = |s: i64| DateTime::<Utc>::from_timestamp(s, 0);
                let (mut low, mut high) = (probe.timestamp(), next.timestamp() + 1);
                while high - low > 1 {
                    let middle = low + (high - low) / 2;
                    if second(middle).map(offset) == Some(offset(probe)) {
                        low = middle;
                    } else {
                        high = middle;
                    }
                }
                if let Some(at) = second(high) {
                    found.push(self.transition(at, offset(probe), offset(at)));
                }
            }
            probe = next;
        }
        found
    }

    fn transition(&self, at: DateTime<Utc>, from: FixedOffset, to: FixedOffset) -> Transition {
        let before = at.with_timezone(&from).naive_local();
        let after = at.with_timezone(&to).naive_local();
        // A gap skips [before, after); a repeat replays [after, before).
        let (start, end) = if after > before {
            (before, after)
        } else {
            (after, before)
        };
        let mut matches = Vec::new();
        let mut match_count = 0;
        let mut wall = self.matcher.next_match(start, true);
        while let Some(matched) = wall.filter(|w| *w < end) {
            match_count += 1;
            if matches.len() < LISTED_PER_TRANSITION {
                matches.push(matched);
            }
            wall = self.matcher.next_match(matched, false);
        }
        Transition {
            at,
            from,
            to,
            start,
            end,
            matches,
            match_count,
            rule: self.dst,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;
    use crate::schedule::parse_timezone;

    fn schedule(expr: &str, zone: &str) -> Schedule {
        Schedule::parse(expr, parse_timezone(zone).expect("zone")).expect("expression")
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("RFC 3339")
            .to_utc()
    }

    fn wall(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").expect("wall time")
    }

    fn fires(lines: &[Explained]) -> Vec<(String, Option<FireNote>)> {
        lines
            .iter()
            .filter_map(|line| match line {
                Explained::Fire(fire) => Some((fire.local.to_rfc3339(), fire.note)),
                Explained::Transition(_) => None,
            })
            .collect()
    }

    fn transitions(lines: &[Explained]) -> Vec<&Transition> {
        lines
            .iter()
            .filter_map(|line| match line {
                Explained::Transition(t) => Some(t),
                Explained::Fire(_) => None,
            })
            .collect()
    }

    /// Europe/Berlin, 2027-03-28: 02:00 CET becomes 03:00 CEST. A fixed 02:30 does not exist; it
    /// fires once at 03:00 (cronie), where Quartz documents the fire as skipped.
    #[test]
    fn a_fixed_time_in_the_spring_gap_is_moved_to_its_end() {
        let lines =
            schedule("0 30 2 * * *", "Europe/Berlin").explain(utc("2027-03-26T12:00:00Z"), 3);
        assert_eq!(
            fires(&lines),
            [
                ("2027-03-27T02:30:00+01:00".to_owned(), None),
                (
                    "2027-03-28T03:00:00+02:00".to_owned(),
                    Some(FireNote::MovedOutOfGap {
                        wanted: wall("2027-03-28 02:30:00")
                    })
                ),
                ("2027-03-29T02:30:00+02:00".to_owned(), None),
            ]
        );
        let gap = transitions(&lines);
        assert_eq!(gap.len(), 1);
        assert!(gap[0].is_gap());
        assert_eq!(gap[0].at, utc("2027-03-28T01:00:00Z"));
        assert_eq!(
            (gap[0].start, gap[0].end, gap[0].matches.clone()),
            (
                wall("2027-03-28 02:00:00"),
                wall("2027-03-28 03:00:00"),
                vec![wall("2027-03-28 02:30:00")]
            )
        );
    }

    /// Where Kubernetes CronJob ran twice (kubernetes/kubernetes#121594: `0 2 * * *` in
    /// Europe/Berlin on 2023-10-29, when 03:00 CEST became 02:00 CET): a fixed 02:00 fires once,
    /// on the first pass, as Debian's cron does.
    #[test]
    fn a_fixed_time_in_the_autumn_repeat_fires_once() {
        let lines = schedule("0 2 * * *", "Europe/Berlin").explain(utc("2023-10-28T12:00:00Z"), 2);
        assert_eq!(
            fires(&lines),
            [
                (
                    "2023-10-29T02:00:00+02:00".to_owned(),
                    Some(FireNote::FirstPass)
                ),
                ("2023-10-30T02:00:00+01:00".to_owned(), None),
            ]
        );
        let repeat = transitions(&lines);
        assert_eq!(repeat.len(), 1);
        assert!(!repeat[0].is_gap());
        assert_eq!(repeat[0].at, utc("2023-10-29T01:00:00Z"));
        assert_eq!(repeat[0].matches, [wall("2023-10-29 02:00:00")]);
        assert_eq!(repeat[0].rule, DstRule::FixedTime);
    }

    /// A wildcard job follows elapsed time: nothing in the gap, both passes of the repeat.
    #[test]
    fn a_wildcard_job_skips_the_gap_and_fires_both_passes() {
        let spring =
            schedule("0 */30 * * * *", "Europe/Berlin").explain(utc("2027-03-28T00:15:00Z"), 3);
        assert_eq!(
            fires(&spring),
            [
                ("2027-03-28T01:30:00+01:00".to_owned(), None),
                ("2027-03-28T03:00:00+02:00".to_owned(), None),
                ("2027-03-28T03:30:00+02:00".to_owned(), None),
            ],
            "02:00 and 02:30 do not exist"
        );
        let gap = transitions(&spring);
        assert_eq!((gap[0].match_count, gap[0].rule), (2, DstRule::Wildcard));
        let autumn =
            schedule("0 */30 * * * *", "Europe/Berlin").explain(utc("2027-10-30T23:45:00Z"), 4);
        assert_eq!(
            fires(&autumn),
            [
                (
                    "2027-10-31T02:00:00+02:00".to_owned(),
                    Some(FireNote::FirstPass)
                ),
                (
                    "2027-10-31T02:30:00+02:00".to_owned(),
                    Some(FireNote::FirstPass)
                ),
                (
                    "2027-10-31T02:00:00+01:00".to_owned(),
                    Some(FireNote::SecondPass)
                ),
                (
                    "2027-10-31T02:30:00+01:00".to_owned(),
                    Some(FireNote::SecondPass)
                ),
            ]
        );
    }

    /// A yearly job spans both transitions of a year between two fires: each is found.
    #[test]
    fn every_transition_between_distant_fires_is_found() {
        let lines =
            schedule("0 0 12 1 1 *", "Europe/Berlin").explain(utc("2027-01-02T00:00:00Z"), 1);
        let found = transitions(&lines);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].is_gap() && !found[1].is_gap());
        assert!(
            found.iter().all(|t| t.match_count == 0),
            "noon is never skipped"
        );
        let date = NaiveDate::from_ymd_opt(2027, 3, 28).expect("date");
        assert_eq!(found[0].start.date(), date);
    }

    /// A zone without DST: fires and nothing else.
    #[test]
    fn utc_has_no_transitions() {
        let lines = schedule("0 30 2 * * *", "UTC").explain(utc("2027-03-26T00:00:00Z"), 5);
        assert_eq!(lines.len(), 5);
        assert!(transitions(&lines).is_empty());
    }
}
