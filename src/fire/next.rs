//! When a job runs next: the one answer behind `status`, `status --json`, `/v1/status`, the
//! console, `check` and `check --json`. A run is a tick of the job's schedule that its calendars
//! do not skip, starting at its jitter; the live views add the job's pause and `enabled`.
//!
//! Owns: walking the schedule past the ticks the calendars skip (in jumps: a calendar's answer
//! holds until its next change, [`crate::calendar::CalendarRule::changes_after`]), and saying
//! why there is no next run.
//! Must not: read a clock or ZooKeeper (the caller hands in the instant and the pause), or
//! decide what the fire machine records for a skipped tick (`fire::machine::calendars`).

use chrono::{DateTime, Utc};

use crate::config::JobConfig;

/// How many runs of skipped ticks one answer walks past at most. A calendar changes a few
/// times a day, so this reaches years ahead; a rule that skips every tick for longer answers
/// [`NoRun::SkippedUntil`].
const MAX_SKIPPED_RUNS: usize = 10_000;

/// One run ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextRun {
    /// The scheduled instant (`ZKCRON_SCHEDULED_AT`).
    pub tick: DateTime<Utc>,
    /// When it starts: the tick, or a little after it with `jitter`.
    pub starts: DateTime<Utc>,
}

/// Why a job has no next run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRun {
    /// No schedule: it runs when submitted, triggered or after a parent.
    OnDemand,
    /// `enabled = false`.
    Disabled,
    /// Paused: it starts nothing until resumed.
    Paused,
    /// The schedule fires no more.
    Ended,
    /// Its calendars skip every tick searched, up to this instant.
    SkippedUntil(DateTime<Utc>),
}

/// The job's next `count` runs after `after`, soonest first, and why the list stops short
/// when it does (`None` when it has `count`). Pauses and `enabled` are not asked: this is the
/// schedule file's answer (`check`).
pub fn runs_after(
    job: &JobConfig,
    after: DateTime<Utc>,
    count: usize,
) -> (Vec<NextRun>, Option<NoRun>) {
    let mut runs = Vec::with_capacity(count);
    let mut cursor = after;
    while runs.len() < count {
        match first_run_after(job, cursor) {
            Ok(run) => {
                cursor = run.tick;
                runs.push(run);
            }
            Err(why) => return (runs, Some(why)),
        }
    }
    (runs, None)
}

/// The job's next `count` runs after `now` as the fire machine will start them: none while it
/// is disabled or `paused` (`describe`).
pub fn runs_ahead(
    job: &JobConfig,
    paused: bool,
    now: DateTime<Utc>,
    count: usize,
) -> (Vec<NextRun>, Option<NoRun>) {
    if !job.enabled {
        return (Vec::new(), Some(NoRun::Disabled));
    }
    if paused {
        return (Vec::new(), Some(NoRun::Paused));
    }
    runs_after(job, now, count)
}

/// The job's next run after `now` as the fire machine will start it: none while it is disabled
/// or `paused` (`status`, the console).
///
/// # Errors
/// Why it has none.
pub fn next_run(job: &JobConfig, paused: bool, now: DateTime<Utc>) -> Result<NextRun, NoRun> {
    if !job.enabled {
        return Err(NoRun::Disabled);
    }
    if paused {
        return Err(NoRun::Paused);
    }
    first_run_after(job, now)
}

fn first_run_after(job: &JobConfig, after: DateTime<Utc>) -> Result<NextRun, NoRun> {
    if job.schedule.is_none() {
        return Err(NoRun::OnDemand);
    }
    let mut cursor = after;
    for _ in 0..MAX_SKIPPED_RUNS {
        let tick = job.next_tick_after(cursor).ok_or(NoRun::Ended)?;
        if job.calendars.skips(tick).is_none() {
            return Ok(NextRun {
                tick,
                starts: job.start_of(tick),
            });
        }
        // Every tick before the calendars' next change is skipped as this one is: search on
        // from that change (a tick exactly at it included).
        let Some(change) = job.calendars.changes_after(tick) else {
            return Err(NoRun::SkippedUntil(DateTime::<Utc>::MAX_UTC));
        };
        cursor = (change - chrono::Duration::milliseconds(1)).max(tick);
    }
    Err(NoRun::SkippedUntil(cursor))
}

#[cfg(test)]
mod tests;
