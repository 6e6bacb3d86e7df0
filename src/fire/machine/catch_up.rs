//! Catch-up, the part of the fire machine that runs when a node starts being able to fire (it
//! acquired the lock, or ZooKeeper came back): resolve runs the previous owner left open
//! (`on_interrupted`), decide about ticks nobody fired (`misfire`, `starting_deadline`), and
//! record every gap as one `missed` record.
//!
//! Owns: which records are interrupted, which missed ticks start and in what order, the gaps'
//! reasons. A brand-new job (no records) never backfills.
//! Must not: do I/O (the listing comes in as [`JobRecords`]) or fire on-time ticks.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::JobRecords;
use super::{Action, FireMachine, FireReason, Item};
use crate::config::{Concurrency, JobConfig, Misfire, OnInterrupted};
use crate::delayed::submission::SubmissionId;
use crate::ids::{FencingToken, JobName, NodeId};
use crate::run::SubmissionInput;
use crate::run::{RunRecord, RunStatus};

/// How many of a job's newest records are read for runs left open.
pub const RESOLVE_WINDOW: usize = 10;
/// Ticks counted one by one in a gap; a longer outage is recorded with this as a lower bound.
const GAP_COUNT_LIMIT: u64 = 100_000;

/// One job's catch-up while it is being decided.
#[derive(Debug, Default)]
pub(super) struct CatchUp {
    /// The missed ticks to start, once the listing is in.
    planned: Option<Vec<Item>>,
    /// Interrupted records being marked; their reruns start first.
    marks_out: usize,
    reruns: Vec<Item>,
    /// The payloads of submissions whose runs may be rerun.
    payloads: HashMap<SubmissionId, Arc<Vec<u8>>>,
}

/// Ticks nobody fired: from `first` to `last`, `count` of them.
#[derive(Debug, Clone, Copy)]
struct Gap {
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    count: u64,
}

impl Gap {
    fn of(ticks: &[DateTime<Utc>]) -> Option<Self> {
        Some(Self {
            first: *ticks.first()?,
            last: *ticks.last()?,
            count: u64::try_from(ticks.len()).unwrap_or(u64::MAX),
        })
    }

    fn add(gap: &mut Option<Gap>, tick: DateTime<Utc>) {
        match gap {
            Some(gap) => {
                gap.last = tick;
                gap.count += 1;
            }
            None => {
                *gap = Some(Gap {
                    first: tick,
                    last: tick,
                    count: 1,
                })
            }
        }
    }
}

impl FireMachine {
    pub(super) fn records_listed(
        &mut self,
        job: &JobName,
        result: Result<JobRecords, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(token) = self.lock.token.filter(|_| self.lock.may_fire) else {
            return;
        };
        let Some(state) = self.jobs.get(job) else {
            return;
        };
        if state.catch_up.as_ref().is_none_or(|c| c.planned.is_some()) {
            return; // a listing for a catch-up that was dropped meanwhile
        }
        let config = Arc::clone(&state.config);
        let records = match result {
            Ok(records) => records,
            Err(why) => {
                let again = chrono::Duration::from_std(super::RELIST_AFTER).unwrap_or_default();
                tracing::warn!(job = %job, error = why, retry_in = ?super::RELIST_AFTER, "catch-up: cannot list runs");
                if let Some(state) = self.jobs.get_mut(job) {
                    state.catch_up = None;
                }
                self.relist_at.insert(job.clone(), now + again);
                return self.advance(job, now, out);
            }
        };
        self.streaks.learned(job, &records.newest);
        let mut marks = 0;
        let mut unstarted = Vec::new();
        // Runs of ours that never started, kept for this catch-up: taken over below.
        let not_started = self
            .jobs
            .get_mut(job)
            .map(|state| std::mem::take(&mut state.not_started))
            .unwrap_or_default();
        let kept = |record: &RunRecord| {
            not_started.iter().any(|item| {
                item.again
                    .as_ref()
                    .is_some_and(|(r, _)| r.run_id == record.run_id)
            })
        };
        for (record, version) in &records.newest {
            if record.status.is_final()
                || record.fencing_token >= token
                || self.runs.alive_of_run(&record.run_id)
                || kept(record)
            {
                continue;
            }
            if let (Some(id), RunStatus::Claimed) = (&record.submission_id, record.status) {
                // A submission's run is recorded `running` before its process starts, so a
                // record still `claimed` never ran: it is taken over, whatever on_interrupted
                // says. The claim's compare-and-set fences a previous owner that wakes up.
                match records.payloads.get(id) {
                    Some(payload) => unstarted.push(Item {
                        tick: DateTime::from_timestamp_millis(record.scheduled_unix_ms)
                            .unwrap_or(now),
                        reason: FireReason::CaughtUp,
                        again: Some((record.clone(), *version)),
                        submission: Some(SubmissionInput {
                            id: id.as_str().to_owned(),
                            payload: Arc::clone(payload),
                            requested_by: record.requested_by.clone(),
                            marker_names_job: record.marker_names_job,
                        }),
                    }),
                    None => {
                        tracing::warn!(job = %job, id = %id, "claimed submission not taken over: its submission node is gone");
                    }
                }
                continue;
            }
            if records.guard_holder.as_deref() == Some(record.run_id.as_str())
                || self.may_still_run(&config, record, &records.live_members)
            {
                continue;
            }
            let mut marked = record.clone();
            marked.status = RunStatus::Interrupted;
            marked.error = Some(format!(
                "node {} lost the lock before the run ended",
                record.node_id
            ));
            marks += 1;
            out.push(Action::MarkInterrupted {
                record: marked,
                version: *version,
                closes: config.on_interrupted != OnInterrupted::Rerun,
            });
        }
        self.resume_retries(&config, &records, token, now, out);
        let latest = records.ticks.iter().copied().max();
        let planned = self.plan_missed(&config, latest, now, out);
        if let (Some(state), Some(latest)) = (
            self.jobs.get_mut(job),
            latest.and_then(DateTime::from_timestamp_millis),
        ) {
            state.raise_newest_tick(latest);
        }
        let Some(catch_up) = self.jobs.get_mut(job).and_then(|s| s.catch_up.as_mut()) else {
            return;
        };
        catch_up.planned = Some(planned);
        catch_up.payloads = records.payloads;
        catch_up.reruns.extend(not_started);
        catch_up.reruns.extend(unstarted);
        catch_up.marks_out += marks;
        if catch_up.marks_out == 0 {
            self.catch_up_decided(job, now, out);
        }
    }

    /// Retries that an earlier owner promised in a failed run's record (`retry_at_unix_ms`): kept
    /// at their time as the runs' next attempts, through the same fenced claim, so each attempt
    /// runs once whoever owns the lock then (issue 24). One whose time is older than the job's
    /// `starting_deadline` is recorded missed instead.
    fn resume_retries(
        &mut self,
        config: &Arc<JobConfig>,
        records: &JobRecords,
        token: FencingToken,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let deadline = chrono::Duration::from_std(config.starting_deadline).unwrap_or_default();
        for (record, version) in &records.newest {
            let Some(at) = record
                .retry_at_unix_ms
                .and_then(DateTime::from_timestamp_millis)
            else {
                continue;
            };
            if !matches!(record.status, RunStatus::Failed | RunStatus::TimedOut)
                || self.runs.retry_waits(&record.run_id)
                || self.runs.alive_of_run(&record.run_id)
            {
                continue;
            }
            let submission = match &record.submission_id {
                None => None,
                Some(id) => match records.payloads.get(id) {
                    Some(payload) => Some(SubmissionInput {
                        id: id.as_str().to_owned(),
                        payload: Arc::clone(payload),
                        requested_by: record.requested_by.clone(),
                        marker_names_job: record.marker_names_job,
                    }),
                    None => {
                        tracing::warn!(job = %record.job, id = %id, "retry not resumed: its submission node is gone");
                        continue;
                    }
                },
            };
            // A submission's retry is a promise to its submitter: kept however late. A tick's
            // is held to the job's starting_deadline, like the tick itself.
            if record.submission_id.is_none() && at + deadline < now {
                tracing::warn!(job = %record.job, run_id = record.run_id, attempt = record.attempt + 1, due = %at, "retry missed: older than the job's starting_deadline");
                let me = (&self.me.node_id, self.me.ip.as_str());
                let mut missed = record.next_attempt(me, token, now.timestamp_millis());
                missed.status = RunStatus::Missed;
                missed.error = Some(format!(
                    "attempt {} (a retry due at {at}) was past its starting_deadline when a node could start it",
                    missed.attempt
                ));
                missed.missed_from_unix_ms = Some(missed.scheduled_unix_ms);
                missed.missed_ticks = Some(1);
                self.claim_record_again(config, missed, *version, out);
                continue;
            }
            self.runs.schedule_retry(super::runs::Retry {
                at,
                record: record.clone(),
                version: *version,
                submission,
                resumed: true,
            });
        }
    }

    /// An open record of an unguarded job whose node is still a live member may be finishing
    /// (`on_lost = finish`); for a guarded job the guard is the proof, and our own earlier
    /// process is gone.
    fn may_still_run(&self, config: &JobConfig, record: &RunRecord, live: &[NodeId]) -> bool {
        config.concurrency != Concurrency::Forbid
            && record.node_id != self.me.node_id
            && live.contains(&record.node_id)
    }

    pub(super) fn marked(
        &mut self,
        record: RunRecord,
        result: Result<i32, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let job = record.job.clone();
        let Some(state) = self.jobs.get_mut(&job) else {
            return;
        };
        let rerun = state.config.on_interrupted == OnInterrupted::Rerun;
        let Some(catch_up) = state.catch_up.as_mut() else {
            return;
        };
        catch_up.marks_out = catch_up.marks_out.saturating_sub(1);
        let mut stored = None;
        match result {
            Ok(version) => {
                tracing::warn!(job = %job, run_id = record.run_id, node = %record.node_id, "run interrupted by the loss of its owner");
                let told = record.clone();
                let submission = match &record.submission_id {
                    None => Ok(None),
                    Some(id) => match catch_up.payloads.get(id) {
                        Some(payload) => Ok(Some(SubmissionInput {
                            id: id.as_str().to_owned(),
                            payload: Arc::clone(payload),
                            requested_by: record.requested_by.clone(),
                            marker_names_job: record.marker_names_job,
                        })),
                        None => Err(id.clone()),
                    },
                };
                stored = Some((told, rerun && submission.is_ok()));
                match (rerun, submission) {
                    (true, Ok(submission)) => {
                        let tick = DateTime::from_timestamp_millis(record.scheduled_unix_ms)
                            .unwrap_or(now);
                        catch_up.reruns.push(Item {
                            tick,
                            reason: FireReason::Rerun,
                            again: Some((record, version)),
                            submission,
                        });
                    }
                    (true, Err(id)) => {
                        tracing::warn!(job = %job, id = %id, "interrupted submission not rerun: its submission node is gone");
                    }
                    (false, _) => {}
                }
            }
            Err(why) => {
                tracing::warn!(job = %job, run_id = record.run_id, error = why, "interrupted run not marked (the record changed meanwhile)");
            }
        }
        let decided = catch_up.marks_out == 0 && catch_up.planned.is_some();
        if let Some((record, again)) = stored {
            self.tell(&record, again, out);
        }
        if decided {
            self.catch_up_decided(&job, now, out);
        }
    }

    /// Everything is known: reruns first, then missed ticks oldest first, then the ticks held
    /// behind them.
    fn catch_up_decided(&mut self, job: &JobName, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(state) = self.jobs.get_mut(job) else {
            return;
        };
        let Some(mut catch_up) = state.catch_up.take() else {
            return;
        };
        catch_up.reruns.sort_by_key(|item| item.tick);
        for item in catch_up.reruns {
            tracing::info!(job = %job, tick = %item.tick, "rerunning the interrupted run");
            state.backlog.push_back(item);
        }
        state.backlog.extend(catch_up.planned.into_iter().flatten());
        self.advance(job, now, out);
    }

    /// The ticks after the job's latest record that nobody fired, and before the first tick this
    /// node handles itself: which start (per `misfire`, within `starting_deadline`), and one
    /// `missed` record per gap for the others.
    fn plan_missed(
        &mut self,
        config: &Arc<JobConfig>,
        latest_ms: Option<i64>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> Vec<Item> {
        let name = &config.spec.name;
        // A brand-new job has no record: nothing was missed, nothing backfills.
        let Some(latest) = latest_ms.and_then(DateTime::from_timestamp_millis) else {
            return Vec::new();
        };
        let Some(state) = self.jobs.get(name) else {
            return Vec::new();
        };
        // A missed tick older than one already started here is covered by it.
        let after = state
            .newest_tick
            .map_or(latest, |started| started.max(latest));
        let first_handled = state
            .held
            .iter()
            .map(|item| item.tick)
            .chain(self.queue.next_of(name))
            .min();
        let horizon = chrono::Duration::from_std(config.starting_deadline)
            .ok()
            .and_then(|deadline| now.checked_sub_signed(deadline))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut beyond: Option<Gap> = None;
        let mut within = Vec::new();
        let mut cursor = after;
        while let Some(next) = config
            .next_tick_after(cursor)
            .filter(|next| *next <= now && first_handled.is_none_or(|first| *next < first))
        {
            cursor = next;
            if next >= horizon {
                within.push(next);
                continue;
            }
            Gap::add(&mut beyond, next);
            if beyond.is_some_and(|gap| gap.count >= GAP_COUNT_LIMIT) {
                // A very long outage: count no further; the record says "at least".
                cursor = cursor.max(horizon - chrono::Duration::milliseconds(1));
            }
        }
        if let Some(gap) = beyond {
            let cause = self.gap_cause(gap);
            let deadline = humantime::format_duration(config.starting_deadline);
            let at_least = if gap.count >= GAP_COUNT_LIMIT {
                "at least "
            } else {
                ""
            };
            let why = format!("{cause}; {at_least}older than starting_deadline ({deadline})");
            self.record_gap(config, gap, &why, now, out);
        }
        let Some(gap) = Gap::of(&within) else {
            return Vec::new();
        };
        let cause = self.gap_cause(gap);
        let start = match config.misfire {
            Misfire::Skip => {
                tracing::info!(job = %name, missed = within.len(), "missed ticks skipped (misfire = skip)");
                let why = format!("{cause}; not caught up (misfire = skip)");
                self.record_gap(config, gap, &why, now, out);
                return Vec::new();
            }
            Misfire::RunOnce => {
                let last = within.split_off(within.len() - 1);
                if let Some(gap) = Gap::of(&within) {
                    let why =
                        format!("{cause}; only the latest missed tick ran (misfire = run_once)");
                    self.record_gap(config, gap, &why, now, out);
                }
                last
            }
            Misfire::RunAll => within,
        };
        tracing::info!(job = %name, ticks = start.len(), policy = ?config.misfire, "catching up missed ticks");
        start
            .into_iter()
            .map(|tick| Item {
                submission: None,
                tick,
                reason: FireReason::CaughtUp,
                again: None,
            })
            .collect()
    }

    /// Why nobody fired a gap: this node was cut off from ZooKeeper during it, or no node owned
    /// the lock (the owner died and the takeover delay ran).
    fn gap_cause(&self, gap: Gap) -> &'static str {
        match self.outage {
            Some((from, until)) if from <= gap.last && until.is_none_or(|u| u >= gap.first) => {
                "zookeeper was unreachable"
            }
            _ => "no node owned the lock",
        }
    }

    /// A tick popped long after its time while this node owned the lock: it was stopped or
    /// starved. The gap runs to the last tick before now (the queue skips past them).
    pub(super) fn record_stalled_gap(
        &mut self,
        config: &Arc<JobConfig>,
        tick: DateTime<Utc>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let mut gap = Gap {
            first: tick,
            last: tick,
            count: 1,
        };
        while let Some(next) = config.next_tick_after(gap.last).filter(|t| *t <= now) {
            if gap.count >= GAP_COUNT_LIMIT {
                break;
            }
            gap.last = next;
            gap.count += 1;
        }
        let why = "this node was stalled past the ticks (a frozen process or an overloaded host)";
        self.record_gap(config, gap, why, now, out);
    }

    /// Ticks held behind catch-up that it delayed past the late-tick rule.
    pub(super) fn record_late_held(
        &mut self,
        config: &Arc<JobConfig>,
        ticks: &[DateTime<Utc>],
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if let Some(gap) = Gap::of(ticks) {
            let why = "catch-up before them ran past their time";
            self.record_gap(config, gap, why, now, out);
        }
    }

    /// One `missed` record for the gap, named by its last tick (so the job's progress is right
    /// for the next catch-up), written through the fenced claim.
    fn record_gap(
        &mut self,
        config: &Arc<JobConfig>,
        gap: Gap,
        why: &str,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(token) = self.lock.token else {
            return;
        };
        tracing::info!(job = %config.spec.name, from = %gap.first, to = %gap.last, ticks = gap.count, reason = why, "missed ticks recorded");
        let me = (&self.me.node_id, self.me.ip.as_str());
        let mut record = RunRecord::claimed(
            &config.spec.name,
            gap.last.timestamp_millis(),
            me,
            token,
            now.timestamp_millis(),
        );
        record.status = RunStatus::Missed;
        record.error = Some(why.to_owned());
        record.missed_from_unix_ms = Some(gap.first.timestamp_millis());
        record.missed_ticks = Some(gap.count);
        self.claim_record_only(config, record, out);
    }
}
