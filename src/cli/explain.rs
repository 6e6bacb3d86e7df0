//! `zkcron check --explain [JOB] [--from T] [--count N]` (issue 20): each job's next fires with
//! every daylight-saving transition between them spelled out, and those its calendars skip
//! marked (issue 36).
//!
//! Owns: the text of an explanation.
//! Must not: compute fires or transitions (`zkcron::schedule` does).

use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;

use super::error::ExplainError;
use zkcron::config::{Config, JobConfig};
use zkcron::delayed::due::{DueError, due_at};
use zkcron::schedule::DstRule;
use zkcron::schedule::explain::{Explained, ExplainedFire, FireNote, Transition};

/// The most fires explained per job.
pub const MAX_COUNT: usize = 10_000;

/// What to explain: `job` (`None`: every job), from `from` (`None`: now), `count` fires each.
pub struct ExplainRequest<'a> {
    pub job: Option<&'a str>,
    pub from: Option<&'a str>,
    pub count: usize,
}

/// The explanation, as lines.
///
/// # Errors
/// An unknown job, an unreadable `--from`, or a count out of range.
pub fn explain(
    config: &Config,
    file: &str,
    request: &ExplainRequest<'_>,
    now: DateTime<Utc>,
) -> Result<Vec<String>, ExplainError> {
    if !(1..=MAX_COUNT).contains(&request.count) {
        return Err(ExplainError::Count {
            count: request.count,
            max: MAX_COUNT,
        });
    }
    let jobs: Vec<&JobConfig> = config
        .jobs
        .iter()
        .map(AsRef::as_ref)
        .filter(|job| {
            request
                .job
                .is_none_or(|name| job.spec.name.as_str() == name)
        })
        .collect();
    if let (Some(name), true) = (request.job, jobs.is_empty()) {
        return Err(ExplainError::NoSuchJob {
            job: name.to_owned(),
            file: file.to_owned(),
        });
    }
    let mut lines = Vec::new();
    for job in jobs {
        let tz = job.timezone;
        let from = match request.from {
            None => now,
            Some(text) => from_text(text, tz)?,
        };
        let Some(schedule) = &job.schedule else {
            lines.push(format!(
                "{}  on demand (no schedule: fires when submitted)",
                job.spec.name
            ));
            continue;
        };
        lines.push(format!(
            "{}  {}  {}  {}",
            job.spec.name,
            schedule.expression(),
            tz.name(),
            rule_text(schedule.dst_rule())
        ));
        for line in schedule.explain(from, request.count) {
            lines.push(match line {
                Explained::Fire(fire) => {
                    let mut text = fire_text(&fire);
                    // A tick its calendars skip is one it will not run (recorded `skipped`).
                    if let Some(skip) = job.calendars.skips(fire.at) {
                        text.push_str(&format!("  not run: {}", skip.reason()));
                    }
                    text
                }
                Explained::Transition(transition) => transition_text(&transition),
            });
        }
    }
    Ok(lines)
}

/// `--from`: RFC 3339, or a local date-time (or a date: its midnight) in the job's zone.
fn from_text(text: &str, tz: Tz) -> Result<DateTime<Utc>, ExplainError> {
    instant(text, tz).map_err(ExplainError::From)
}

/// An instant on the command line: RFC 3339, or a local date-time (or a date: its midnight) in
/// `tz`.
///
/// # Errors
/// Unreadable, or a local time the zone skips or repeats.
pub fn instant(text: &str, tz: Tz) -> Result<DateTime<Utc>, DueError> {
    let text = text.trim();
    let with_time = if chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok() {
        format!("{text} 00:00")
    } else {
        text.to_owned()
    };
    due_at(&with_time, Some(tz))
}

fn rule_text(rule: DstRule) -> &'static str {
    match rule {
        DstRule::FixedTime => {
            "fixed time: in a spring gap it fires once at the gap's end; a repeated time fires once"
        }
        DstRule::Wildcard => {
            "follows elapsed time: nothing fires in a spring gap; a repeated time fires on both passes"
        }
    }
}

fn wall(at: NaiveDateTime) -> String {
    at.format("%H:%M:%S").to_string()
}

fn fire_text(fire: &ExplainedFire) -> String {
    let mut line = format!(
        "  {}  ({} UTC)",
        fire.local.format("%Y-%m-%d %H:%M:%S %:z"),
        fire.at.format("%Y-%m-%d %H:%M:%S")
    );
    match fire.note {
        Some(FireNote::MovedOutOfGap { wanted }) => line.push_str(&format!(
            "  moved: {} does not exist this day; fires at the end of the gap",
            wall(wanted)
        )),
        Some(FireNote::FirstPass) => line.push_str("  first pass of a repeated time"),
        Some(FireNote::SecondPass) => line.push_str("  second pass of a repeated time"),
        None => {}
    }
    line
}

fn transition_text(t: &Transition) -> String {
    let (direction, what) = if t.is_gap() {
        ("forward", "do not exist")
    } else {
        ("back", "happen twice")
    };
    let mut line = format!(
        "  -- {} UTC: clocks go {direction}, {} to {}: wall times {} to {} {what}",
        t.at.format("%Y-%m-%d %H:%M:%S"),
        t.from,
        t.to,
        wall(t.start),
        wall(
            t.end
                .checked_sub_signed(chrono::TimeDelta::seconds(1))
                .unwrap_or(t.end)
        ),
    );
    let mut listed: Vec<String> = t.matches.iter().map(|m| wall(*m)).collect();
    if t.match_count > listed.len() {
        listed.push(format!("and {} more", t.match_count - listed.len()));
    }
    let listed = listed.join(", ");
    let (fires, each) = if t.match_count == 1 {
        ("fires", "")
    } else {
        ("fire", " each")
    };
    let fate = match (t.match_count, t.is_gap(), t.rule) {
        (0, _, _) => "; no time of this schedule is among them".to_owned(),
        (_, true, DstRule::FixedTime) => {
            format!("; {listed}: one fire, at {}", wall(t.end))
        }
        (n, true, DstRule::Wildcard) => format!("; skipped: {listed} ({n} tick(s))"),
        (_, false, DstRule::FixedTime) => {
            format!(
                "; {listed} {fires} once{each}, on the first pass ({})",
                t.from
            )
        }
        (_, false, DstRule::Wildcard) => {
            format!(
                "; {listed} {fires} on both passes ({} and {})",
                t.from, t.to
            )
        }
    };
    line.push_str(&fate);
    line
}
