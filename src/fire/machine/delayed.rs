//! Delayed submissions, the part of the fire machine that decides which pending submission is
//! claimed when (issue "Delayed one-off jobs"): one more input on the one claim path.
//!
//! Owns: the near horizon of pending submissions (the buckets due now or next, never all of
//! them), when to read the next bucket, which new submissions the watch reported are worth a
//! read, which past buckets to remove, and what a submission found too late becomes (a
//! `missed` record).
//! Must not: do I/O (bucket reads come in as [`DelayedInput::Scanned`]) or read a clock.
//!
//! [`DelayedInput::Scanned`]: super::protocol::DelayedInput::Scanned

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::protocol::{Action, DelayedAction, FireReason, Item, MISSED_AFTER, Me, Scanned, Wanted};
use crate::config::JobConfig;
use crate::delayed::submission::{AfterRun, DueBucket, Submission, SubmissionId};
use crate::ids::FencingToken;
use crate::ids::JobName;
use crate::run::SubmissionInput;
use crate::run::{ParentRun, RunRecord, RunStatus};

/// How far ahead of now the owner reads the due buckets: far enough that a bucket is in memory
/// before its claims go out (`claim_ahead`), near enough that little is held in memory.
pub const DELAYED_HORIZON: Duration = Duration::from_secs(2);
/// How far a scan reads on past the horizon while the buckets it meets are empty: an idle queue
/// is read a minute at a time in one round trip, not a second at a time (each read a wake of
/// the owner). What is submitted later into a bucket read already, the watch reports.
pub const LOOK_AHEAD: Duration = Duration::from_secs(60);
/// A failed bucket read is tried again after this long.
const SCAN_RETRY: Duration = Duration::from_secs(1);
/// A bucket this far in the past is removed once empty: late enough that a claim withdrawn at a
/// handoff, or a submitter's retry, no longer needs it.
const REMOVE_AFTER: Duration = Duration::from_secs(60);
/// Buckets offered for removal at once at most, a second apart, so that a burst of past buckets
/// never floods the ensemble.
const REMOVE_BATCH: usize = 10;

/// What a job may claim of its due submissions now: how many runs more it may open, and how
/// long before its due instant a submission is claimed (`claim_ahead`, or none where its claim
/// says `running`).
#[derive(Debug, Clone, Copy)]
pub(super) struct JobRoom {
    pub runs: usize,
    pub lead: chrono::Duration,
}

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
    /// A chained job's run after a submitted parent's: that run.
    after: Option<ParentRun>,
    /// The submitter's trace context.
    traceparent: Option<String>,
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
    /// Buckets known to exist, read by a scan or reported by the watch: each is offered for
    /// removal once [`REMOVE_AFTER`] past its end (then forgotten). Buckets not seen are not
    /// there: every bucket is read before it is due, and the watch reports what comes after.
    present: BTreeSet<DueBucket>,
    /// The driver's watch on the due buckets is set: a scan may read on past the horizon (what
    /// is submitted later into a bucket read, the watch reports). Kept across `start`/`stop`:
    /// the watch belongs to the session, which may begin before this node can fire.
    watching: bool,
    /// A full batch of removals was offered: the next waits until then (a second later).
    removals_paused_until: Option<DateTime<Utc>>,
    /// The last past day offered for removal.
    removed_day: Option<i64>,
}

impl DelayedQueue {
    /// This node can fire now: read everything pending from the oldest bucket.
    pub fn start(&mut self, now: DateTime<Utc>) {
        *self = Self {
            generation: self.generation + 1,
            from_oldest: true,
            since: Some(now),
            watching: self.watching,
            ..Self::default()
        };
    }

    /// This node can no longer fire: forget the horizon (the pending nodes stay in ZooKeeper).
    pub fn stop(&mut self) {
        *self = Self {
            generation: self.generation + 1,
            watching: self.watching,
            ..Self::default()
        };
    }

    /// The watch on the due buckets began (again), or could not be set: every bucket is read
    /// again, since what was submitted while no watch was set went unreported.
    pub fn watched(&mut self, watching: bool) {
        self.watching = watching;
        self.rescan();
    }

    /// The driver's watch on the due buckets is set: it reports each new submission.
    pub fn watching(&self) -> bool {
        self.watching
    }

    /// The wall clock stepped by `by`: the waits before a scan's retry and the next removal
    /// last as long as they said.
    pub fn clock_stepped(&mut self, by: chrono::Duration) {
        for at in [&mut self.retry_at, &mut self.removals_paused_until] {
            *at = at.map(|at| at + by);
        }
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
        lead_of: impl Fn(&JobName) -> Option<chrono::Duration>,
    ) -> Option<DateTime<Utc>> {
        let first_due = self
            .due
            .iter()
            .filter_map(|(job, queue)| {
                let (due_ms, _) = queue.keys().next()?;
                Some(DateTime::from_timestamp_millis(*due_ms)? - lead_of(job)?)
            })
            .min();
        first_due
            .into_iter()
            .chain(self.next_scan())
            .chain(self.next_removal())
            .min()
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

    /// When the next past bucket may be removed.
    fn next_removal(&self) -> Option<DateTime<Utc>> {
        let first = self.present.first()?;
        let removable = DateTime::from_timestamp_millis(first.start_ms() + 1000)? + remove_after();
        Some(
            self.removals_paused_until
                .map_or(removable, |paused| paused.max(removable)),
        )
    }
}

fn horizon() -> chrono::Duration {
    chrono::Duration::from_std(DELAYED_HORIZON).unwrap_or_default()
}

fn look_ahead() -> chrono::Duration {
    chrono::Duration::from_std(LOOK_AHEAD).unwrap_or_default()
}

fn remove_after() -> chrono::Duration {
    chrono::Duration::from_std(REMOVE_AFTER).unwrap_or_default()
}

/// What became of a pending submission read from ZooKeeper.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Considered {
    /// Queued for its time, kept for a job that comes back, or already in hand.
    Held,
    /// Older than its job's `starting_deadline`: recorded `missed`, due at this time; a
    /// chained submission's record names its parent's run (`parents`).
    Missed {
        due: DateTime<Utc>,
        parents: Vec<ParentRun>,
    },
}

impl DelayedQueue {
    /// Reads the next buckets when the horizon reaches them, and offers past buckets for
    /// removal. Called only while this node may fire and is not stopping.
    pub fn tick(&mut self, now: DateTime<Utc>, wanted: &Wanted, out: &mut Vec<Action>) {
        if self.next_scan().is_some_and(|at| at <= now) {
            let through = DueBucket::of((now + horizon()).timestamp_millis());
            let ahead_to = if self.watching {
                DueBucket::of((now + look_ahead()).timestamp_millis()).max(through)
            } else {
                through
            };
            self.scanning = Some(ahead_to);
            self.retry_at = None;
            let after = if self.from_oldest {
                None
            } else {
                self.read_through
            };
            out.push(Action::Delayed(DelayedAction::Scan {
                generation: self.generation,
                wanted: wanted.clone(),
                after,
                through,
                ahead_to,
                clean_before: now - remove_after(),
            }));
        }
        self.remove_past_buckets(now, out);
    }

    /// The jobs with submissions queued here.
    pub fn jobs_due(&self) -> impl Iterator<Item = &JobName> {
        self.due.keys()
    }

    /// Takes the submissions due by `now` plus their job's lead out of the queue, oldest first
    /// across jobs, each job up to its room (its `max_running` less its open runs), as the
    /// items to claim.
    pub fn take_due(
        &mut self,
        now: DateTime<Utc>,
        mut room: HashMap<JobName, JobRoom>,
    ) -> Vec<(JobName, Item)> {
        let mut taken = Vec::new();
        loop {
            let oldest = self
                .due
                .iter()
                .filter_map(|(job, queue)| {
                    let room = room.get(job).filter(|room| room.runs > 0)?;
                    let latest_due = (now + room.lead).timestamp_millis();
                    Some((queue.keys().next()?.0, job)).filter(|(due_ms, _)| *due_ms <= latest_due)
                })
                .min();
            let Some((_, job)) = oldest else {
                break;
            };
            let job = job.clone();
            let Some(queue) = self.due.get_mut(&job) else {
                break;
            };
            let Some(((due_ms, id), due)) = queue.pop_first() else {
                break;
            };
            if queue.is_empty() {
                self.due.remove(&job);
            }
            if let Some(at) = DateTime::from_timestamp_millis(due_ms) {
                if let Some(room) = room.get_mut(&job) {
                    room.runs -= 1;
                }
                taken.push((job, due.into_item(id, at)));
            }
        }
        taken
    }

    /// Offers the buckets known to exist that ended [`REMOVE_AFTER`] ago for removal, once
    /// each, and each past day once.
    fn remove_past_buckets(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let before = now - remove_after();
        if self.removals_paused_until.is_none_or(|until| until <= now) {
            self.removals_paused_until = None;
            for _ in 0..REMOVE_BATCH {
                let Some(first) = self.present.first().copied() else {
                    break;
                };
                if first.start_ms() + 1000 > before.timestamp_millis() {
                    break;
                }
                self.present.remove(&first);
                out.push(Action::Delayed(DelayedAction::RemoveEmptyBucket(first)));
            }
            if self.next_removal().is_some_and(|next| next <= now) {
                self.removals_paused_until = Some(now + chrono::Duration::seconds(1));
            }
        }
        let past_day = DueBucket::of(before.timestamp_millis()).day - 1;
        match self.removed_day {
            Some(removed) if removed >= past_day => {}
            // A node that begins to fire leaves the days before to the first scan, which
            // removes the empty ones it meets.
            None => self.removed_day = Some(past_day),
            Some(_) => {
                out.push(Action::Delayed(DelayedAction::RemoveEmptyDay(past_day)));
                self.removed_day = Some(past_day);
            }
        }
    }

    /// Answer to [`DelayedAction::Scan`]: the submissions found, to be considered, unless the
    /// answer is of an older scan or the read failed (tried again after [`SCAN_RETRY`]).
    pub fn scanned(
        &mut self,
        generation: u64,
        result: Result<Scanned, String>,
        now: DateTime<Utc>,
    ) -> Option<Vec<(SubmissionId, Submission)>> {
        if generation != self.generation {
            return None;
        }
        self.scanning = None;
        match result {
            Ok(scanned) => {
                self.read_through = Some(scanned.through);
                self.from_oldest = false;
                self.present.extend(scanned.present);
                Some(scanned.found)
            }
            Err(why) => {
                tracing::warn!(
                    error = why,
                    "cannot read the pending submissions; trying again"
                );
                self.retry_at =
                    Some(now + chrono::Duration::from_std(SCAN_RETRY).unwrap_or_default());
                None
            }
        }
    }

    /// The watch saw a new pending submission: worth a read if its bucket was read already or
    /// is being read (the scan may have listed it a moment before the submission came); later
    /// buckets are read when the horizon reaches them.
    pub fn created(&mut self, bucket: DueBucket, id: SubmissionId) -> Option<Action> {
        let covered = self.read_through.max(self.scanning);
        let read = covered.is_some_and(|t| bucket <= t);
        if read {
            self.present.insert(bucket);
        }
        // A known id is read again too: a new marker of it means a reschedule moved it.
        (read && self.reading.insert(id.clone()))
            .then_some(Action::Delayed(DelayedAction::ReadSubmission { id }))
    }

    /// Reads submission `id` again (its claim did not take it), unless a read of it is out.
    pub fn read_again(&mut self, id: SubmissionId) -> Option<Action> {
        self.reading
            .insert(id.clone())
            .then_some(Action::Delayed(DelayedAction::ReadSubmission { id }))
    }

    /// [`Self::read_again`], once `after` has passed.
    pub fn read_again_after(&mut self, id: SubmissionId, after: Duration) -> Option<Action> {
        self.reading.insert(id.clone()).then_some(Action::Delayed(
            DelayedAction::ReadSubmissionAfter { id, after },
        ))
    }

    /// Answer to [`DelayedAction::ReadSubmission`]: the submission to consider, if it is still there.
    /// A failed read has the buckets read again.
    pub fn read(
        &mut self,
        id: &SubmissionId,
        result: Result<Option<Submission>, String>,
    ) -> Option<Submission> {
        self.reading.remove(id);
        match result {
            Ok(found) => found,
            Err(why) => {
                tracing::warn!(id = %id, error = why, "cannot read a new submission; reading the buckets again");
                self.rescan();
                None
            }
        }
    }

    /// A pending submission read from ZooKeeper: queued, kept for a job that is back later, or
    /// missed. `claimed_due`: the due time of a claim of it that is out; `config`: its job's,
    /// if this node fires the job and it is enabled.
    pub fn consider(
        &mut self,
        id: SubmissionId,
        submission: Submission,
        claimed_due: Option<i64>,
        config: Option<&JobConfig>,
        now: DateTime<Utc>,
    ) -> Considered {
        if let Some(claimed_due) = claimed_due {
            if claimed_due != submission.due_unix_ms {
                self.moved.insert(id, submission);
            }
            return Considered::Held;
        }
        if self.known.contains(&id) && !self.unqueue_if_moved(&id, &submission) {
            return Considered::Held;
        }
        let Some(config) = config else {
            if self.kept_for.insert(submission.job.clone()) {
                tracing::warn!(job = %submission.job, id = %id, "pending submissions of a job that is not in the schedule (or disabled) are kept; they fire once it is back");
            }
            return Considered::Held;
        };
        let Some(due) = DateTime::from_timestamp_millis(submission.due_unix_ms) else {
            return Considered::Held;
        };
        let deadline = chrono::Duration::from_std(config.starting_deadline).unwrap_or_default();
        // A chained submission is due at its parent's instant, old by design: its lateness
        // counts from when its parent's end submitted it.
        let counted_from = match &submission.after {
            Some(_) => DateTime::from_timestamp_millis(submission.submitted_unix_ms).unwrap_or(due),
            None => due,
        };
        if counted_from + deadline < now {
            tracing::warn!(job = %submission.job, id = %id, %due, "submission missed: older than its job's starting_deadline");
            let parents = submission.after.and_then(|after| parent_run(after, &id));
            self.known.insert(id);
            return Considered::Missed {
                due,
                parents: parents.into_iter().collect(),
            };
        }
        // Resumed: it was waiting, already late, while no node could fire — not a submission
        // made with a past due time after this node began firing.
        let late_after = chrono::Duration::from_std(MISSED_AFTER).unwrap_or_default();
        let resumed = self.since.is_some_and(|since| {
            due + late_after < since && submission.submitted_unix_ms < since.timestamp_millis()
        });
        self.known.insert(id.clone());
        let after = submission.after.and_then(|after| parent_run(after, &id));
        self.due.entry(submission.job).or_default().insert(
            (submission.due_unix_ms, id),
            Due {
                payload: Arc::new(submission.payload),
                resumed,
                requested_by: submission.requested_by,
                marker_names_job: submission.marker_names_job,
                after,
                traceparent: submission.traceparent,
            },
        );
        Considered::Held
    }
}

/// The `missed` record of submission `id` of `job`, due at `due`, found past its deadline by
/// node `me` under its token; `named`: its marker names its job.
pub(super) fn missed_record(
    job: &JobName,
    id: &SubmissionId,
    due: DateTime<Utc>,
    named: bool,
    (me, token): (&Me, FencingToken),
    now: DateTime<Utc>,
) -> RunRecord {
    let node = (&me.node_id, me.ip.as_str());
    let due_ms = due.timestamp_millis();
    let mut record =
        RunRecord::claimed_submission(job, due_ms, id, node, token, now.timestamp_millis());
    record.marker_names_job = named;
    record.status = RunStatus::Missed;
    record.error = Some("beyond starting_deadline: no node could fire it in time".to_owned());
    record.missed_from_unix_ms = Some(record.scheduled_unix_ms);
    record.missed_ticks = Some(1);
    record
}

impl Due {
    /// The item that claims submission `id` at its due time `at`.
    fn into_item(self, id: SubmissionId, at: DateTime<Utc>) -> Item {
        let reason = if self.resumed {
            FireReason::CaughtUp
        } else if self.after.is_some() {
            FireReason::Chained
        } else if self.requested_by.is_some() {
            FireReason::Manual
        } else {
            FireReason::Submitted
        };
        Item {
            tick: at,
            reason,
            again: None,
            submission: Some(SubmissionInput {
                id: id.as_str().to_owned(),
                payload: self.payload,
                requested_by: self.requested_by,
                marker_names_job: self.marker_names_job,
                traceparent: self.traceparent.map(String::into_boxed_str),
            }),
            parents: self.after.into_iter().collect(),
        }
    }
}

/// The parent's run a chained submission names, as its record names it; `None` (logged) for a
/// status no record spells: the run then names no parent.
fn parent_run(after: AfterRun, id: &SubmissionId) -> Option<ParentRun> {
    let Some(status) = RunStatus::parse(&after.status) else {
        tracing::warn!(id = %id, status = after.status, "a chained submission names its parent's end in words no record uses; its run names no parent");
        return None;
    };
    Some(ParentRun {
        job: after.job,
        run_id: after.run_id,
        status,
        // A submitted parent's trace rides on its child's submission as its `traceparent`,
        // which the child's run span links to.
        trace: None,
    })
}

#[cfg(test)]
mod tests;
