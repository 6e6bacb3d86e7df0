//! The runs alive on this node and the retries waiting for their backoff: the fire machine's
//! bookkeeping, pure like the machine itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::{Action, ClaimAction, FireReason, Item};
use crate::config::{Concurrency, JobConfig, KeepOutput, OnLost};
use crate::ids::JobName;
use crate::run::Claim;
use crate::run::{RunOutcome, RunReport, SubmissionInput};
use crate::run::{RunRecord, RunStatus};

/// A run started here. It counts as alive until its final record is written: only then is its
/// guard released, as far as the cluster can tell.
#[derive(Debug)]
pub(super) struct Run {
    pub job: JobName,
    pub config: Arc<JobConfig>,
    /// Part of its job's catch-up sequence: the next item waits for it.
    pub in_backlog: bool,
    /// Its process has ended; this is the final record being written.
    pub finished: Option<Claim>,
    pub started_at: DateTime<Utc>,
    /// A submission's run: what a retry gives the job again.
    pub submission: Option<SubmissionInput>,
    /// The claim it started from; its guard, once one is held (the claim's, or one taken since).
    pub claim: Claim,
}

/// A failed run to claim again at its instant: its final record says so (`retry_at_unix_ms`).
#[derive(Debug, Clone)]
pub(super) struct Retry {
    pub at: DateTime<Utc>,
    /// The stored final record and its version: the retry's claim overwrites exactly that.
    pub record: RunRecord,
    pub version: i32,
    /// A submission's run: what the job reads again.
    pub submission: Option<SubmissionInput>,
    /// Promised by an earlier owner and found in the ledger by this one (`ZKCRON_RESUMED=1`).
    pub resumed: bool,
}

impl Retry {
    /// The retry's job left the schedule: its record says the attempt was dropped.
    pub fn dropped(self) -> Action {
        let mut record = self.record;
        let dropped = format!(
            "attempt {} dropped: the job left the schedule",
            record.attempt + 1
        );
        record.retry_at_unix_ms = None;
        record.error = Some(match record.error.take() {
            Some(error) => format!("{error}; {dropped}"),
            None => dropped,
        });
        Action::Claims(ClaimAction::DropRetry {
            record,
            version: self.version,
        })
    }

    /// The item that claims the retry: its stored record again, at its version.
    pub fn into_item(self, now: DateTime<Utc>) -> Item {
        Item {
            tick: DateTime::from_timestamp_millis(self.record.scheduled_unix_ms).unwrap_or(now),
            reason: if self.resumed {
                FireReason::RetryResumed
            } else {
                FireReason::Retry
            },
            again: Some((self.record, self.version)),
            submission: self.submission,
            parents: Vec::new(),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Runs {
    alive: BTreeMap<String, Run>,
    /// Failed runs to claim again at their instant.
    retries: Vec<Retry>,
    /// Per job, its runs alive and retries waiting, kept as they come and go (`max_running`
    /// reads it for every input; see `claims`).
    open: HashMap<JobName, usize>,
    /// Per job, its runs alive (`alive_of`, asked for every claim that settles).
    alive_count: HashMap<JobName, usize>,
    /// Per job, its runs whose process has not ended (`unended_of_job`).
    unended_count: HashMap<JobName, usize>,
}

fn count_up(counts: &mut HashMap<JobName, usize>, job: &JobName) {
    *counts.entry(job.clone()).or_default() += 1;
}

fn count_down(counts: &mut HashMap<JobName, usize>, job: &JobName) {
    if let Some(count) = counts.get_mut(job) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(job);
        }
    }
}

impl Runs {
    pub fn started(
        &mut self,
        claim: &Claim,
        config: &Arc<JobConfig>,
        in_backlog: bool,
        submission: Option<SubmissionInput>,
        now: DateTime<Utc>,
    ) {
        let run = Run {
            job: claim.record.job.clone(),
            config: Arc::clone(config),
            in_backlog,
            finished: None,
            started_at: now,
            submission,
            claim: claim.clone(),
        };
        count_up(&mut self.open, &run.job);
        count_up(&mut self.alive_count, &run.job);
        count_up(&mut self.unended_count, &run.job);
        if let Some(old) = self.alive.insert(claim.record.run_id.clone(), run) {
            count_down(&mut self.open, &old.job);
            count_down(&mut self.alive_count, &old.job);
            if old.finished.is_none() {
                count_down(&mut self.unended_count, &old.job);
            }
        }
    }

    /// `job`'s runs alive here and retries waiting.
    pub fn open_of(&self, job: &JobName) -> usize {
        self.open.get(job).copied().unwrap_or(0)
    }

    /// The count kept against one made afresh (the tests check after every input).
    #[cfg(test)]
    pub fn counts_agree(&self) -> bool {
        let mut fresh: HashMap<JobName, usize> = HashMap::new();
        for job in self.open_jobs() {
            *fresh.entry(job.clone()).or_default() += 1;
        }
        let mut alive: HashMap<JobName, usize> = HashMap::new();
        let mut unended: HashMap<JobName, usize> = HashMap::new();
        for run in self.alive.values() {
            *alive.entry(run.job.clone()).or_default() += 1;
            if run.finished.is_none() {
                *unended.entry(run.job.clone()).or_default() += 1;
            }
        }
        fresh == self.open && alive == self.alive_count && unended == self.unended_count
    }

    pub fn ended(&mut self, finished: &Claim) {
        if let Some(run) = self.alive.get_mut(&finished.record.run_id) {
            if run.finished.is_none() {
                count_down(&mut self.unended_count, &run.job);
            }
            run.finished = Some(finished.clone());
        }
    }

    /// A run of `job` whose process has not ended is alive here.
    pub fn unended_of_job(&self, job: &JobName) -> bool {
        self.unended_count.contains_key(job)
    }

    /// The claims of the runs whose process has not ended, of `forbid` jobs, that hold no guard.
    pub fn unguarded_forbid(&self) -> Vec<Claim> {
        self.alive
            .values()
            .filter(|run| {
                run.finished.is_none()
                    && run.claim.guard.is_none()
                    && !run.claim.record.broadcast
                    && run.config.concurrency == Concurrency::Forbid
            })
            .map(|run| run.claim.clone())
            .collect()
    }

    /// Run `run_id` holds `guard` now; `false` when its process has ended (its final record
    /// is written without it) or it is gone.
    pub fn guard_taken(&mut self, run_id: &str, guard: &str) -> bool {
        match self.alive.get_mut(run_id) {
            Some(run) if run.finished.is_none() => {
                run.claim.guard = Some(guard.to_owned());
                true
            }
            _ => false,
        }
    }

    /// The payload of submission run `run_id` alive here, which its children's marks carry.
    pub fn payload_of(&self, run_id: &str) -> Option<Arc<Vec<u8>>> {
        let run = self.alive.get(run_id)?;
        Some(Arc::clone(&run.submission.as_ref()?.payload))
    }

    /// The guard run `run_id` holds, if any.
    pub fn guard_of(&self, run_id: &str) -> Option<&String> {
        self.alive.get(run_id)?.claim.guard.as_ref()
    }

    pub fn remove(&mut self, run_id: &str) -> Option<Run> {
        let run = self.alive.remove(run_id)?;
        count_down(&mut self.open, &run.job);
        count_down(&mut self.alive_count, &run.job);
        if run.finished.is_none() {
            count_down(&mut self.unended_count, &run.job);
        }
        Some(run)
    }

    pub fn len(&self) -> usize {
        self.alive.len()
    }

    /// A run of `job` is alive here (its record may still be being written).
    pub fn alive_of(&self, job: &JobName) -> bool {
        self.alive_count.contains_key(job)
    }

    /// When the oldest run of `job` alive here started.
    pub fn earliest_start_of(&self, job: &JobName) -> Option<DateTime<Utc>> {
        self.alive
            .values()
            .filter(|run| &run.job == job)
            .map(|run| run.started_at)
            .min()
    }

    pub fn alive_of_run(&self, run_id: &str) -> bool {
        self.alive.contains_key(run_id)
    }

    /// Runs of `job` whose process has not ended.
    pub fn unended_of<'a>(&'a self, job: &'a JobName) -> impl Iterator<Item = String> + 'a {
        self.alive
            .iter()
            .filter(move |(_, run)| &run.job == job && run.finished.is_none())
            .map(|(id, _)| id.clone())
    }

    /// Every run whose process has not ended, with its `on_lost`.
    pub fn unended(&self) -> Vec<(String, JobName, OnLost)> {
        self.alive
            .iter()
            .filter(|(_, run)| run.finished.is_none())
            .map(|(id, run)| (id.clone(), run.job.clone(), run.config.on_lost))
            .collect()
    }

    /// The job of every run alive and every retry waiting, one entry each.
    #[cfg(test)]
    pub fn open_jobs(&self) -> impl Iterator<Item = &JobName> + '_ {
        let alive = self.alive.values().map(|run| &run.job);
        alive.chain(self.retries.iter().map(|retry| &retry.record.job))
    }

    /// Whether run `run_id` is this node's own run of a broadcast tick: no lock change touches
    /// it, and no guard is taken for it.
    pub fn is_members(&self, run_id: &str) -> bool {
        self.alive
            .get(run_id)
            .is_some_and(|run| run.claim.record.broadcast)
    }

    /// This node's own runs of broadcast ticks alive here.
    pub fn members_alive(&self) -> Vec<String> {
        self.alive
            .iter()
            .filter(|(_, run)| run.claim.record.broadcast)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The job's configuration run `run_id` started with.
    pub fn config_of(&self, run_id: &str) -> Option<&Arc<JobConfig>> {
        Some(&self.alive.get(run_id)?.config)
    }

    pub fn alive_ids(&self) -> Vec<String> {
        self.unended().into_iter().map(|(id, _, _)| id).collect()
    }

    /// Tries a failed run again at the instant its final record promises.
    pub fn schedule_retry(&mut self, retry: Retry) {
        let record = &retry.record;
        tracing::info!(job = %record.job, run_id = record.run_id, attempt = record.attempt + 1, at = %retry.at, resumed = retry.resumed, "retry scheduled");
        count_up(&mut self.open, &retry.record.job);
        self.retries.push(retry);
    }

    /// A retry of `run_id` waits here already (a listing may show the record it was made from).
    pub fn retry_waits(&self, run_id: &str) -> bool {
        self.retries
            .iter()
            .any(|retry| retry.record.run_id == run_id)
    }

    /// When retries are due, but those of jobs `held` (paused): they wait for the resume.
    pub fn retry_deadlines<'a>(
        &'a self,
        held: impl Fn(&JobName) -> bool + 'a,
    ) -> impl Iterator<Item = DateTime<Utc>> + 'a {
        self.retries
            .iter()
            .filter(move |retry| !held(&retry.record.job))
            .map(|retry| retry.at)
    }

    /// The retries due by `now`, but those of jobs `held` (paused): they stay.
    pub fn take_due_retries(
        &mut self,
        now: DateTime<Utc>,
        held: impl Fn(&JobName) -> bool,
    ) -> Vec<Retry> {
        let (due, later) = std::mem::take(&mut self.retries)
            .into_iter()
            .partition(|retry| retry.at <= now && !held(&retry.record.job));
        self.retries = later;
        for retry in &due {
            count_down(&mut self.open, &retry.record.job);
        }
        due
    }

    /// The lock is gone or we are stopping: the retries waiting here are the next owner's to
    /// resume from the ledger, where each failed run's record says when.
    pub fn drop_retries(&mut self) {
        for retry in std::mem::take(&mut self.retries) {
            count_down(&mut self.open, &retry.record.job);
            tracing::info!(job = %retry.record.job, run_id = retry.record.run_id, attempt = retry.record.attempt + 1, "retry left to the next owner: its record says when it is due");
        }
    }
}

/// When a run that ended now with `record`'s attempt is tried again: after `retry_backoff`,
/// doubled per attempt up to `retry_backoff_max`; `None` when it is not (it did not fail, or no
/// attempt remains). A target that asked for a pause (`retry_after`: HTTP `Retry-After`) gets
/// it instead, held within the same bounds: no sooner than `retry_backoff`, no later than
/// `retry_backoff_max`.
pub(super) fn retry_at(
    record: &RunRecord,
    config: &JobConfig,
    retry_after: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if !retry_due(record, config.retries) {
        return None;
    }
    let (shortest, longest) = (
        config.retry_backoff,
        config.retry_backoff_max.max(config.retry_backoff),
    );
    let backoff = match retry_after {
        Some(asked) => asked.clamp(shortest, longest),
        None => shortest
            .saturating_mul(1 << record.attempt.saturating_sub(1).min(16))
            .min(longest),
    };
    let backoff = chrono::Duration::from_std(backoff).unwrap_or(chrono::Duration::MAX);
    Some(
        now.checked_add_signed(backoff)
            .unwrap_or(DateTime::<Utc>::MAX_UTC),
    )
}

/// Whether a finished run is tried again: it failed or timed out, and attempts remain.
pub(super) fn retry_due(record: &RunRecord, retries: u32) -> bool {
    matches!(record.status, RunStatus::Failed | RunStatus::TimedOut) && record.attempt <= retries
}

/// The record's end, from the runner's report; its output kept as `keep` says.
/// `claim`'s run ended with `report`: its final record, with the promise of a retry in the
/// same write as the failure, so whoever owns the lock at its time keeps it, this node or the
/// next (issue 24). `config`: its job's, if the job is still in the schedule.
pub(super) fn finished(
    claim: Claim,
    report: &RunReport,
    config: Option<&JobConfig>,
    now: DateTime<Utc>,
) -> Claim {
    let mut finished = claim;
    let keep = config.map_or(KeepOutput::Failed, |config| config.keep_output);
    finish_record(&mut finished.record, report, keep);
    finished.record.retry_at_unix_ms = config
        .and_then(|config| retry_at(&finished.record, config, report.retry_after, now))
        .map(|at| at.timestamp_millis());
    finished
}

pub(super) fn finish_record(record: &mut RunRecord, report: &RunReport, keep: KeepOutput) {
    let started = report.started_at.timestamp_millis();
    let duration = i64::try_from(report.duration.as_millis()).unwrap_or(i64::MAX);
    record.started_unix_ms = Some(started);
    record.finished_unix_ms = Some(started.saturating_add(duration));
    record.http_status = None;
    record.output = None;
    (record.status, record.exit_code, record.signal, record.error) = match &report.outcome {
        RunOutcome::Responded { status, .. } => {
            record.http_status = Some(*status);
            if report.outcome.succeeded() {
                (RunStatus::Succeeded, None, None, None)
            } else {
                let error = format!("answered HTTP {status}");
                (RunStatus::Failed, None, None, Some(error))
            }
        }
        RunOutcome::RequestFailed { error } => (RunStatus::Failed, None, None, Some(error.clone())),
        RunOutcome::Exited { code: 0 } => (RunStatus::Succeeded, Some(0), None, None),
        RunOutcome::Exited { code } => (RunStatus::Failed, Some(*code), None, None),
        RunOutcome::Signaled { signal } => (RunStatus::Failed, None, Some(*signal), None),
        RunOutcome::TimedOut => (RunStatus::TimedOut, None, None, None),
        RunOutcome::Cancelled => (RunStatus::Cancelled, None, None, None),
        RunOutcome::CancelledBeforeStart => {
            let why = "cancelled before its instant, so nothing of the job ran: the lock moved or the node stopped";
            (RunStatus::Missed, None, None, Some(why.to_owned()))
        }
        RunOutcome::FailedToStart { error } | RunOutcome::WaitFailed { error } => {
            (RunStatus::Failed, None, None, Some(error.clone()))
        }
    };
    let output = match &report.outcome {
        RunOutcome::Responded { body, .. } => body,
        _ => &report.output,
    };
    if !output.is_empty() && keep.keeps(record.status == RunStatus::Succeeded) {
        record.output = Some(output.clone());
    }
}
