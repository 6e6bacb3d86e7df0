//! `[[calendar]]` and a job's `except` and `only` (issue 36).
//!
//! Owns: a calendar's name, zone, `dates`, `icalendar` file (read at load), `hours` and
//! `weekdays`, and resolving the names a job lists to declared calendars.
//! Must not: decide what a calendar covers (`crate::calendar` does) or skip a tick (the fire
//! machine does).

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::NaiveDate;
use toml::Spanned;

use super::error::JobContext;
use super::schema::RawCalendar;
use super::validator::{NeededBy, Validator};
use crate::calendar::{self, Calendar, CalendarRule, Days};

impl Validator<'_> {
    /// Every `[[calendar]]`, in file order; problems recorded, bad ones left out.
    pub(super) fn declared_calendars(
        &mut self,
        raw: Vec<Spanned<RawCalendar>>,
    ) -> Vec<Arc<Calendar>> {
        let mut calendars: Vec<Arc<Calendar>> = Vec::new();
        for table in raw {
            let span = table.span();
            let raw = table.into_inner();
            let name = raw.name.get_ref().clone();
            let context = format!("calendar {name:?}");
            let key = |key: &str| format!("{context}: {key}");
            if let Err(reason) = crate::ids::validate_znode_name(&name) {
                self.problem(raw.name.span(), key("name"), reason);
                continue;
            }
            if calendars.iter().any(|known| known.name == name) {
                self.problem(raw.name.span(), context, "duplicate calendar name");
                continue;
            }
            let timezone = match &raw.timezone {
                Some(zone) => match crate::schedule::parse_timezone(zone.get_ref()) {
                    Ok(zone) => zone,
                    Err(err) => {
                        self.problem(zone.span(), key("timezone"), err.to_string());
                        continue;
                    }
                },
                None => self.job_defaults.timezone,
            };
            let mut days: Option<Days> = None;
            for date in raw.dates.map(Spanned::into_inner).unwrap_or_default() {
                match NaiveDate::parse_from_str(date.get_ref().trim(), "%Y-%m-%d") {
                    Ok(day) => _ = days.get_or_insert_with(Days::default).dates.insert(day),
                    Err(_) => self.problem(
                        date.span(),
                        key("dates"),
                        format!(
                            "expected a day like \"2026-12-25\", not {:?}",
                            date.get_ref()
                        ),
                    ),
                }
            }
            if let Some(file) = &raw.icalendar {
                let read = if self.looks_up(NeededBy::Daemon) {
                    self.read_file(file, &key("icalendar"))
                } else {
                    None
                };
                let days = days.get_or_insert_with(Days::default);
                if let Some(text) = read {
                    match calendar::read_icalendar(&text, timezone) {
                        Ok(read) => {
                            days.dates.extend(read.dates);
                            days.spans.extend(read.spans);
                        }
                        Err(why) => {
                            let message = format!("{}: {why}", file.get_ref());
                            self.problem(file.span(), key("icalendar"), message);
                        }
                    }
                }
            }
            let mut hours = Vec::new();
            for window in raw.hours.map(Spanned::into_inner).unwrap_or_default() {
                match calendar::parse_hours(window.get_ref()) {
                    Ok(window) => hours.push(window),
                    Err(why) => self.problem(window.span(), key("hours"), why),
                }
            }
            let weekdays = raw.weekdays.map(|list| {
                let mut seen = Vec::new();
                for day in list.into_inner() {
                    match calendar::parse_weekday(day.get_ref()) {
                        Ok(day) if !seen.contains(&day) => seen.push(day),
                        Ok(_) => self.problem(day.span(), key("weekdays"), "named twice"),
                        Err(why) => self.problem(day.span(), key("weekdays"), why),
                    }
                }
                seen
            });
            if days.is_none() && hours.is_empty() && weekdays.is_none() {
                self.problem(
                    span,
                    context,
                    "a calendar needs dates, an icalendar file, hours or weekdays",
                );
                continue;
            }
            calendars.push(Arc::new(Calendar {
                name,
                timezone,
                days,
                hours,
                weekdays,
            }));
        }
        calendars
    }

    /// A job's `except` and `only`: each a declared `[[calendar]]`, once; only for a job with a
    /// schedule (they decide which of its ticks run).
    pub(super) fn job_calendars(
        &mut self,
        except: Option<Spanned<Vec<Spanned<String>>>>,
        only: Option<Spanned<Vec<Spanned<String>>>>,
        scheduled: bool,
        job: JobContext<'_>,
    ) -> CalendarRule {
        let mut rule = CalendarRule::default();
        for (key, raw, into) in [
            ("except", except, &mut rule.except),
            ("only", only, &mut rule.only),
        ] {
            let Some(raw) = raw else { continue };
            if !scheduled {
                let message = "only a job with a schedule skips ticks by calendar";
                self.problem(raw.span(), job.key(key), message);
                continue;
            }
            let mut named = BTreeSet::new();
            for name in raw.into_inner() {
                let Some(calendar) = self.calendars.iter().find(|c| c.name == *name.get_ref())
                else {
                    let declared: Vec<&str> =
                        self.calendars.iter().map(|c| c.name.as_str()).collect();
                    let message = match declared.as_slice() {
                        [] => "no [[calendar]] is declared".to_owned(),
                        _ => format!("expected a declared [[calendar]]: {}", declared.join(", ")),
                    };
                    self.problem(name.span(), job.key(key), message);
                    continue;
                };
                if !named.insert(calendar.name.clone()) {
                    self.problem(name.span(), job.key(key), "named twice");
                    continue;
                }
                into.push(Arc::clone(calendar));
            }
        }
        rule
    }
}
