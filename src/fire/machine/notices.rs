//! Failure notices and auto-pause (issue 20): which written records are told, and when a job
//! pauses itself.
//!
//! Owns: each job's run of failures — learned from its newest records when a catch-up lists
//! them, kept up as this owner's records are written — and the notice policy over it.
//! Must not: send a notice or write a pause (the driver does), read a clock, or tell of a record
//! before ZooKeeper has stored it: a notice says what the ledger says.

use std::collections::HashMap;
use std::sync::Arc;

use super::protocol::{Action, ControlAction};
use crate::config::{JobConfig, NotifyWhen};
use crate::ids::{JobName, NodeId};
use crate::run::{Notice, NoticeKind, RunRecord, RunStatus};

/// The runs of failures of each job this owner has seen.
#[derive(Debug, Default)]
pub(super) struct Streaks {
    by_job: HashMap<JobName, Streak>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Streak {
    /// Failed runs in a row (a run retried is one run: counted when it ends).
    failures: u32,
    /// Of those, the ones since the job was last paused or skipped: what `pause_after_failures`
    /// counts, so a job an operator resumes gets its N runs again.
    since_pause: u32,
}

/// What a written record calls for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Told {
    pub notice: Option<Notice>,
    /// Pause the job, for this reason.
    pub pause: Option<String>,
}

impl Streaks {
    /// The streak of `job` from its newest records (in any order), as a new owner finds it.
    pub fn learned(&mut self, job: &JobName, newest: &[(RunRecord, i32)]) {
        let mut records: Vec<&RunRecord> = newest.iter().map(|(record, _)| record).collect();
        records.sort_by_key(|record| std::cmp::Reverse(record.scheduled_unix_ms));
        let mut streak = Streak::default();
        let mut paused_since = false;
        for record in records {
            match failure(record) {
                // Not over: its retry is yet to run, and its end is counted then.
                Some(true) if record.retry_at_unix_ms.is_some() => {}
                Some(true) => {
                    streak.failures += 1;
                    if !paused_since {
                        streak.since_pause += 1;
                    }
                }
                Some(false) => break,
                None => paused_since |= record.status == RunStatus::Skipped,
            }
        }
        // No entry is a streak of none (`recorded` starts from the default): a new owner's
        // catch-up of a schedule that is not failing keeps no name of it here (issue 32).
        if streak == Streak::default() {
            self.by_job.remove(job);
        } else {
            self.by_job.insert(job.clone(), streak);
        }
    }

    /// `record` is stored: the notice it calls for and the pause, if any, as actions (see
    /// [`Streaks::recorded`]).
    pub fn tell(
        &mut self,
        record: &RunRecord,
        config: &JobConfig,
        again: bool,
        me: &NodeId,
        out: &mut Vec<Action>,
    ) {
        let told = self.recorded(record, config, again, me);
        if let Some(notice) = told.notice {
            out.push(Action::Notify(Box::new(notice)));
        }
        if let Some(reason) = told.pause {
            tracing::warn!(job = %record.job, reason, "pausing the job");
            out.push(Action::Control(ControlAction::PauseJob {
                job: record.job.clone(),
                reason,
            }));
        }
    }

    /// `record` of `config`'s job was written by `me`: the notice it calls for, if any, and
    /// whether the job now pauses itself. `again`: the run will be started again (a promised
    /// retry, an interrupted run rerun), so this is not its end.
    pub fn recorded(
        &mut self,
        record: &RunRecord,
        config: &JobConfig,
        again: bool,
        me: &NodeId,
    ) -> Told {
        let policy = &config.notices;
        let streak = self.by_job.entry(record.job.clone()).or_default();
        let mut told = Told::default();
        let kind = match (record.status, failure(record)) {
            (RunStatus::Succeeded, _) => {
                let ended = streak.failures;
                *streak = Streak::default();
                (policy.on_recovery && ended > 0).then_some((NoticeKind::Recovery, ended))
            }
            (_, Some(true)) if again => {
                (policy.when == NotifyWhen::EveryAttempt).then_some((NoticeKind::Failure, 0))
            }
            (_, Some(true)) => {
                streak.failures += 1;
                streak.since_pause += 1;
                if let Some(after) = policy.pause_after_failures
                    && streak.since_pause >= after
                {
                    streak.since_pause = 0;
                    told.pause = Some(format!("paused after {after} consecutive failures"));
                }
                Some((NoticeKind::Failure, 0))
            }
            // One notice per gap: a `missed` record stands for every tick of it.
            (RunStatus::Missed, _) => Some((NoticeKind::Failure, 0)),
            (RunStatus::Skipped, _) => {
                streak.since_pause = 0;
                None
            }
            _ => None,
        };
        if let Some((kind, ended)) = kind
            && !policy.channels.is_empty()
        {
            let retries_left = match (kind, again) {
                (NoticeKind::Failure, true) => (config.retries + 1).saturating_sub(record.attempt),
                _ => 0,
            };
            told.notice = Some(Notice {
                kind,
                record: record.clone(),
                retries_left,
                consecutive_failures: match kind {
                    NoticeKind::Failure => streak.failures,
                    NoticeKind::Recovery => ended,
                },
                sent_by: me.clone(),
                channels: Arc::clone(&policy.channels),
            });
        }
        told
    }

    /// The job left the schedule: its streak goes with it.
    pub fn forget(&mut self, job: &JobName) {
        self.by_job.remove(job);
    }
}

/// `Some(true)`: a failed run (failed, timed out, interrupted); `Some(false)`: a success; `None`:
/// neither (skipped, missed, cancelled, or not over).
fn failure(record: &RunRecord) -> Option<bool> {
    match record.status {
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Interrupted => Some(true),
        RunStatus::Succeeded => Some(false),
        _ => None,
    }
}
