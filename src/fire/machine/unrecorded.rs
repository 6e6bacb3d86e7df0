//! Ticks whose `missed` or `skipped` record the ledger did not take — a quota refused the
//! create, the connection was lost and the read-back found nothing — kept and written again
//! once writes go through, so that no tick is left neither run nor recorded (issue 53: a
//! record-only claim that failed used to be dropped with a warning).
//!
//! A job's `missed` ticks owed in a row are one gap, written as one record named by its last
//! tick, as catch-up writes a gap; a gap is never stretched over a tick of the job claimed
//! since, which would then read as both run and missed. The records go again at once after any
//! claim of this node went through (writes are taken again), and otherwise after a doubling
//! backoff, for as long as this node may fire. A node that loses the lock leaves to the next
//! owner's catch-up what it will find — every tick after the job's newest record — and keeps
//! the ticks a later claim of its own hides behind that record, for its own next turn as owner
//! (issue 53's soak: a claim unanswered, a later tick claimed once the session answered again,
//! the lock lost, and the first tick's `missed` record dropped for want of a token). The next
//! owner's catch-up records them too, as holes behind the newest record, for when this node
//! never owns the lock again; whichever writes first, the other's create finds the record.
//!
//! Owns: the owed records and when they go again. Must not: send anything (the claim path
//! does) or decide what a tick is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use crate::config::JobConfig;
use crate::ids::{FencingToken, JobName};
use crate::run::{RunRecord, RunStatus};

/// The first wait before owed records go again; it doubles while they are refused.
const FIRST_BACKOFF: TimeDelta = TimeDelta::seconds(1);
/// The longest wait between two tries.
const MAX_BACKOFF: TimeDelta = TimeDelta::seconds(30);
/// Records owed per job at most besides its merged gaps (a `skipped` record of a paused job is
/// not merged): past it the oldest is dropped, and said.
const MAX_OWED_PER_JOB: usize = 1000;

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Unrecorded {
    /// Record-only claims out that would be owed if the ledger did not take them, by job and
    /// tick.
    out: HashMap<(JobName, i64), Owed>,
    owed: BTreeMap<JobName, Vec<Owed>>,
    /// The newest tick of each job claimed since a record was owed: no gap is stretched over it.
    claimed_since: BTreeMap<JobName, i64>,
    /// When the owed records go again; `None` while none are owed, or while they are out.
    retry_at: Option<DateTime<Utc>>,
    /// Tries refused in a row: the backoff's doublings.
    refused_in_a_row: u32,
    /// The newest tick of each job this node claimed: the ledger holds its record, and a
    /// catch-up finds no tick before it.
    newest_claimed: HashMap<JobName, i64>,
}

/// A record owed to the ledger.
#[derive(Debug, Clone)]
pub(super) struct Owed {
    pub config: Arc<JobConfig>,
    pub record: RunRecord,
}

impl Owed {
    /// The first tick the record stands for: a gap's first, or its own.
    fn first_ms(&self) -> i64 {
        self.record
            .missed_from_unix_ms
            .unwrap_or(self.record.scheduled_unix_ms)
    }
}

impl Unrecorded {
    /// Whether a failed record-only claim of `record` is owed here: a scheduled tick's own
    /// `missed` or `skipped` record (a submission's and a chained run's have their own paths:
    /// a pending submission stays in the ledger, a chain mark stays for the next owner).
    fn takes(record: &RunRecord) -> bool {
        matches!(record.status, RunStatus::Missed | RunStatus::Skipped)
            && record.submission_id.is_none()
            && record.parents.is_empty()
            && !record.broadcast
            && !record.backfill
    }

    /// A record-only claim of `record` goes out: kept until it is answered, when it is one that
    /// would be owed.
    pub fn sending(&mut self, config: &Arc<JobConfig>, record: &RunRecord) {
        if Self::takes(record) {
            let key = (config.spec.name.clone(), record.scheduled_unix_ms);
            let owed = Owed {
                config: Arc::clone(config),
                record: record.clone(),
            };
            self.out.insert(key, owed);
        }
    }

    /// The record-only claim of `job`'s tick `tick_ms` was answered: `refused`, the ledger did
    /// not take it (nothing was written), and it is owed; otherwise it is done with (written, or
    /// another node's record or lock stands for it).
    pub fn answered(&mut self, job: &JobName, tick_ms: i64, refused: bool, now: DateTime<Utc>) {
        let Some(owed) = self.out.remove(&(job.clone(), tick_ms)) else {
            return;
        };
        if refused {
            self.owe(owed.config, owed.record, now);
        } else if !self.owes_or_sends(job) {
            self.claimed_since.remove(job);
        }
    }

    /// `record` (see [`Unrecorded::takes`]) was not taken by the ledger at `now`: it is owed,
    /// merged into the job's last owed gap when it follows it with no claim of the job between.
    fn owe(&mut self, config: Arc<JobConfig>, record: RunRecord, now: DateTime<Utc>) {
        let job = config.spec.name.clone();
        let claimed_since = self.claimed_since.get(&job).copied();
        let owed = self.owed.entry(job.clone()).or_default();
        let new = Owed { config, record };
        let merged = owed.last_mut().is_some_and(|last| {
            let mergeable = last.record.status == RunStatus::Missed
                && new.record.status == RunStatus::Missed
                && last.record.scheduled_unix_ms < new.first_ms()
                && claimed_since.is_none_or(|claimed| claimed < last.first_ms());
            if mergeable {
                let ticks =
                    last.record.missed_ticks.unwrap_or(1) + new.record.missed_ticks.unwrap_or(1);
                let first = last.first_ms();
                let error = last.record.error.clone();
                last.record = new.record.clone();
                last.record.missed_from_unix_ms = Some(first);
                last.record.missed_ticks = Some(ticks);
                last.record.error = error;
            }
            mergeable
        });
        if !merged {
            owed.push(new);
        }
        if owed.len() > MAX_OWED_PER_JOB {
            let dropped = owed.remove(0);
            tracing::error!(job = %job, tick = dropped.record.scheduled_unix_ms, owed = MAX_OWED_PER_JOB, "too many records owed to the ledger: the oldest is dropped, its tick unrecorded");
        }
        if self.retry_at.is_none() {
            let doublings = self.refused_in_a_row.min(5);
            let wait = (FIRST_BACKOFF * 2_i32.pow(doublings)).min(MAX_BACKOFF);
            self.retry_at = Some(now + wait);
        }
        self.refused_in_a_row = self.refused_in_a_row.saturating_add(1);
    }

    /// A claim of `job`'s tick `tick_ms` went through: writes are taken, so what is owed goes
    /// at once.
    pub fn claimed(&mut self, job: &JobName, tick_ms: i64, now: DateTime<Utc>) {
        self.refused_in_a_row = 0;
        // Every claim passes here: the job's name is copied only for its first.
        match self.newest_claimed.get_mut(job) {
            Some(newest) => *newest = (*newest).max(tick_ms),
            None => {
                self.newest_claimed.insert(job.clone(), tick_ms);
            }
        }
        // Owed, or out again (a refusal owes it back): a later refusal must not reach over this.
        if self.owes_or_sends(job) {
            let newest = self.claimed_since.entry(job.clone()).or_insert(tick_ms);
            *newest = (*newest).max(tick_ms);
        }
        if !self.owed.is_empty() {
            self.retry_at = Some(self.retry_at.map_or(now, |at| at.min(now)));
        }
    }

    /// Whether a record this node owes, or has out, stands for `job`'s tick `tick_ms`.
    pub fn covers(&self, job: &JobName, tick_ms: i64) -> bool {
        let stands_for =
            |owed: &Owed| (owed.first_ms()..=owed.record.scheduled_unix_ms).contains(&tick_ms);
        self.owed
            .get(job)
            .is_some_and(|owed| owed.iter().any(stands_for))
            || self
                .out
                .iter()
                .any(|((sent, _), owed)| sent == job && stands_for(owed))
    }

    fn owes_or_sends(&self, job: &JobName) -> bool {
        self.owed.contains_key(job) || self.out.keys().any(|(sent, _)| sent == job)
    }

    /// The owed records due to go again at `now`, taken out (a refusal owes them again), each
    /// made this node's under `token`, the lock it fires under now.
    pub fn due(&mut self, now: DateTime<Utc>, token: FencingToken) -> Vec<Owed> {
        if self.retry_at.is_none_or(|at| at > now) {
            return Vec::new();
        }
        self.retry_at = None;
        let mut due: Vec<Owed> = std::mem::take(&mut self.owed)
            .into_values()
            .flatten()
            .collect();
        for owed in &mut due {
            owed.record.fencing_token = token;
            owed.record.claimed_unix_ms = now.timestamp_millis();
        }
        if !due.is_empty() {
            let ticks: u64 = due
                .iter()
                .map(|owed| owed.record.missed_ticks.unwrap_or(1))
                .sum();
            tracing::info!(
                records = due.len(),
                ticks,
                "recording the ticks the ledger did not take"
            );
        }
        due
    }

    /// A `missed` or `skipped` record this node could not send, having no lock to send it
    /// under: kept for its next turn as owner when a later claim of its own hides the tick from
    /// the next owner's catch-up, else left to that catch-up.
    pub fn owe_without_a_lock(
        &mut self,
        config: &Arc<JobConfig>,
        record: &RunRecord,
        now: DateTime<Utc>,
    ) {
        if !Self::takes(record) {
            return;
        }
        let job = &config.spec.name;
        if self.hidden(job, record) {
            tracing::warn!(job = %job, tick = record.scheduled_unix_ms, "tick not recorded before the lock was lost: a later run hides it from the next owner's catch-up, so this node records it when it owns the lock again");
            self.owe(Arc::clone(config), record.clone(), now);
        }
    }

    /// Whether a claim of this node of a later tick of `job` hides `record`'s ticks from the
    /// next owner's catch-up.
    fn hidden(&self, job: &JobName, record: &RunRecord) -> bool {
        self.newest_claimed
            .get(job)
            .is_some_and(|newest| record.scheduled_unix_ms < *newest)
    }

    /// This node may no longer fire: the next owner's catch-up records what it will find of
    /// what is owed (every tick after a job's newest record); the rest stays owed, for this
    /// node's next turn as owner. Said, with how many.
    pub fn left_to_the_next_owner(&mut self) {
        self.out.clear();
        self.retry_at = None;
        self.refused_in_a_row = 0;
        self.claimed_since.clear();
        let owed = std::mem::take(&mut self.owed);
        let (mut left, mut kept) = (0_u64, 0_u64);
        for (job, records) in owed {
            let (hidden, found): (Vec<Owed>, Vec<Owed>) = records
                .into_iter()
                .partition(|owed| self.hidden(&job, &owed.record));
            let ticks = |records: &[Owed]| -> u64 {
                records
                    .iter()
                    .map(|owed| owed.record.missed_ticks.unwrap_or(1))
                    .sum()
            };
            left += ticks(&found);
            kept += ticks(&hidden);
            if !hidden.is_empty() {
                self.owed.insert(job, hidden);
            }
        }
        if left > 0 {
            tracing::warn!(
                ticks = left,
                "lock lost with ticks not yet recorded: the next owner's catch-up records them"
            );
        }
        if kept > 0 {
            tracing::warn!(
                ticks = kept,
                "lock lost with ticks not yet recorded that later runs hide from the next owner's catch-up: this node records them when it owns the lock again"
            );
        }
    }

    /// The session is connected again: what is owed goes now.
    pub fn reconnected(&mut self, now: DateTime<Utc>) {
        if !self.owed.is_empty() {
            self.retry_at = Some(now);
        }
    }

    /// The wall clock stepped by `by`: the wait lasts as long as it said.
    pub fn clock_stepped(&mut self, by: TimeDelta) {
        if let Some(at) = self.retry_at.as_mut() {
            *at += by;
        }
    }

    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        self.retry_at
    }

    /// Ticks owed, for the tests.
    #[cfg(test)]
    pub fn owed_ticks(&self, job: &JobName) -> Vec<(i64, i64, u64)> {
        self.owed
            .get(job)
            .into_iter()
            .flatten()
            .map(|owed| {
                (
                    owed.first_ms(),
                    owed.record.scheduled_unix_ms,
                    owed.record.missed_ticks.unwrap_or(1),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
