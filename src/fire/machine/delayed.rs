//! Delayed submissions, the part of the fire machine that decides which pending submission is
//! claimed when (issue "Delayed one-off jobs"): one more input on the one claim path.
//!
//! Owns: the near horizon of pending submissions (the buckets due now or next, never all of
//! them), when to read the next bucket, which new submissions the watch reported are worth a
//! read, and what a submission found too late becomes (a `missed` record).
//! Must not: do I/O (bucket reads come in as [`Input::DelayedScanned`]) or read a clock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Action, FireMachine, FireReason, Item, MISSED_AFTER};
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::ids::JobName;
use crate::run::SubmissionInput;
use crate::run::{RunRecord, RunStatus};

/// How far ahead of now the owner reads the due buckets: far enough that a bucket is in memory
/// before its claims go out (`claim_ahead`), near enough that little is held in memory.
pub const DELAYED_HORIZON: Duration = Duration::from_secs(2);
/// A failed bucket read is tried again after this long.
const SCAN_RETRY: Duration = Duration::from_secs(1);
/// A bucket this far in the past is removed once empty: late enough that a claim withdrawn at a
/// handoff, or a submitter's retry, no longer needs it.
const REMOVE_AFTER: Duration = Duration::from_secs(60);
/// Buckets offered for removal per tick at most, so a long outage never floods the ensemble.
const REMOVE_BATCH: usize = 10;

/// A pending submission the machine will claim at its time.
#[derive(Debug, Clone)]
struct Due {
    payload: Arc<Vec<u8>>,
    /// Submitted, and overdue, before this node started being able to fire: started with
    /// `ZKCRON_RESUMED=1`.
    resumed: bool,
    /// A manual trigger: who asked.
    requested_by: Option<String>,
    /// Its marker names its job: the claim deletes (a withdraw restores) that name.
    marker_names_job: bool,
}

/// The near horizon of pending submissions.
#[derive(Debug, Default)]
pub(super) struct DelayedQueue {
    /// By job, each in due order: a job at its `max_running` holds back only its own.
    due: HashMap<JobName, BTreeMap<(i64, SubmissionId), Due>>,
    /// Ids queued here, or whose claim is out: the watch and a scan never add one twice. An id
    /// leaves once its claim is answered — the claim deleted its pending marker, so the id can
    /// come back only as a new submission (its record pruned, the id free again), which must be
    /// read, not ignored (issue 24); and the set stays as small as what is in flight.
    known: HashSet<SubmissionId>,
    /// Ids the watch reported, being read.
    reading: HashSet<SubmissionId>,
    /// Submissions a reschedule moved while a claim of their old due time was out: that claim
    /// finds no marker to take, and then each is queued where it is now.
    moved: HashMap<SubmissionId, Submission>,
    /// Every bucket up to this one has been read since this node could fire.
    read_through: Option<DueBucket>,
    /// A scan is out, reading through this bucket; answers of older scans (`generation`) are
    /// dropped.
    scanning: Option<DueBucket>,
    generation: u64,
    /// The next scan starts from the oldest bucket (after an acquisition, a reconnect, a reload
    /// or a lost read), not after `read_through`.
    from_oldest: bool,
    retry_at: Option<DateTime<Utc>>,
    /// When this node started being able to fire: what was due before it is resumed.
    since: Option<DateTime<Utc>>,
    /// Jobs whose pending submissions were reported as kept, so the log says it once.
    kept_for: HashSet<JobName>,
    /// Past buckets offered for removal up to this one.
    removed_through: Option<DueBucket>,
}

impl DelayedQueue {
    /// This node can fire now: read everything pending from the oldest bucket.
    pub fn start(&mut self, now: DateTime<Utc>) {
        *self = Self {
            generation: self.generation + 1,
            from_oldest: true,
            since: Some(now),
            ..Self::default()
        };
    }

    /// This node can no longer fire: forget the horizon (the pending nodes stay in ZooKeeper).
    pub fn stop(&mut self) {
        *self = Self {
            generation: self.generation + 1,
            ..Self::default()
        };
    }

    /// The claim of submission `id` was answered; `lost`: its marker was gone. What a
    /// reschedule moved meanwhile, to be considered anew.
    pub fn claim_answered(&mut self, id: &SubmissionId, lost: bool) -> Option<Submission> {
        self.known.remove(id);
        let moved = self.moved.remove(id);
        moved.filter(|_| lost)
    }

    /// Takes `id` out of the queue if it waits there for another due time than `submission`'s
    /// (a reschedule moved it); false when it is not queued, or queued for that time.
    fn unqueue_if_moved(&mut self, id: &SubmissionId, submission: &Submission) -> bool {
        let Some(queued) = self.due.get_mut(&submission.job) else {
            return false;
        };
        let Some(key) = queued.keys().find(|(_, queued)| queued == id).cloned() else {
            return false;
        };
        if key.0 == submission.due_unix_ms {
            return false;
        }
        queued.remove(&key);
        true
    }

    /// Read again from the oldest bucket at the next chance (a reload may bring jobs back).
    pub fn rescan(&mut self) {
        if self.since.is_some() {
            self.from_oldest = true;
            self.read_through = None;
            self.kept_for.clear();
            // The scan finds them again; claims out are told apart by the machine's claims.
            self.due.clear();
            self.known.clear();
            // A scan still out answers for the old view: dropped, and a new one goes at once.
            self.generation += 1;
            self.scanning = None;
            self.retry_at = None;
        }
    }

    /// When the machine needs a tick for submissions; `has_room(job)`: the job is below its
    /// `max_running` (a full job is woken by the end of one of its runs, not by a deadline).
    pub fn next_deadline(
        &self,
        claim_ahead: chrono::Duration,
        has_room: impl Fn(&JobName) -> bool,
    ) -> Option<DateTime<Utc>> {
        let first_due = self
            .due
            .iter()
            .filter(|(job, _)| has_room(job))
            .filter_map(|(_, queue)| queue.keys().next())
            .filter_map(|(ms, _)| DateTime::from_timestamp_millis(*ms))
            .map(|due| due - claim_ahead)
            .min();
        first_due.into_iter().chain(self.next_scan()).min()
    }

    /// Submissions held in memory, due now or within the horizon.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.due.values().map(BTreeMap::len).sum()
    }

    fn next_scan(&self) -> Option<DateTime<Utc>> {
        if self.since.is_none() || self.scanning.is_some() {
            return None;
        }
        if let Some(retry) = self.retry_at {
            return Some(retry);
        }
        match self.read_through {
            // The next bucket comes within the horizon as soon as this one ends minus it.
            Some(read) => {
                DateTime::from_timestamp_millis(read.start_ms() + 1000).map(|end| end - horizon())
            }
            None => self.since,
        }
    }
}

fn horizon() -> chrono::Duration {
    chrono::Duration::from_std(DELAYED_HORIZON).unwrap_or_default()
}

fn remove_after() -> chrono::Duration {
    chrono::Duration::from_std(REMOVE_AFTER).unwrap_or_default()
}

impl FireMachine {
    /// Reads the next buckets when the horizon reaches them, and claims what is due.
    pub(super) fn delayed_tick(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        if self.delayed.next_scan().is_some_and(|at| at <= now) {
            let queue = &mut self.delayed;
            let through = DueBucket::of((now + horizon()).timestamp_millis());
            queue.scanning = Some(through);
            queue.retry_at = None;
            let after = if queue.from_oldest {
                None
            } else {
                queue.read_through
            };
            out.push(Action::ScanDelayed {
                generation: queue.generation,
                wanted: self.wanted.clone(),
                after,
                through,
                clean_before: now - remove_after(),
            });
        }
        self.remove_past_buckets(now, out);
        self.claim_due_submissions(now, out);
    }

    /// Claims the submissions that are due, oldest first across jobs, each job up to its
    /// `max_running`.
    pub(super) fn claim_due_submissions(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() || self.delayed.due.is_empty() {
            return;
        }
        let latest_due = (now + self.claim_ahead).timestamp_millis();
        let mut room: HashMap<JobName, usize> = self
            .delayed
            .due
            .keys()
            .filter_map(|job| {
                // A paused job's submissions stay pending until it is resumed.
                let max = if self.steering.paused(job) {
                    0
                } else {
                    self.jobs.get(job)?.config.max_running
                };
                Some((job.clone(), max.saturating_sub(self.open_runs_of(job))))
            })
            .collect();
        loop {
            let oldest = self
                .delayed
                .due
                .iter()
                .filter(|(job, _)| room.get(*job).is_some_and(|room| *room > 0))
                .filter_map(|(job, queue)| Some((queue.keys().next()?.0, job)))
                .filter(|(due_ms, _)| *due_ms <= latest_due)
                .min();
            let Some((_, job)) = oldest else {
                break;
            };
            let job = job.clone();
            let Some(queue) = self.delayed.due.get_mut(&job) else {
                break;
            };
            let Some(((due_ms, id), due)) = queue.pop_first() else {
                break;
            };
            if queue.is_empty() {
                self.delayed.due.remove(&job);
            }
            if let Some(at) = DateTime::from_timestamp_millis(due_ms) {
                self.claim_submission(&job, id, at, due, now, out);
                if let Some(room) = room.get_mut(&job) {
                    *room -= 1;
                }
            }
        }
    }

    /// Offers every bucket second that has passed [`REMOVE_AFTER`] for removal, once each.
    fn remove_past_buckets(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let last = DueBucket::of((now - remove_after()).timestamp_millis());
        let queue = &mut self.delayed;
        let mut next = match queue.removed_through {
            Some(done) => DueBucket::of(done.start_ms() + 1000),
            None => last,
        };
        for _ in 0..REMOVE_BATCH {
            if next > last {
                break;
            }
            out.push(Action::RemoveEmptyBucket(next));
            queue.removed_through = Some(next);
            next = DueBucket::of(next.start_ms() + 1000);
        }
    }

    /// Answer to [`Action::ScanDelayed`].
    pub(super) fn delayed_scanned(
        &mut self,
        generation: u64,
        through: DueBucket,
        result: Result<Vec<(SubmissionId, Submission)>, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if generation != self.delayed.generation || !self.lock.may_fire {
            return;
        }
        self.delayed.scanning = None;
        match result {
            Ok(found) => {
                self.delayed.read_through = Some(through);
                self.delayed.from_oldest = false;
                for (id, submission) in found {
                    self.consider(id, submission, now, out);
                }
                self.delayed_tick(now, out);
            }
            Err(why) => {
                tracing::warn!(
                    error = why,
                    "cannot read the pending submissions; trying again"
                );
                self.delayed.retry_at =
                    Some(now + chrono::Duration::from_std(SCAN_RETRY).unwrap_or_default());
            }
        }
    }

    /// The watch saw a new pending submission: worth a read if its bucket was read already or
    /// is being read (the scan may have listed it a moment before the submission came); later
    /// buckets are read when the horizon reaches them.
    pub(super) fn submission_created(
        &mut self,
        bucket: DueBucket,
        id: SubmissionId,
        job: Option<JobName>,
        out: &mut Vec<Action>,
    ) {
        if !self.wanted.reads(job.as_ref()) {
            return;
        }
        let queue = &mut self.delayed;
        let covered = queue.read_through.max(queue.scanning);
        let read = covered.is_some_and(|t| bucket <= t);
        // A known id is read again too: a new marker of it means a reschedule moved it.
        if self.lock.may_fire && read && queue.reading.insert(id.clone()) {
            out.push(Action::ReadSubmission { id });
        }
    }

    /// Answer to [`Action::ReadSubmission`].
    pub(super) fn submission_read(
        &mut self,
        id: SubmissionId,
        result: Result<Option<Submission>, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        self.delayed.reading.remove(&id);
        match result {
            Ok(Some(submission)) if self.lock.may_fire => {
                self.consider(id, submission, now, out);
                self.delayed_tick(now, out);
            }
            Ok(_) => {}
            Err(why) => {
                tracing::warn!(id = %id, error = why, "cannot read a new submission; reading the buckets again");
                self.delayed.rescan();
            }
        }
    }

    /// A pending submission read from ZooKeeper: queue it, keep it for a job that is back
    /// later, or record it missed.
    pub(super) fn consider(
        &mut self,
        id: SubmissionId,
        submission: Submission,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if self.elsewhere.contains(&submission.job) {
            return;
        }
        if self.claims_submission(&id) {
            if self.claimed_due(&id) != Some(submission.due_unix_ms) {
                self.delayed.moved.insert(id, submission);
            }
            return;
        }
        if self.delayed.known.contains(&id) && !self.delayed.unqueue_if_moved(&id, &submission) {
            return;
        }
        let Some(config) = self
            .jobs
            .get(&submission.job)
            .map(|state| Arc::clone(&state.config))
            .filter(|config| config.enabled)
        else {
            if self.delayed.kept_for.insert(submission.job.clone()) {
                tracing::warn!(job = %submission.job, id = %id, "pending submissions of a job that is not in the schedule (or disabled) are kept; they fire once it is back");
            }
            return;
        };
        let Some(due) = DateTime::from_timestamp_millis(submission.due_unix_ms) else {
            return;
        };
        let deadline = chrono::Duration::from_std(config.starting_deadline).unwrap_or_default();
        if due + deadline < now {
            tracing::warn!(job = %submission.job, id = %id, %due, "submission missed: older than its job's starting_deadline");
            self.delayed.known.insert(id.clone());
            let named = submission.marker_names_job;
            let record = self.submission_record(&submission.job, &id, due, now, |record| {
                record.marker_names_job = named;
                record.status = RunStatus::Missed;
                record.error =
                    Some("beyond starting_deadline: no node could fire it in time".to_owned());
                record.missed_from_unix_ms = Some(record.scheduled_unix_ms);
                record.missed_ticks = Some(1);
            });
            if let Some(record) = record {
                self.claim_record_only(&config, record, out);
            }
            return;
        }
        // Resumed: it was waiting, already late, while no node could fire — not a submission
        // made with a past due time after this node began firing.
        let late_after = chrono::Duration::from_std(MISSED_AFTER).unwrap_or_default();
        let resumed = self.delayed.since.is_some_and(|since| {
            due + late_after < since && submission.submitted_unix_ms < since.timestamp_millis()
        });
        self.delayed.known.insert(id.clone());
        self.delayed.due.entry(submission.job).or_default().insert(
            (submission.due_unix_ms, id),
            Due {
                payload: Arc::new(submission.payload),
                resumed,
                requested_by: submission.requested_by,
                marker_names_job: submission.marker_names_job,
            },
        );
    }

    fn claims_submission(&self, id: &SubmissionId) -> bool {
        self.claims.holds_submission(id.as_str())
    }

    /// The due time of the claim of submission `id` that is out.
    fn claimed_due(&self, id: &SubmissionId) -> Option<i64> {
        self.claims
            .values()
            .find(|pending| {
                pending
                    .submission
                    .as_ref()
                    .is_some_and(|s| s.id == id.as_str())
            })
            .map(|pending| pending.tick.timestamp_millis())
    }

    /// A fresh record of submission `id` under our current token, shaped by `edit`.
    fn submission_record(
        &self,
        job: &JobName,
        id: &SubmissionId,
        due: DateTime<Utc>,
        now: DateTime<Utc>,
        edit: impl FnOnce(&mut RunRecord),
    ) -> Option<RunRecord> {
        let token = self.lock.token?;
        let me = (&self.me.node_id, self.me.ip.as_str());
        let mut record = RunRecord::claimed_submission(
            job,
            due.timestamp_millis(),
            id,
            me,
            token,
            now.timestamp_millis(),
        );
        edit(&mut record);
        Some(record)
    }

    fn claim_submission(
        &mut self,
        job: &JobName,
        id: SubmissionId,
        at: DateTime<Utc>,
        due: Due,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let reason = if due.resumed {
            FireReason::CaughtUp
        } else if due.requested_by.is_some() {
            FireReason::Manual
        } else {
            FireReason::Submitted
        };
        let item = Item {
            tick: at,
            reason,
            again: None,
            submission: Some(SubmissionInput {
                id: id.as_str().to_owned(),
                payload: due.payload,
                requested_by: due.requested_by,
                marker_names_job: due.marker_names_job,
            }),
        };
        self.claim_item(job, item, false, now, out);
    }
}
