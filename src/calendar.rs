//! Calendars (`[[calendar]]`, issue 36): which instants a calendar covers — listed days, the
//! days and spans of an iCalendar file, daily hours, weekdays — in the calendar's own zone.
//!
//! Owns: what "covers" means, reading `hours`, `weekdays` and an iCalendar text into it, and a
//! job's rule over its calendars (`except`, `only`).
//! Must not: read files, read a clock, or decide about firing (the fire machine records a
//! tick a calendar skips; config reads the file).

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeZone, Utc, Weekday};
use chrono_tz::Tz;

/// One `[[calendar]]`. It covers an instant when every part it has covers it: its days (the
/// listed dates, and the days and spans of its iCalendar file), its daily `hours`, its
/// `weekdays`. A part it does not have covers everything; it has at least one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    pub name: String,
    pub timezone: Tz,
    /// `None`: no day part.
    pub days: Option<Days>,
    /// Daily windows, `[from, to)` in the calendar's zone; one that ends at or before its start
    /// runs past midnight. Empty: no hours part.
    pub hours: Vec<(NaiveTime, NaiveTime)>,
    /// `None`: every day of the week.
    pub weekdays: Option<Vec<Weekday>>,
}

/// The day part of a calendar: whole days, and spans of time (an iCalendar event with times).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Days {
    pub dates: BTreeSet<NaiveDate>,
    /// `[from, to)`.
    pub spans: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Calendar {
    /// Whether the calendar covers `at`.
    pub fn covers(&self, at: DateTime<Utc>) -> bool {
        let local = at.with_timezone(&self.timezone);
        let days = self.days.as_ref().is_none_or(|days| {
            days.dates.contains(&local.date_naive())
                || days.spans.iter().any(|(from, to)| *from <= at && at < *to)
        });
        let time = local.time();
        let hours = self.hours.is_empty()
            || self.hours.iter().any(|(from, to)| {
                // One that ends at or before its start runs past midnight (00:00-24:00: all day).
                if from < to {
                    *from <= time && time < *to
                } else {
                    *from <= time || time < *to
                }
            });
        let weekdays = self
            .weekdays
            .as_ref()
            .is_none_or(|days| days.contains(&local.weekday()));
        days && hours && weekdays
    }

    /// The first instant after `at` at which whether the calendar covers an instant may change:
    /// a day's start, an end of an `hours` window, an end of a span. [`Calendar::covers`] gives
    /// one answer for every instant of `[at, answer)`, so a search for a tick it covers may jump
    /// there. `None`: the answer never changes.
    pub fn changes_after(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut times: Vec<NaiveTime> = self
            .hours
            .iter()
            .flat_map(|(from, to)| [*from, *to])
            .collect();
        if self.days.is_some() || self.weekdays.is_some() {
            times.push(NaiveTime::MIN);
        }
        let today = at.with_timezone(&self.timezone).date_naive();
        // Yesterday too: where a zone turns its clocks back across midnight, yesterday's late
        // wall times come again after today's first minutes.
        let dates = [today.pred_opt(), Some(today), today.succ_opt()];
        let local = dates.into_iter().flatten().flat_map(|date| {
            times
                .iter()
                .flat_map(move |time| self.instants_of(date.and_time(*time)))
        });
        let spans = self
            .days
            .iter()
            .flat_map(|days| days.spans.iter().flat_map(|(from, to)| [*from, *to]));
        let next = local.chain(spans).filter(|change| *change > at).min()?;
        // A change of the zone's offset moves every wall time at once (a repeated hour goes
        // back into a window, a date back a day): the answer may change there too.
        Some(self.offset_change(at, next).unwrap_or(next))
    }

    /// The first instant in `(at, until]` where the zone's offset differs from `at`'s, when
    /// `until`'s does (zones change their offset months apart, so at most once in a day or two).
    fn offset_change(&self, at: DateTime<Utc>, until: DateTime<Utc>) -> Option<DateTime<Utc>> {
        use chrono::Offset;
        let offset = |seconds: i64| {
            DateTime::from_timestamp(seconds, 0)
                .map(|t| self.timezone.offset_from_utc_datetime(&t.naive_utc()).fix())
        };
        let (mut before, mut after) = (at.timestamp(), until.timestamp());
        let first = offset(before)?;
        if offset(after)? == first {
            return None;
        }
        while after - before > 1 {
            let middle = before + (after - before) / 2;
            if offset(middle)? == first {
                before = middle;
            } else {
                after = middle;
            }
        }
        DateTime::from_timestamp(after, 0).filter(|change| *change > at)
    }

    /// Every instant a wall time of the calendar's zone names: both passes of a repeated one,
    /// and for one a spring gap skips, the gap's end (where the calendar's answer changes).
    fn instants_of(&self, wall: chrono::NaiveDateTime) -> Vec<DateTime<Utc>> {
        use chrono::LocalResult;
        let utc = |local: DateTime<Tz>| local.with_timezone(&Utc);
        match self.timezone.from_local_datetime(&wall) {
            LocalResult::Single(one) => vec![utc(one)],
            LocalResult::Ambiguous(first, second) => vec![utc(first), utc(second)],
            // No zone skips more than a day of wall time; a gap's end is a whole minute.
            LocalResult::None => (1..=24 * 60)
                .find_map(|minutes| {
                    let later = wall + chrono::Duration::minutes(minutes);
                    self.timezone.from_local_datetime(&later).earliest()
                })
                .map(utc)
                .into_iter()
                .collect(),
        }
    }
}

/// A job's calendars: it skips a tick that one of `except` covers, and, with `only`, one that
/// none of `only` covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalendarRule {
    pub except: Vec<Arc<Calendar>>,
    pub only: Vec<Arc<Calendar>>,
}

/// Why a calendar skips a tick, for its `skipped` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub calendar: String,
    /// `true`: an `except` calendar covers it; `false`: no `only` calendar does.
    pub excepted: bool,
}

impl Skip {
    /// The record's reason: `skipped by calendar "holidays" (except)`.
    pub fn reason(&self) -> String {
        if self.excepted {
            format!("skipped by calendar \"{}\" (except)", self.calendar)
        } else {
            format!("outside calendar \"{}\" (only)", self.calendar)
        }
    }
}

impl CalendarRule {
    pub fn is_empty(&self) -> bool {
        self.except.is_empty() && self.only.is_empty()
    }

    /// The first instant after `at` at which [`CalendarRule::skips`] may answer differently
    /// (the earliest change of any of its calendars); `None`: never.
    pub fn changes_after(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.except
            .iter()
            .chain(&self.only)
            .filter_map(|calendar| calendar.changes_after(at))
            .min()
    }

    /// Why the rule skips `tick`; `None` when it runs.
    pub fn skips(&self, tick: DateTime<Utc>) -> Option<Skip> {
        if let Some(calendar) = self.except.iter().find(|c| c.covers(tick)) {
            return Some(Skip {
                calendar: calendar.name.clone(),
                excepted: true,
            });
        }
        let outside = !self.only.is_empty() && !self.only.iter().any(|c| c.covers(tick));
        outside.then(|| Skip {
            calendar: self
                .only
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join("\", \""),
            excepted: false,
        })
    }
}

/// `"09:00-17:00"`: a daily window, `[from, to)`; one that ends before it starts runs past
/// midnight; `"00:00-24:00"` is the whole day.
///
/// # Errors
/// Not two `HH:MM` times joined by `-`, or an empty window.
pub fn parse_hours(text: &str) -> Result<(NaiveTime, NaiveTime), String> {
    let expected = || format!("expected a daily window like \"09:00-17:00\", not {text:?}");
    let (from, to) = text.trim().split_once('-').ok_or_else(expected)?;
    let time = |part: &str| -> Result<NaiveTime, String> {
        match part.trim() {
            "24:00" => Ok(NaiveTime::MIN),
            part => NaiveTime::parse_from_str(part, "%H:%M").map_err(|_| expected()),
        }
    };
    let whole_day = to.trim() == "24:00";
    let (from, to) = (time(from)?, time(to)?);
    if from == to && !whole_day {
        return Err(format!("{text:?} is an empty window"));
    }
    Ok((from, to))
}

/// `"mon"` … `"sun"` (or their full names), in any case.
///
/// # Errors
/// Not a day of the week.
pub fn parse_weekday(text: &str) -> Result<Weekday, String> {
    text.trim()
        .parse::<Weekday>()
        .map_err(|_| format!("expected a day of the week like \"mon\", not {text:?}"))
}

/// The days and spans of an iCalendar text's events, in `zone` where a time has no zone of its
/// own: an all-day event covers its days (`DTEND` exclusive, one day without it), an event
/// with times the span between them.
///
/// # Errors
/// Not iCalendar; an event without a start, or that recurs (`RRULE`, `RDATE`: each occurrence
/// must be listed, as holiday feeds do), named by its summary.
pub fn read_icalendar(text: &str, zone: Tz) -> Result<Days, String> {
    use icalendar::{CalendarDateTime, Component, DatePerhapsTime};
    let calendar: icalendar::Calendar = text.parse().map_err(|err: String| {
        format!(
            "not an iCalendar file: {}",
            err.lines().next().unwrap_or("")
        )
    })?;
    let mut days = Days::default();
    for event in calendar.events() {
        let named = || event.get_summary().unwrap_or("(no summary)").to_owned();
        if event.property_value("RRULE").is_some() || event.property_value("RDATE").is_some() {
            return Err(format!(
                "event {:?} recurs (RRULE/RDATE): list each day it falls on",
                named()
            ));
        }
        let instant = |value: DatePerhapsTime| -> Result<Result<DateTime<Utc>, NaiveDate>, String> {
            let (naive, tz) = match value {
                DatePerhapsTime::Date(date) => return Ok(Err(date)),
                DatePerhapsTime::DateTime(CalendarDateTime::Utc(at)) => return Ok(Ok(at)),
                DatePerhapsTime::DateTime(CalendarDateTime::Floating(naive)) => (naive, zone),
                DatePerhapsTime::DateTime(CalendarDateTime::WithTimezone { date_time, tzid }) => {
                    let tz = tzid
                        .parse::<Tz>()
                        .map_err(|_| format!("event {:?}: unknown time zone {tzid:?}", named()))?;
                    (date_time, tz)
                }
            };
            tz.from_local_datetime(&naive)
                .earliest()
                .map(|at| Ok(at.with_timezone(&Utc)))
                .ok_or_else(|| format!("event {:?}: {naive} does not exist in {tz}", named()))
        };
        let start = event
            .get_start()
            .ok_or_else(|| format!("event {:?} has no start (DTSTART)", named()))
            .and_then(instant)?;
        let end = event.get_end().map(instant).transpose()?;
        match (start, end) {
            (Err(first), end) => {
                let after = match end {
                    Some(Err(end)) if end > first => end,
                    _ => first.succ_opt().unwrap_or(first),
                };
                days.dates
                    .extend(first.iter_days().take_while(|day| *day < after));
            }
            (Ok(from), Some(Ok(to))) if to > from => days.spans.push((from, to)),
            (Ok(_), _) => {
                return Err(format!(
                    "event {:?} has a start time but no later end (DTEND)",
                    named()
                ));
            }
        }
    }
    Ok(days)
}

#[cfg(test)]
mod tests;
