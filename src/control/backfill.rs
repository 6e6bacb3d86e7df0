//! `zkcron backfill` (issue 20): which past ticks of a job run again — those with no run record
//! of their own — and the bounds on a range.
//!
//! Owns: the plan, tick by tick (recorded, to run, or unknown because its record may have been
//! pruned), and refusing a range that is backwards, reaches past now, or holds too many ticks.
//! Must not: claim or run a tick: the owner's fire machine does, through the one claim path, so
//! a tick run meanwhile is not run again.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::MAX_BACKFILL_TICKS;
use crate::config::JobConfig;
use crate::ids::JobName;
use crate::run::{RunRecord, RunStatus};

/// Past this many ticks the count stops: the range is refused either way.
const COUNTED_AT_MOST: usize = 1_000_000;

/// Why a backfill range is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("--to {to} is before --from {from}")]
    Backwards {
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    },
    #[error("--to {to} is after now: a backfill runs past ticks; later ones fire on their own")]
    Future { to: DateTime<Utc> },
    #[error("job \"{job}\" has no schedule: it has no ticks to backfill")]
    NoSchedule { job: JobName },
    #[error(
        "{count} ticks from {from} to {to}; at most {MAX_BACKFILL_TICKS} are backfilled at once: split the range"
    )]
    TooMany {
        /// `more than` when the count stopped at its cap.
        count: String,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    },
}

/// What a backfill does with one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickPlan {
    /// It has a record: it ran, was skipped, or stands for a missed gap. Left alone.
    Recorded(RunStatus),
    /// No record of its own (never fired, or inside a gap recorded `missed`): run.
    Run,
    /// Older than every record kept: its record, if it had one, may have been pruned.
    Unknown,
}

/// The ticks of `job` in `[from, to]`, each with what a backfill does with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub job: JobName,
    pub ticks: Vec<(DateTime<Utc>, TickPlan)>,
}

impl Plan {
    /// The ticks to request, ascending: the unrecorded ones, and the unknown ones if asked.
    pub fn to_run(&self, include_pruned: bool) -> Vec<i64> {
        self.ticks
            .iter()
            .filter(|(_, plan)| {
                *plan == TickPlan::Run || (include_pruned && *plan == TickPlan::Unknown)
            })
            .map(|(tick, _)| tick.timestamp_millis())
            .collect()
    }

    /// How many ticks are in each state.
    pub fn count(&self, wanted: impl Fn(TickPlan) -> bool) -> usize {
        self.ticks.iter().filter(|(_, plan)| wanted(*plan)).count()
    }
}

/// The ticks of `job` in `[from, to]` that its calendars keep (`except`, `only`): a tick a
/// calendar skips never runs, not even by a backfill.
///
/// # Errors
/// A range backwards, past `now`, of a job without a schedule, or of more than
/// [`MAX_BACKFILL_TICKS`] ticks.
pub fn ticks_in(
    job: &JobConfig,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Vec<DateTime<Utc>>, RangeError> {
    if to < from {
        return Err(RangeError::Backwards { from, to });
    }
    if to > now {
        return Err(RangeError::Future { to });
    }
    let Some(schedule) = &job.schedule else {
        return Err(RangeError::NoSchedule {
            job: job.spec.name.clone(),
        });
    };
    let mut ticks = Vec::new();
    // `next_after` is strict: start a millisecond before `from`, so a tick at `from` counts.
    let mut cursor = from - chrono::Duration::milliseconds(1);
    while let Some(tick) = schedule.next_after(cursor).filter(|tick| *tick <= to) {
        if ticks.len() == COUNTED_AT_MOST {
            return Err(RangeError::TooMany {
                count: format!("more than {COUNTED_AT_MOST}"),
                from,
                to,
            });
        }
        if job.calendars.skips(tick).is_none() {
            ticks.push(tick);
        }
        cursor = tick;
    }
    if ticks.len() > MAX_BACKFILL_TICKS {
        return Err(RangeError::TooMany {
            count: ticks.len().to_string(),
            from,
            to,
        });
    }
    Ok(ticks)
}

/// What to do with each of `ticks`, given the job's kept `records` (any order) and how many it
/// keeps (`history`).
pub fn plan(job: &JobName, ticks: &[DateTime<Utc>], records: &[RunRecord], history: usize) -> Plan {
    let recorded: BTreeMap<i64, RunStatus> = records
        .iter()
        .filter(|r| r.submission_id.is_none())
        .map(|r| (r.scheduled_unix_ms, r.status))
        .collect();
    // A gap recorded `missed` is one record, at its last tick: the ticks before it have none,
    // and run.
    // Nothing was pruned while fewer records than `history` are kept.
    let horizon = (records.len() >= history)
        .then(|| records.iter().map(|r| r.scheduled_unix_ms).min())
        .flatten();
    let ticks = ticks
        .iter()
        .map(|tick| {
            let ms = tick.timestamp_millis();
            let plan = match recorded.get(&ms) {
                Some(status) => TickPlan::Recorded(*status),
                _ if horizon.is_some_and(|oldest| ms < oldest) => TickPlan::Unknown,
                _ => TickPlan::Run,
            };
            (*tick, plan)
        })
        .collect();
    Plan {
        job: job.clone(),
        ticks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{FencingToken, NodeId};

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_893_456_000_000 + ms).expect("in range")
    }

    fn record(tick_ms: i64, status: RunStatus) -> RunRecord {
        let mut record = RunRecord::claimed(
            &JobName::new("a"),
            at(tick_ms).timestamp_millis(),
            (&NodeId::new("n1"), "10.0.0.1"),
            FencingToken(1),
            0,
        );
        record.status = status;
        record
    }

    #[test]
    fn a_tick_with_a_record_is_left_and_one_without_is_run() {
        let ticks: Vec<_> = (1..=4).map(|m| at(m * 60_000)).collect();
        let records = [
            record(60_000, RunStatus::Succeeded),
            record(180_000, RunStatus::Missed),
        ];
        let plan = plan(&JobName::new("a"), &ticks, &records, 100);
        assert_eq!(
            plan.ticks.iter().map(|(_, p)| *p).collect::<Vec<_>>(),
            [
                TickPlan::Recorded(RunStatus::Succeeded),
                TickPlan::Run,
                TickPlan::Recorded(RunStatus::Missed),
                TickPlan::Run
            ]
        );
        assert_eq!(
            plan.to_run(false),
            [
                at(120_000).timestamp_millis(),
                at(240_000).timestamp_millis()
            ]
        );
    }

    #[test]
    fn ticks_older_than_a_full_history_are_unknown_until_included() {
        let ticks: Vec<_> = (1..=3).map(|m| at(m * 60_000)).collect();
        let records = [
            record(120_000, RunStatus::Succeeded),
            record(180_000, RunStatus::Failed),
        ];
        let full = plan(&JobName::new("a"), &ticks, &records, 2);
        assert_eq!(full.ticks[0].1, TickPlan::Unknown, "pruned, maybe");
        assert!(full.to_run(false).is_empty());
        assert_eq!(full.to_run(true), [at(60_000).timestamp_millis()]);
        let roomy = plan(&JobName::new("a"), &ticks, &records, 100);
        assert_eq!(roomy.ticks[0].1, TickPlan::Run, "nothing pruned yet");
    }

    #[test]
    fn a_tick_a_calendar_skips_is_not_offered() {
        let jobs = crate::config::jobs_for_test(
            "[[calendar]]\nname = \"quiet\"\nhours = [\"00:02-00:04\"]\n\
             [[job]]\nname = \"m\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\nexcept = [\"quiet\"]\n",
        );
        let ticks = ticks_in(&jobs[0], at(0), at(6 * 60_000), at(10 * 60_000)).expect("a range");
        let minutes: Vec<i64> = ticks
            .iter()
            .map(|tick| (tick.timestamp_millis() - at(0).timestamp_millis()) / 60_000)
            .collect();
        assert_eq!(
            minutes,
            [0, 1, 4, 5, 6],
            "00:02 and 00:03 are the calendar's (its end is not)"
        );
    }
}
