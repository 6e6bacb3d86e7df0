//! Wall-clock matching: the first wall time at or after a given one that a cron expression selects.
//!
//! Owns: the six value sets of a checked expression as bit masks, cronie's rule for combining the
//! two day fields, and the forward search over naive (zone-less) wall times up to [`LAST_YEAR`].
//! Must not: parse text (`fields` does), know about time zones or DST (`schedule` maps wall times
//! to instants), or allocate: a [`Matcher`] is a few dozen bytes, `Copy`, kept per job.
//!
//! This replaces croner's search, whose pattern kept a 5000-entry year table per job (issue 10,
//! "memory per job"). The answers are croner 4's `find_next_occurrence` on `NaiveDateTime` with
//! the same options, including its edges (tests check it against croner): sub-second input is
//! cut to its second, and the search ends at the year limit as croner's does.

use chrono::{Datelike, Months, NaiveDate, NaiveDateTime, TimeDelta, Timelike};

/// No match is looked for past this year: croner 4's `YEAR_UPPER_LIMIT`, kept as our own value
/// so that fire times stay what they were when croner searched. Matches *in* this year are found
/// only when no unit above the second has to be stepped to reach them, as in croner.
pub(super) const LAST_YEAR: i32 = 5000;

/// The first year searched (croner's `YEAR_LOWER_LIMIT`); earlier wall times start from it.
const FIRST_YEAR: i32 = 1;

/// The value sets of one expression, bit `n` set when value `n` is selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Matcher {
    /// Bits 0-59.
    seconds: u64,
    /// Bits 0-59.
    minutes: u64,
    /// Bits 0-23.
    hours: u32,
    /// Bits 1-31.
    days_of_month: u32,
    /// Bits 1-12.
    months: u16,
    /// Bits 0-6, Sunday = 0.
    days_of_week: u8,
    /// A day must match both day fields (one of them starts with `*`), not either.
    both_days: bool,
}

impl Matcher {
    /// `masks`: one per field in the order `sec min hour dom mon dow`, bit `n` for value `n` as
    /// `fields` reads them (so day of week 7 is Sunday too). `both_days`: cronie's DOM/DOW rule,
    /// true when the day of month or the day of week field starts with `*` (`schedule`'s module
    /// docs, "Syntax").
    pub(super) fn new(masks: [u64; 6], both_days: bool) -> Matcher {
        let [seconds, minutes, hours, days_of_month, months, days_of_week] = masks;
        // `fields` sets no bit outside a field's range, so the narrowing drops nothing.
        Matcher {
            seconds,
            minutes,
            hours: hours as u32,
            days_of_month: days_of_month as u32,
            months: months as u16,
            days_of_week: ((days_of_week | days_of_week >> 7) & 0x7f) as u8,
            both_days,
        }
    }

    /// The first wall time at or after (`inclusive`) or after `wall` that matches, at a whole
    /// second; `None` when there is none within [`LAST_YEAR`].
    ///
    /// As croner does, `wall` is first cut to its second: from 10:00:00.5, inclusive finds
    /// 10:00:00 when it matches, exclusive starts at 10:00:01.
    pub(super) fn next_match(&self, wall: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        let mut wall = wall.with_nanosecond(0)?;
        if !inclusive {
            wall = wall.checked_add_signed(TimeDelta::seconds(1))?;
        }
        let mut at = Cursor::at(wall);
        if at.date.year() < FIRST_YEAR {
            at = Cursor::midnight(NaiveDate::from_ymd_opt(FIRST_YEAR, 1, 1)?);
        }
        // Each pass returns, or moves `at` to the start of a later year, month, day, hour or
        // minute and checks again from the month down. A pass is a handful of bit scans, and the
        // search takes about one per month it looks at, never one per day or second.
        loop {
            if at.date.year() > LAST_YEAR {
                return None;
            }
            let Some(month) = next_bit(self.months.into(), at.date.month()) else {
                at = at.leave(Unit::Year)?;
                continue;
            };
            if month != at.date.month() {
                at = at.move_to(at.date.with_day(1)?.with_month(month)?)?;
            }
            let days = self.days_in(at.date.with_day(1)?);
            let Some(day) = next_bit(days.into(), at.date.day()) else {
                at = at.leave(Unit::Month)?;
                continue;
            };
            if day != at.date.day() {
                at = at.move_to(at.date.with_day(day)?)?;
            }
            let Some(hour) = next_bit(self.hours.into(), at.hour) else {
                at = at.leave(Unit::Day)?;
                continue;
            };
            if hour != at.hour {
                (at.hour, at.minute, at.second) = (hour, 0, 0);
            }
            let Some(minute) = next_bit(self.minutes, at.minute) else {
                at = at.leave(Unit::Hour)?;
                continue;
            };
            if minute != at.minute {
                (at.minute, at.second) = (minute, 0);
            }
            let Some(second) = next_bit(self.seconds, at.second) else {
                at = at.leave(Unit::Minute)?;
                continue;
            };
            at.second = second;
            return at.wall();
        }
    }

    /// The days of the month that starts on `first` that match, bit `d` set for day `d`.
    fn days_in(&self, first: NaiveDate) -> u32 {
        // Bit k of `turned` is the weekday of day k + 1, for the first seven days; copies of it
        // every 7 bits cover the month.
        let offset = first.weekday().num_days_from_sunday();
        let week = u64::from(self.days_of_week);
        let turned = ((week >> offset) | (week << (7 - offset))) & 0x7f;
        const EVERY_SEVENTH: u64 = 1 | 1 << 7 | 1 << 14 | 1 << 21 | 1 << 28;
        let by_weekday = ((turned * EVERY_SEVENTH) << 1) as u32; // bits 1-31 kept
        let days = if self.both_days {
            self.days_of_month & by_weekday
        } else {
            self.days_of_month | by_weekday
        };
        let length = u32::from(first.num_days_in_month());
        days & (u32::MAX >> (31 - length)) & !1 // days 1..=length
    }
}

/// The smallest set bit of `mask` at or above `from`.
fn next_bit(mask: u64, from: u32) -> Option<u32> {
    let above = mask.checked_shr(from)?;
    (above != 0).then(|| from + above.trailing_zeros())
}

/// A unit the search steps past when nothing in the rest of it matches.
#[derive(Clone, Copy)]
enum Unit {
    Minute,
    Hour,
    Day,
    Month,
    Year,
}

/// The search position: a wall time at whole seconds.
#[derive(Clone, Copy)]
struct Cursor {
    date: NaiveDate,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Cursor {
    fn at(wall: NaiveDateTime) -> Cursor {
        Cursor {
            date: wall.date(),
            hour: wall.hour(),
            minute: wall.minute(),
            second: wall.second(),
        }
    }

    fn midnight(date: NaiveDate) -> Cursor {
        Cursor {
            date,
            hour: 0,
            minute: 0,
            second: 0,
        }
    }

    fn wall(self) -> Option<NaiveDateTime> {
        self.date.and_hms_opt(self.hour, self.minute, self.second)
    }

    /// Midnight of a later `date` in the same month or year.
    fn move_to(self, date: NaiveDate) -> Option<Cursor> {
        self.may_step().then(|| Cursor::midnight(date))
    }

    /// The start of the unit after the one `self` is in.
    fn leave(self, unit: Unit) -> Option<Cursor> {
        if !self.may_step() {
            return None;
        }
        let next = |(hour, minute)| Cursor {
            hour,
            minute,
            second: 0,
            ..self
        };
        Some(match unit {
            Unit::Minute if self.minute < 59 => next((self.hour, self.minute + 1)),
            Unit::Minute | Unit::Hour if self.hour < 23 => next((self.hour + 1, 0)),
            Unit::Minute | Unit::Hour | Unit::Day => Cursor::midnight(self.date.succ_opt()?),
            Unit::Month => {
                Cursor::midnight(self.date.with_day(1)?.checked_add_months(Months::new(1))?)
            }
            Unit::Year => Cursor::midnight(NaiveDate::from_ymd_opt(self.date.year() + 1, 1, 1)?),
        })
    }

    /// Whether the search may go on past the current hour, minute or second, or to a later
    /// day: not in [`LAST_YEAR`], where croner ends the search at any such step; only a later
    /// hour, minute or second within the current one is looked at there.
    fn may_step(self) -> bool {
        self.date.year() < LAST_YEAR
    }
}

#[cfg(test)]
mod tests;
