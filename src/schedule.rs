//! Cron schedules: one job's cron expression in one IANA time zone, and its next fire instant.
//!
//! Owns: the cron syntax zkcron accepts, time zone names, next-fire computation and the DST
//! rules below. Callers pass the time in; every function here is pure.
//! Must not: do I/O, read a clock, spawn, or know about ZooKeeper, jobs or the scheduler loop
//! (DESIGN.md "Modules").
//!
//! # Syntax
//! Six fields `sec min hour dom mon dow` (the native form); five fields `min hour dom mon dow`
//! (seconds = 0); or one of the macros `@hourly @daily @midnight @weekly @monthly @yearly
//! @annually`. A field is a comma list of `*`, `N`, `N-M`, `*/S` or `N-M/S`. Months take
//! `JAN`-`DEC`, days of week `0`-`7` (0 and 7 are Sunday) or `SUN`-`SAT`, names in any case.
//! As in crontab(5), when the day of month *and* the day of week are restricted a day matches
//! if *either* matches; when one of them starts with `*` (cronie's `DOM_STAR`/`DOW_STAR`, so
//! `*/2` counts) a day must match both. Other crons' extensions (croner's and Quartz's `L`, `W`,
//! `#`, `?`, `+`, a year field) are refused: `?` in particular marks Quartz expressions, whose
//! weekdays count from 1.
//! The text is checked by `fields` (for messages that name the field) and read into the values
//! each field selects; `matcher` finds the wall-clock times that match them.
//!
//! # Daylight saving time
//! The rules operators know from cronie (`cron.c`, `find_jobs` and the "DST begins/ends" cases
//! of its main loop). cronie calls a job *wildcard* when its minute or hour field starts with `*`
//! (`MIN_STAR`/`HR_STAR`, set from the first character of the field; `@hourly` sets `HR_STAR`);
//! we extend that to the second field. Every other job is *fixed-time* — also lists and ranges
//! such as `0 0,30 2 * * *` or `0 0 1-5/2 * * *` ([`DstRule`]). In the job's zone:
//! - **Spring gap** (wall times that never happen): a fixed-time job whose wall time falls in
//!   the gap fires once, at the first instant after the gap. Several gap times and a regular
//!   time at that instant are the same instant, so one fire (cronie runs each missed fixed-time
//!   minute at the end of the gap). A wildcard job has no fire in the gap: it fires at the
//!   matching wall times that exist, so `0 */15 * * * *` keeps its 15 minutes of elapsed time.
//! - **Autumn repeat** (wall times that happen twice): a fixed-time job fires once, on the
//!   first pass; a wildcard job fires on both passes (cronie runs only wildcard jobs while its
//!   clock is behind).
//! - Hour steps: `*/2` starts with `*`, so cronie treats it as wildcard: it fires at each
//!   existing instant whose wall hour matches. In Europe/Berlin that drops 02:00 on the spring
//!   day (00:00 CET, then 04:00 CEST, three hours apart) and fires 02:00 twice in autumn (CEST
//!   and CET, one hour apart). A range step such as `1-23/2` does not start with `*`: fixed-time.
//!
//! croner 4, which found the wall-clock matches until issue 10, has DST rules of its own (OCPS:
//! fixed-time jobs are carried past a gap and run once in a repeat), but decides "fixed-time" by
//! *values* (a single second, minute and hour), so it would skip `0 0,30 2 * * *` in the gap and
//! run it twice in the repeat. So the mapping from wall time to instant below was always ours;
//! `matcher` now finds the wall-clock matches too, in a few dozen bytes per job where croner's
//! pattern kept a 5000-entry year table. The tests hold `matcher` against croner's search.

mod error;
pub mod explain;
mod fields;
mod matcher;
pub mod words;

use std::fmt;

use chrono::{DateTime, Datelike, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

pub use error::ScheduleError;
use matcher::{LAST_YEAR, Matcher};

/// One job's cron expression in one IANA time zone.
#[derive(Clone)]
pub struct Schedule {
    expression: String,
    tz: Tz,
    matcher: Matcher,
    dst: DstRule,
}

/// How a schedule behaves when its zone's clock jumps (module docs, "Daylight saving time").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstRule {
    /// The second, minute and hour fields do not start with `*`: a wall time in a spring gap
    /// fires at the end of the gap, a repeated wall time fires on its first pass only.
    FixedTime,
    /// The second, minute or hour field starts with `*`: fires at every existing instant whose
    /// wall time matches, so nothing in a gap and both passes of a repeat.
    Wildcard,
}

/// How far after `tick` a job with `jitter` starts it: in `[0, jitter)`, a function of the job's
/// name and the tick alone, so every node (and every version) picks the same instant, and a
/// takeover never moves a start. CRC-32 of the name and the tick's milliseconds, scaled.
pub fn jitter_offset(job: &str, tick: DateTime<Utc>, jitter: std::time::Duration) -> TimeDelta {
    let jitter_ms = u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX);
    if jitter_ms == 0 {
        return TimeDelta::zero();
    }
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(job.as_bytes());
    hasher.update(&tick.timestamp_millis().to_le_bytes());
    let spread = u64::from(hasher.finalize());
    // (spread / 2^32) × jitter: below jitter, whatever the hash.
    let offset = (u128::from(spread) * u128::from(jitter_ms)) >> 32;
    TimeDelta::milliseconds(i64::try_from(offset).unwrap_or(i64::MAX))
}

/// Parses an IANA time zone name such as `Europe/Berlin` or `UTC` (case-sensitive, as in tzdata).
///
/// # Errors
/// [`ScheduleError::UnknownTimeZone`], with the closest known name when one is spelt almost the
/// same.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>()
        .map_err(|_| ScheduleError::UnknownTimeZone {
            name: name.to_owned(),
            suggestion: closest_zone(name),
        })
}

/// A zone whose name differs from `name` only in case and surrounding blanks, or by at most two
/// edits (one when the name is short) with no other zone as close.
fn closest_zone(name: &str) -> Option<&'static str> {
    let wanted = name.trim().to_ascii_lowercase();
    let zones = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
    if let Some(zone) = zones
        .clone()
        .find(|zone| zone.eq_ignore_ascii_case(&wanted))
    {
        return Some(zone);
    }
    let limit = if wanted.len() <= 4 { 1 } else { 2 };
    let wanted_chars = wanted.chars().count();
    let mut best: Option<(usize, &'static str)> = None;
    let mut tied = false;
    for zone in zones {
        // Their distance is at least the difference in length: too far to suggest or to tie.
        if zone.len().abs_diff(wanted_chars) > limit {
            continue;
        }
        let distance = edit_distance(&wanted, &zone.to_ascii_lowercase());
        match best {
            Some((d, _)) if distance > d => {}
            Some((d, _)) if distance == d => tied = true,
            _ if distance <= limit => {
                best = Some((distance, zone));
                tied = false;
            }
            _ => {}
        }
    }
    best.filter(|_| !tied).map(|(_, zone)| zone)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// The longest run of skipped or repeated wall time we look for: DST shifts are at most two
/// hours, but Pacific/Apia skipped a whole day in 2011.
const LONGEST_SHIFT_SECONDS: i64 = 2 * 86_400;

impl Schedule {
    /// Parses a cron expression (module docs, "Syntax") for evaluation in `tz`.
    ///
    /// # Errors
    /// A [`ScheduleError`] naming the field at fault, e.g. `hour: 25 is out of range 0-23`.
    pub fn parse(expr: &str, tz: Tz) -> Result<Schedule, ScheduleError> {
        let fields = fields::parse(expr)?;
        Ok(Schedule {
            expression: expr.to_owned(),
            tz,
            matcher: Matcher::new(fields.masks, fields.starred_day),
            dst: if fields.starred_time {
                DstRule::Wildcard
            } else {
                DstRule::FixedTime
            },
        })
    }

    /// The first fire instant strictly after `after`, or `None` when there is none before the
    /// year 5000.
    ///
    /// The fire instants form one fixed set (module docs), so the answer is monotone in `after`
    /// and asking again with the answer gives the next one.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if after.year() >= LAST_YEAR {
            return None;
        }
        // The search starts no earlier than year 1 (as croner's did).
        let floor = Utc.with_ymd_and_hms(1, 1, 2, 0, 0, 0).single()?;
        let after = after.max(floor);
        let wall_after = after.with_timezone(&self.tz).naive_local();
        let first_pass = self.first_fire_after_wall(after, wall_after);
        let second_pass = match self.dst {
            DstRule::Wildcard => self.second_pass_ahead(after, wall_after),
            DstRule::FixedTime => None,
        };
        match (first_pass, second_pass) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Convenience: the next `n` fire times after `after`, for `zkcron check`.
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut fires = Vec::new();
        let mut at = after;
        while fires.len() < n {
            let Some(next) = self.next_after(at) else {
                break;
            };
            fires.push(next);
            at = next;
        }
        fires
    }

    /// The zone the expression is evaluated in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// How this schedule behaves at DST transitions.
    pub fn dst_rule(&self) -> DstRule {
        self.dst
    }

    /// Walks matching wall times after the wall time of `after` and maps each to its instants;
    /// the first instant later than `after` is the answer, except for the second pass of a
    /// repeat that `after` is just before ([`Schedule::second_pass_ahead`]).
    fn first_fire_after_wall(
        &self,
        after: DateTime<Utc>,
        wall_after: NaiveDateTime,
    ) -> Option<DateTime<Utc>> {
        let mut wall = wall_after;
        loop {
            // None: no match before the year limit.
            let matched = self.matcher.next_match(wall, false)?;
            wall = matched;
            match (self.tz.from_local_datetime(&matched), self.dst) {
                (LocalResult::Single(at), _) => {
                    let at = at.to_utc();
                    if at > after {
                        return Some(at);
                    }
                }
                (LocalResult::Ambiguous(first, second), rule) => {
                    let (first, second) = (first.to_utc(), second.to_utc());
                    if first > after {
                        return Some(first);
                    }
                    match rule {
                        // Both passes fire; `after` is on the second one.
                        DstRule::Wildcard if second > after => return Some(second),
                        DstRule::Wildcard => {}
                        // Never on the second pass; skip the rest of this repeat at once.
                        DstRule::FixedTime => {
                            wall = self
                                .run_end(matched, Run::Repeated)?
                                .checked_sub_signed(TimeDelta::seconds(1))?;
                        }
                    }
                }
                (LocalResult::None, rule) => {
                    let gap_end = self.run_end(matched, Run::Skipped)?;
                    match rule {
                        // The first instant after the gap (cronie's "DST begins" catch-up).
                        DstRule::FixedTime => {
                            let at = self.tz.from_local_datetime(&gap_end).earliest()?.to_utc();
                            if at > after {
                                return Some(at);
                            }
                        }
                        // Nothing in the gap: resume the search where wall time exists again.
                        DstRule::Wildcard => {
                            wall = gap_end.checked_sub_signed(TimeDelta::seconds(1))?;
                        }
                    }
                }
            }
        }
    }

    /// When `after` is on the first pass of a repeated range of wall times, the second pass lies
    /// ahead although its wall times are not later: its first match, if any.
    fn second_pass_ahead(
        &self,
        after: DateTime<Utc>,
        wall_after: NaiveDateTime,
    ) -> Option<DateTime<Utc>> {
        let wall = wall_after.with_nanosecond(0)?;
        let LocalResult::Ambiguous(_, second) = self.tz.from_local_datetime(&wall) else {
            return None;
        };
        if after >= second.to_utc() {
            return None; // already on the second pass: the forward walk covers it
        }
        let start = self.run_start(wall, Run::Repeated)?;
        let matched = self.matcher.next_match(start, true)?;
        match self.tz.from_local_datetime(&matched) {
            LocalResult::Ambiguous(_, second) => Some(second.to_utc()),
            _ => None, // past the repeat: the forward walk finds it, earlier
        }
    }

    /// The first wall time after `inside` (which is in a run of the kind) that is not.
    fn run_end(&self, inside: NaiveDateTime, run: Run) -> Option<NaiveDateTime> {
        self.run_edge(inside, 1, run)
    }

    /// The first wall time of the run of the kind that `inside` is in.
    fn run_start(&self, inside: NaiveDateTime, run: Run) -> Option<NaiveDateTime> {
        self.run_edge(inside, -1, run)?
            .checked_add_signed(TimeDelta::seconds(1))
    }

    /// The nearest wall time in `direction` (±1) from `inside` that is outside its run: doubling
    /// steps to get past the run, then bisection to the second. About 20 zone lookups, paid
    /// only on transition days.
    fn run_edge(&self, inside: NaiveDateTime, direction: i64, run: Run) -> Option<NaiveDateTime> {
        let is_in = |wall: NaiveDateTime| {
            matches!(
                (self.tz.from_local_datetime(&wall), run),
                (LocalResult::None, Run::Skipped) | (LocalResult::Ambiguous(..), Run::Repeated)
            )
        };
        let (mut inner, mut step) = (inside, 60);
        let mut outer = loop {
            let probe = inner.checked_add_signed(TimeDelta::seconds(direction * step))?;
            if !is_in(probe) {
                break probe;
            }
            inner = probe;
            step *= 2;
            if step > LONGEST_SHIFT_SECONDS {
                return None;
            }
        };
        loop {
            let apart = (outer - inner).num_seconds();
            if apart.abs() <= 1 {
                return Some(outer);
            }
            let middle = inner.checked_add_signed(TimeDelta::seconds(apart / 2))?;
            if is_in(middle) {
                inner = middle;
            } else {
                outer = middle;
            }
        }
    }
}

/// A run of wall times that a zone skips (spring) or repeats (autumn).
#[derive(Clone, Copy)]
enum Run {
    Skipped,
    Repeated,
}

impl fmt::Debug for Schedule {
    // The expression says what the masks say, readably; they would only lengthen log lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("expression", &self.expression)
            .field("timezone", &self.tz)
            .field("dst", &self.dst)
            .finish()
    }
}

impl fmt::Display for Schedule {
    /// `0 30 2 * * * (Europe/Berlin)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.expression, self.tz.name())
    }
}

#[cfg(test)]
mod tests;
