//! The fire machine: every decision about starting a run (DESIGN.md "Data flow").
//!
//! Owns: the fire queue, ticks declined while not the owner, the late-tick rule, concurrency
//! (`forbid` / `allow` / `replace`), `on_lost`, catch-up (`on_interrupted`, `misfire`,
//! `starting_deadline`, gaps recorded as `missed`), retries and their backoff, which runs are
//! alive on this node, and the stop order (withdraw unstarted claims → hand the lock over → stop
//! the runs). Every way a run can start is one [`Action::Claim`] with a [`FireReason`].
//! Must not: do I/O, read a clock, spawn or sleep. Facts come in as [`Input`] with `now`, commands
//! go out as [`Action`]; `fire::driver` performs them against the ledger and the runner.

mod backfill;
mod catch_up;
mod claims;
mod delayed;
mod guards;
mod housekeeping;
mod jobs;
mod notices;
mod protocol;
mod rewrites;
mod runs;
mod steering;
mod stopping;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{JobConfig, KeepOutput, OnInterrupted};
use crate::control::{Pause, Pauses};
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::fire::queue::FireQueue;
use crate::ids::JobName;
use crate::lock::LockStatus;
use crate::run::RunReport;
use crate::run::{Claim, ClaimMode};
use crate::run::{RunRecord, RunStatus};

pub use catch_up::RESOLVE_WINDOW;
use claims::{LeaseWait, Pending, PendingState, StartVerdict, fresh_record, missed_claim};
pub use delayed::DELAYED_HORIZON;
use housekeeping::{Housekeeping, RELIST_AFTER, Retention};
use jobs::{Jobs, mine};
pub use protocol::{
    Action, ClaimId, ClaimRefused, FireReason, Input, JobRecords, MISSED_AFTER, Me, RecordWrite,
    START_LEAD, TickClaim, WITHDRAW_LIMIT, Wanted,
};
use protocol::{Item, is_late, on_time_until};
use stopping::{HandOver, Stopping};

/// Decides about firing for one node. See the module docs.
#[derive(Debug)]
pub struct FireMachine {
    me: Me,
    claim_ahead: chrono::Duration,
    jobs: Jobs,
    queue: FireQueue,
    lock: LockStatus,
    /// The latest stretch without a connection to ZooKeeper: `(from, until)`.
    outage: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    claims: claims::Claims,
    runs: runs::Runs,
    /// Final records whose write failed, sent again.
    rewrites: rewrites::Rewrites,
    /// Guards of claims that will not start, released until the release is answered.
    guards: guards::Guards,
    delayed: delayed::DelayedQueue,
    /// When records are pruned, and failed listings listed again.
    housekeeping: Housekeeping,
    stopping: Option<Stopping>,
    /// The lock's status as the lock driver last reported it; `lock` is what the machine acts
    /// on: not able to fire until the pauses are known, nor while yielding the lock.
    reported: LockStatus,
    /// The pauses, and a handover on request.
    steering: steering::Steering,
    /// A tick was declined for being at or before its job's newest recorded tick since the
    /// lock was gained: said once, not per tick.
    behind_the_ledger_said: bool,
    /// The lock group whose jobs this machine fires (`None`: the default group).
    group: Option<String>,
    /// The schedule's jobs of the other groups: their submissions are another owner's to fire,
    /// not a job missing from the schedule.
    elsewhere: HashSet<JobName>,
    /// The pending markers this machine reads.
    wanted: Wanted,
    /// Each job's failures in a row, for its notices and `pause_after_failures`.
    streaks: notices::Streaks,
    /// Backfill requests seen and not yet taken.
    backfills: backfill::Backfills,
}

impl FireMachine {
    /// A machine for node `me` firing `jobs`; `claim_ahead` is how long before its tick a claim
    /// is sent, so the round trip never delays the fire.
    pub fn new(me: Me, claim_ahead: Duration, jobs: &[Arc<JobConfig>], now: DateTime<Utc>) -> Self {
        Self::for_group(me, None, claim_ahead, jobs, now)
    }

    /// A machine for node `me` firing the jobs of lock group `group` (`None`: the default
    /// group) among `jobs`, the whole schedule (issue 19).
    pub fn for_group(
        me: Me,
        group: Option<String>,
        claim_ahead: Duration,
        jobs: &[Arc<JobConfig>],
        now: DateTime<Utc>,
    ) -> Self {
        let (jobs, elsewhere) = mine(group.as_deref(), jobs);
        let wanted = Wanted::of(group.as_deref(), &jobs, &elsewhere);
        Self {
            me,
            // Beyond chrono's range means "no lead": fire at the tick.
            claim_ahead: chrono::Duration::from_std(claim_ahead).unwrap_or_default(),
            jobs: Jobs::of(&jobs),
            queue: FireQueue::new(&jobs, now),
            lock: LockStatus::default(),
            outage: None,
            claims: claims::Claims::default(),
            runs: runs::Runs::default(),
            rewrites: rewrites::Rewrites::default(),
            guards: guards::Guards::default(),
            delayed: delayed::DelayedQueue::default(),
            housekeeping: Housekeeping::default(),
            stopping: None,
            reported: LockStatus::default(),
            steering: steering::Steering::default(),
            behind_the_ledger_said: false,
            group,
            elsewhere,
            wanted,
            streaks: notices::Streaks::default(),
            backfills: backfill::Backfills::default(),
        }
    }

    /// Feeds one fact; returns the commands it implies, in order.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        // A claim settled or a run's record written may free room under a job's `max_running`
        // for submissions that are due and waiting: no deadline wakes those.
        let may_free_room = matches!(
            input,
            Input::ClaimDone { .. } | Input::RecordWritten { .. } | Input::Withdrawn { .. }
        );
        match input {
            Input::Tick => self.tick(now, &mut out),
            Input::LockChanged(status) => self.lock_changed(status, now, &mut out),
            Input::Reloaded(jobs) => self.reloaded(&jobs, now, &mut out),
            Input::ClaimDone { id, result } => self.claim_done(id, result, now, &mut out),
            Input::RecordsListed { job, result } => {
                self.records_listed(&job, result, now, &mut out)
            }
            Input::Marked { record, result } => self.marked(record, result, now, &mut out),
            Input::RunEnded { claim, report } => self.run_ended(claim, &report, now, &mut out),
            Input::RunNotStarted {
                claim,
                why,
                maybe_written,
            } => self.run_not_started(&claim, &why, maybe_written, now, &mut out),
            Input::RecordWritten { run_id, write } => {
                self.record_written(&run_id, write, now, &mut out)
            }
            Input::LeasesTaken { id, run_id, failed } => {
                self.leases_taken(id, run_id, failed, now, &mut out)
            }
            Input::Withdrawn { id } => {
                self.claims.remove(&id);
                self.maybe_hand_over(now, &mut out);
            }
            Input::GuardReleased { run_id, settled } => {
                self.guard_released(&run_id, settled, now, &mut out)
            }
            Input::Shutdown => self.shutdown(now, &mut out),
            Input::DelayedScanned {
                generation,
                through,
                result,
            } => self.delayed_scanned(generation, through, result, now, &mut out),
            Input::SubmissionCreated { bucket, id, job } => {
                if self.lock.may_fire && self.wanted.reads(job.as_ref()) {
                    out.extend(self.delayed.created(bucket, id));
                }
            }
            Input::SubmissionRead { id, result } => {
                if let Some(submission) = self.delayed.read(&id, result) {
                    self.submission_read(id, submission, now, &mut out);
                }
            }
            Input::PausesRead(pauses) => self.pauses_read(pauses, now, &mut out),
            Input::ClockStepped { by } => self.clock_stepped(by),
            Input::ReleaseRequested => self.release_requested(now, &mut out),
            Input::BackfillsRead(requests) => self.backfills_read(requests, now, &mut out),
            Input::LockReleased => self.lock_released(&mut out),
        }
        if may_free_room {
            self.claim_due_submissions(now, &mut out);
        }
        #[cfg(test)]
        assert!(
            self.claims.counts_agree() && self.runs.counts_agree(),
            "the open-run counts kept match a fresh count"
        );
        out
    }

    /// When to feed [`Input::Tick`]; `None` means no timer is needed.
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        let queue = match &self.stopping {
            None => {
                let tick = self
                    .queue
                    .next_start()
                    .map(|start| start - self.claim_ahead);
                let delayed = self.delayed.next_deadline(self.claim_ahead, |job| {
                    !self.steering.paused(job)
                        && self
                            .jobs
                            .get(job)
                            .is_some_and(|state| self.open_runs_of(job) < state.config.max_running)
                });
                tick.into_iter().chain(delayed).min()
            }
            Some(stopping) => stopping.deadline(),
        };
        let claims = self.claims.values().filter_map(|p| match &p.state {
            PendingState::Claimed(_) => Some(p.claimed_deadline()),
            // Waiting on our own run: its end wakes the claim, the late-tick rule bounds it.
            PendingState::RunAlive { .. } if self.waits_on_own_run(p) => {
                p.reason.on_time().then(|| on_time_until(&p.config, p.tick))
            }
            PendingState::RunAlive { at } => Some(*at),
            PendingState::Replacing { until, .. } => Some(*until),
            _ => None,
        });
        let retries = self.runs.retry_deadlines(|job| self.steering.paused(job));
        // Sent again only while connected: an outage does not use up the attempts.
        let rewrites = self
            .rewrites
            .next_deadline()
            .filter(|_| self.lock.connected);
        // A stopping node prunes and lists nothing more (`tick`): the next owner does. Their
        // deadlines, left here, would wake the driver at once for ever (issue 31).
        let housekeeping = self
            .housekeeping
            .next_deadline()
            .filter(|_| self.stopping.is_none());
        let yielding = self.steering.deadline();
        queue
            .into_iter()
            .chain(yielding)
            .chain(claims)
            .chain(retries)
            .chain(rewrites)
            .chain(housekeeping)
            .min()
    }

    /// A claim that found the guard held by a run of ours that started after the claim's tick
    /// (catch-up runs first, then the ticks held behind it): that run did not overlap the tick,
    /// so the claim waits for the run's final record, which releases the guard, instead of
    /// retrying at once and skipping.
    fn waits_on_own_run(&self, pending: &Pending) -> bool {
        self.runs
            .earliest_start_of(&pending.config.spec.name)
            .is_some_and(|started| started > pending.tick)
    }

    /// Runs alive on this node (started, final record not yet written).
    pub fn running(&self) -> usize {
        self.runs.len()
    }

    /// `job`'s runs open on this node: claims out or held, runs alive, retries waiting. What
    /// `max_running` bounds; a record-only claim starts nothing and does not count.
    fn open_runs_of(&self, job: &JobName) -> usize {
        self.claims.starting_of(job) + self.runs.open_of(job)
    }

    fn tick(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping.is_none() {
            while let Some(next) = self.queue.next_start() {
                if next - self.claim_ahead > now {
                    break;
                }
                let due = self.queue.pop_start(now);
                if due.is_empty() {
                    break;
                }
                for (tick, job) in due {
                    self.due(&job, tick, now, out);
                }
            }
            self.delayed_tick(now, out);
        }
        self.write_records_again(now, out);
        self.jobs.forget_late_declined(now);
        let ids: Vec<ClaimId> = self.claims.keys().copied().collect();
        for id in ids {
            let Some(pending) = self.claims.get(&id) else {
                continue;
            };
            match &pending.state {
                PendingState::Claimed(_) if pending.start_due(now) => self.try_start(id, now, out),
                PendingState::RunAlive { at } if *at <= now => {
                    if !self.waits_on_own_run(pending) {
                        self.claim_again(id, now, out);
                    } else if pending.reason.on_time()
                        && is_late(&pending.config, pending.tick, now)
                    {
                        // Our own later run stayed alive past the late-tick rule.
                        self.skip_run_alive(id, now, out);
                    }
                }
                PendingState::Replacing { until, .. } if *until <= now => {
                    tracing::warn!(job = %pending.config.spec.name, tick = %pending.tick, "replaced run did not end within its grace; starting anyway");
                    self.start_replacing(id, now, out);
                }
                _ => {}
            }
        }
        self.retries_due(now, out);
        self.yield_overdue(now, out);
        if self.stopping.is_none() {
            self.housekeeping.prunes_due(now, out);
            self.relists_due(now, out);
        }
        self.maybe_hand_over(now, out);
    }

    /// Answer to [`Action::ScanDelayed`]: what it found is considered, and the next buckets
    /// read when due.
    fn delayed_scanned(
        &mut self,
        generation: u64,
        through: DueBucket,
        result: Result<Vec<(SubmissionId, Submission)>, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if !self.lock.may_fire {
            return;
        }
        if let Some(found) = self.delayed.scanned(generation, through, result, now) {
            for (id, submission) in found {
                self.consider(id, submission, now, out);
            }
            self.delayed_tick(now, out);
        }
    }

    /// A new submission the watch reported, as read.
    fn submission_read(
        &mut self,
        id: SubmissionId,
        submission: Submission,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if self.lock.may_fire {
            self.consider(id, submission, now, out);
            self.delayed_tick(now, out);
        }
    }

    /// Reads the next buckets when the horizon reaches them, and claims what is due.
    fn delayed_tick(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        self.delayed.tick(now, &self.wanted, out);
        self.claim_due_submissions(now, out);
    }

    /// Claims the submissions that are due, oldest first across jobs, each job up to its
    /// `max_running`.
    fn claim_due_submissions(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        let room = self
            .delayed
            .jobs_due()
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
        for (job, item) in self.delayed.take_due(now + self.claim_ahead, room) {
            self.claim_item(&job, item, false, now, out);
        }
    }

    /// A pending submission read from ZooKeeper: the delayed queue's to hold, or recorded
    /// `missed` through the fenced claim.
    fn consider(
        &mut self,
        id: SubmissionId,
        submission: Submission,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if self.elsewhere.contains(&submission.job) {
            return;
        }
        let claimed_due = self.claims.due_of_submission(id.as_str());
        let config = self
            .jobs
            .config(&submission.job)
            .filter(|config| config.enabled);
        let job = submission.job.clone();
        let named = submission.marker_names_job;
        let considered =
            self.delayed
                .consider(id.clone(), submission, claimed_due, config.as_deref(), now);
        let (delayed::Considered::Missed { due }, Some(config), Some(token)) =
            (considered, config, self.lock.token)
        else {
            return;
        };
        let me = (&self.me.node_id, self.me.ip.as_str());
        let mut record = RunRecord::claimed_submission(
            &job,
            due.timestamp_millis(),
            &id,
            me,
            token,
            now.timestamp_millis(),
        );
        record.marker_names_job = named;
        record.status = RunStatus::Missed;
        record.error = Some("beyond starting_deadline: no node could fire it in time".to_owned());
        record.missed_from_unix_ms = Some(record.scheduled_unix_ms);
        record.missed_ticks = Some(1);
        self.claim_record_only(&config, record, out);
    }

    /// Answer to [`Action::ListRecords`]: catch-up decides, the router sends what it decided.
    fn records_listed(
        &mut self,
        job: &JobName,
        result: Result<JobRecords, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(token) = self.lock.token.filter(|_| self.lock.may_fire) else {
            return;
        };
        let Some(state) = self.jobs.get_mut(job) else {
            return;
        };
        let Some(catch_up) = state.catch_up.as_mut().filter(|c| c.awaits_listing()) else {
            return; // a listing for a catch-up that was dropped meanwhile
        };
        let records = match result {
            Ok(records) => records,
            Err(why) => {
                tracing::warn!(job = %job, error = why, retry_in = ?RELIST_AFTER, "catch-up: cannot list runs");
                state.catch_up = None;
                self.housekeeping.relist_later(job, now);
                return self.advance(job, now, out);
            }
        };
        self.streaks.learned(job, &records.newest);
        let ground = catch_up::Ground {
            me: &self.me,
            token,
            config: &state.config,
            runs: &self.runs,
            newest_tick: state.newest_tick,
            first_handled: state
                .held
                .iter()
                .map(|item| item.tick)
                .chain(self.queue.next_of(job))
                .min(),
            outage: self.outage,
            now,
        };
        let not_started = std::mem::take(&mut state.not_started);
        let listed = catch_up.listed(&ground, records, not_started);
        let (config, decided) = (Arc::clone(&state.config), catch_up.decided());
        out.extend(listed.marks);
        for retry in listed.retries {
            self.runs.schedule_retry(retry);
        }
        for record in listed.records {
            match record {
                catch_up::RecordOnly::Create(record) => {
                    self.claim_record_only(&config, record, out)
                }
                catch_up::RecordOnly::Again(record, version) => {
                    self.claim_record_again(&config, record, version, out)
                }
            }
        }
        if let (Some(state), Some(latest)) = (self.jobs.get_mut(job), listed.latest) {
            state.raise_newest_tick(latest);
        }
        if decided {
            self.catch_up_decided(job, now, out);
        }
    }

    /// Answer to [`Action::MarkInterrupted`].
    fn marked(
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
        let told = catch_up.marked(record, result, rerun, now);
        let decided = catch_up.decided();
        if let Some((record, again)) = told {
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
        let Some(catch_up) = state.catch_up.take() else {
            return;
        };
        state.backlog.extend(catch_up.into_backlog(job));
        self.advance(job, now, out);
    }

    /// A job's tick has come up (`claim_ahead` before its time).
    fn due(
        &mut self,
        job: &Arc<JobConfig>,
        tick: DateTime<Utc>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let name = &job.spec.name;
        if is_late(job, tick, now) {
            // Popped late: the process was stopped or starved past the tick.
            tracing::warn!(job = %name, %tick, "tick missed: its time passed while this node could not fire");
            if let Some(token) = self.lock.token.filter(|_| self.lock.may_fire) {
                let record = catch_up::stalled_gap(&self.me, token, job, tick, now);
                self.claim_record_only(job, record, out);
            }
            return;
        }
        if !self.lock.may_fire {
            tracing::debug!(job = %name, %tick, "not the owner (or disconnected): not firing");
            self.jobs.decline(tick, name.clone());
            return;
        }
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state.busy_catching_up() {
            state.held.push(Item {
                tick,
                reason: FireReason::OnTime,
                again: None,
                submission: None,
            });
            return;
        }
        self.claim_item(
            name,
            Item {
                tick,
                reason: FireReason::OnTime,
                again: None,
                submission: None,
            },
            false,
            now,
            out,
        );
    }

    /// Sends the one claim every start goes through.
    fn claim_item(
        &mut self,
        job: &JobName,
        item: Item,
        in_backlog: bool,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        // A paused job's ticks (and their retries and reruns) do not start; its submissions
        // wait pending, and one already claimed or interrupted is carried through.
        if let Some(pause) = self
            .steering
            .pause_of(job)
            .filter(|_| item.submission.is_none() && !in_backlog)
        {
            return self.skip_paused(job, item, &pause, now, out);
        }
        let (Some(token), Some(state)) = (self.lock.token, self.jobs.get(job)) else {
            return;
        };
        // A backfill's ticks are behind the ledger by nature: their claims tell the ones run.
        let fresh_tick = item.again.is_none()
            && item.submission.is_none()
            && item.reason != FireReason::Backfill;
        if let Some(newest) = state
            .newest_tick
            .filter(|newest| fresh_tick && item.tick <= *newest)
        {
            return self.behind_the_ledger(job, item.tick, newest, now);
        }
        let me = (&self.me.node_id, self.me.ip.as_str());
        let now_ms = now.timestamp_millis();
        let stored = item.again.clone();
        let (record, mode) = match &item.again {
            Some((stored, version)) => (
                stored.next_attempt(me, token, now_ms),
                ClaimMode::Again { version: *version },
            ),
            None => {
                let mut record =
                    fresh_record(job, item.tick, item.submission.as_ref(), me, token, now_ms);
                record.backfill = item.reason == FireReason::Backfill;
                (record, ClaimMode::Create)
            }
        };
        let config = Arc::clone(&state.config);
        let pending = Pending {
            tick: item.tick,
            reason: item.reason,
            token,
            // A jitter moves a tick's start, never a submission's.
            start_at: if item.reason.on_time() {
                state.config.start_of(item.tick).max(now)
            } else if item.reason.waits_for_its_time() {
                item.tick.max(now)
            } else {
                now
            },
            in_backlog,
            submission: item.submission,
            state: PendingState::InFlight { again: false },
            prepared: false,
            lease: LeaseWait::NotAsked,
            stored,
            config,
        };
        self.claims.send(pending, record, mode, out);
    }

    /// A tick at or before the job's newest recorded one: it was run, or recorded, by whoever
    /// owned the lock at its time. This node's clock is behind that owner's; it claims nothing
    /// until its clock passes the newest recorded tick, so the job's ticks stay in order and
    /// none runs twice.
    ///
    /// A newest tick that is not ahead of our clock says nothing of the clock: the previous
    /// owner ran or recorded a tick this node had passed over while it waited for the lock (a
    /// handoff, a takeover), and that is only worth a debug line.
    fn behind_the_ledger(
        &mut self,
        job: &JobName,
        tick: DateTime<Utc>,
        newest: DateTime<Utc>,
        now: DateTime<Utc>,
    ) {
        if newest <= now {
            tracing::debug!(job = %job, %tick, %newest, "tick not claimed: the previous owner ran or recorded it");
        } else if std::mem::replace(&mut self.behind_the_ledger_said, true) {
            tracing::debug!(job = %job, %tick, %newest, "tick not claimed: at or before the newest recorded tick");
        } else {
            tracing::warn!(job = %job, %tick, newest_recorded = %newest, "tick not claimed: it is at or before the job's newest recorded tick, so this node's clock is behind the previous owner's; ticks start again once the clock passes it (said once)");
        }
    }

    /// A stored record overwritten, at its version, by one that records what became of it
    /// (a retry that came too late): the same fenced claim as a run's next attempt.
    fn claim_record_again(
        &mut self,
        config: &Arc<JobConfig>,
        record: RunRecord,
        version: i32,
        out: &mut Vec<Action>,
    ) {
        self.send_record_only(config, record, ClaimMode::Again { version }, out);
    }

    /// A record that stands for ticks nobody ran (skipped or missed): sent through the same
    /// fenced claim, so only the owner writes it and never over another record.
    fn claim_record_only(
        &mut self,
        config: &Arc<JobConfig>,
        record: RunRecord,
        out: &mut Vec<Action>,
    ) {
        let tick = DateTime::from_timestamp_millis(record.scheduled_unix_ms).unwrap_or_default();
        let newest = self.jobs.newest_tick(&config.spec.name);
        if let Some(newest) =
            newest.filter(|newest| record.submission_id.is_none() && tick <= *newest)
        {
            // Its owner accounted for it: a skipped or missed record here would be a second one.
            let now = DateTime::from_timestamp_millis(record.claimed_unix_ms).unwrap_or_default();
            return self.behind_the_ledger(&config.spec.name, tick, newest, now);
        }
        self.send_record_only(config, record, ClaimMode::Create, out);
    }

    /// Sends the fenced claim of a record that starts nothing.
    fn send_record_only(
        &mut self,
        config: &Arc<JobConfig>,
        record: RunRecord,
        mode: ClaimMode,
        out: &mut Vec<Action>,
    ) {
        let Some(token) = self.lock.token else {
            return;
        };
        let tick = DateTime::from_timestamp_millis(record.scheduled_unix_ms).unwrap_or_default();
        let pending = Pending {
            config: Arc::clone(config),
            tick,
            reason: FireReason::OnTime,
            token,
            start_at: tick,
            in_backlog: false,
            submission: None,
            state: PendingState::RecordOnly,
            prepared: false,
            lease: LeaseWait::NotAsked,
            stored: None,
        };
        self.claims.send(pending, record, mode, out);
    }

    fn claim_done(
        &mut self,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let submission = match &result {
            Ok(claim) => claim.record.submission_id.clone(),
            Err(_) => self
                .claims
                .get(&id)
                .and_then(|p| p.submission.as_ref())
                .and_then(|s| SubmissionId::parse(&s.id).ok()),
        };
        let lost = matches!(result, Err(ClaimRefused::AlreadyClaimed));
        if lost && self.claims.at_its_running_version(id) {
            return self.claim_again(id, now, out);
        }
        if let Ok(claim) = &result {
            self.claims.claimed(&claim.record.run_id);
        }
        let moved = submission.and_then(|submission| {
            Some((self.delayed.claim_answered(&submission, lost)?, submission))
        });
        self.claim_settled(id, result, now, out);
        if let Some((moved, submission)) = moved {
            tracing::info!(id = %submission, due_unix_ms = moved.due_unix_ms, "submission rescheduled");
            self.consider(submission, moved, now, out);
        }
    }

    fn claim_settled(
        &mut self,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(pending) = self.claims.get_mut(&id) else {
            return;
        };
        let job = pending.config.spec.name.clone();
        let tick = pending.tick;
        let again = match &pending.state {
            PendingState::RecordOnly => return self.record_only_settled(id, result, now, out),
            PendingState::InFlight { again } => *again,
            _ => return,
        };
        if self.stopping.is_some() || self.steering.yielding() {
            // A claim that came back after the stop (or a handover) began is given back like
            // the others.
            match result {
                Ok(claim) => {
                    pending.state = PendingState::Withdrawing;
                    out.push(Action::Withdraw { id, claim });
                }
                Err(_) => {
                    self.claims.remove(&id);
                    self.maybe_hand_over(now, out);
                }
            }
            return;
        }
        match result {
            Ok(claim) => {
                if pending.start_at <= now {
                    pending.state = PendingState::Claimed(claim);
                    self.try_start(id, now, out);
                } else {
                    // Its process waits for the instant, not the other way round.
                    pending.prepared = true;
                    out.push(Action::PrepareRun {
                        spec: Arc::clone(&pending.config.spec),
                        context: pending.context(&self.me, &claim),
                        not_before: pending.start_at,
                    });
                    pending.state = PendingState::Claimed(claim);
                }
            }
            Err(ClaimRefused::RunAlive) if self.guards.send_again_of(&job, out) => {
                // The guard in the way is likely our own, of a claim that never started, whose
                // release got no answer: sent again; its answer wakes this claim, which waits
                // for it no longer than the late-tick rule allows (issue 31, defect 3).
                pending.state = PendingState::RunAlive {
                    at: pending.start_at
                        + chrono::Duration::from_std(MISSED_AFTER).unwrap_or_default(),
                };
            }
            Err(ClaimRefused::RunAlive) if !again => {
                // Found a run alive ahead of the tick: skip only if it is still alive at the
                // tick's time (issue 8, defect 1). Try again then, or once ours has ended.
                pending.state = PendingState::RunAlive {
                    at: pending.start_at,
                };
                if pending.start_at <= now && !self.runs.alive_of(&job) {
                    self.claim_again(id, now, out);
                }
            }
            Err(ClaimRefused::RunAlive) => self.skip_run_alive(id, now, out),
            Err(ClaimRefused::AlreadyClaimed) => {
                tracing::debug!(job = %job, %tick, "tick claimed by someone else");
                self.settle(id, now, out);
            }
            Err(ClaimRefused::NotOwner) => {
                let token = pending.token;
                tracing::warn!(job = %job, %tick, token = token.0, "not firing: the epoch has moved past our token");
                // Still the lock node's holder in our own eyes: let the lock re-verify.
                out.push(Action::FenceFailed(token));
                self.settle(id, now, out);
            }
            Err(ClaimRefused::Failed(why)) => {
                tracing::warn!(job = %job, %tick, error = why, "not firing: tick not claimed");
                self.settle(id, now, out);
            }
        }
    }

    /// A `skipped` or `missed` record's claim answered: told and pruned like a run's (a paused
    /// job writes only these, kept to `history` like runs).
    fn record_only_settled(
        &mut self,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(pending) = self.claims.remove(&id) else {
            return;
        };
        let (job, tick) = (&pending.config.spec.name, pending.tick);
        match &result {
            Err(why) => {
                tracing::warn!(job = %job, %tick, ?why, "skipped or missed ticks not recorded")
            }
            Ok(claim) => {
                self.tell(&claim.record, false, out);
                let retention = Retention::of(&pending.config);
                self.housekeeping.prune(job, retention, now, out);
            }
        }
    }

    /// A claim that found a run alive, tried once more.
    fn claim_again(&mut self, id: ClaimId, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(token) = self.claims.get(&id).map(|p| p.token) else {
            return;
        };
        if !self.lock.may_fire || self.lock.token != Some(token) {
            return self.settle(id, now, out);
        }
        let Some(mut pending) = self.claims.remove(&id) else {
            return;
        };
        let (record, mode) = pending.record_once_more(&self.me, token, now);
        pending.state = PendingState::InFlight { again: true };
        self.claims.send(pending, record, mode, out);
    }

    /// A run is alive at the tick's time: the tick is recorded `skipped` (concurrency = forbid).
    fn skip_run_alive(&mut self, id: ClaimId, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let reason = if self.runs.alive_of(&pending.config.spec.name) {
            "a run of the job is still alive on this node (concurrency = forbid)"
        } else {
            "a run of the job is alive on another node (concurrency = forbid)"
        };
        tracing::warn!(job = %pending.config.spec.name, tick = %pending.tick, reason, "tick skipped");
        let (mut record, mode) = pending.record_once_more(&self.me, pending.token, now);
        record.status = RunStatus::Skipped;
        record.error = Some(reason.to_owned());
        let config = Arc::clone(&pending.config);
        self.settle(id, now, out);
        match mode {
            // A retry (or rerun) skipped: written over its stored record, at its version.
            ClaimMode::Again { version } => self.claim_record_again(&config, record, version, out),
            // Not `claim_record_only`: a later tick of the job may have started meanwhile (it
            // won the guard), and this tick must still end recorded. Its claim found no record
            // (the guard refused it, not the record's create), so this create is not a second.
            ClaimMode::Create => self.send_record_only(&config, record, ClaimMode::Create, out),
        }
    }

    /// Starts a claimed tick at its time, if this node still may.
    fn try_start(&mut self, id: ClaimId, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let PendingState::Claimed(claim) = &pending.state else {
            return;
        };
        let job = &pending.config.spec.name;
        let lock_holds = self.lock.may_fire && self.lock.token == Some(pending.token);
        let newest_tick = self.jobs.newest_tick(job);
        let run_alive = self.runs.alive_of(job);
        match pending.start_verdict(claim, lock_holds, newest_tick, run_alive, now) {
            StartVerdict::Start => {}
            // The record stays for the next owner to resolve, and the guard must not outlive
            // the claim while our session does (the next owner would skip the job for a run
            // that never was).
            StartVerdict::LockLost => {
                self.guards.release(claim, out);
                return self.settle(id, now, out);
            }
            StartVerdict::Missed(why) => {
                out.push(Action::WriteRecord(missed_claim(claim, &why)));
                return self.settle(id, now, out);
            }
            StartVerdict::Skipped(reason) => {
                let mut skipped = claim.clone();
                skipped.record.status = RunStatus::Skipped;
                skipped.record.error = Some(reason.to_owned());
                out.push(Action::WriteRecord(skipped));
                return self.settle(id, now, out);
            }
            StartVerdict::Replace { until } => {
                let cancel = self.runs.unended_of(job);
                out.extend(cancel.map(|run_id| Action::CancelRun { run_id }));
                let claim = claim.clone();
                if let Some(pending) = self.claims.get_mut(&id) {
                    pending.state = PendingState::Replacing { claim, until };
                }
                return;
            }
        }
        self.start(id, now, out);
    }

    /// The replaced run ended (or its grace passed): start the replacing one.
    fn start_replacing(&mut self, id: ClaimId, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(pending) = self.claims.get_mut(&id) else {
            return;
        };
        if let PendingState::Replacing { claim, .. } = &pending.state {
            pending.state = PendingState::Claimed(claim.clone());
        }
        if !self.lock.may_fire || self.lock.token != Some(pending.token) {
            tracing::warn!(job = %pending.config.spec.name, tick = %pending.tick, "not firing: the lock was lost after the claim");
            if let PendingState::Claimed(claim) = &pending.state {
                let claim = claim.clone();
                self.guards.release(&claim, out);
            }
            return self.settle(id, now, out);
        }
        self.start(id, now, out);
    }

    fn start(&mut self, id: ClaimId, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.ask_for_leases(id, out) {
            return;
        }
        let Some(mut pending) = self.claims.remove(&id) else {
            return;
        };
        let PendingState::Claimed(mut claim) =
            std::mem::replace(&mut pending.state, PendingState::RecordOnly)
        else {
            return;
        };
        let context = pending.context(&self.me, &claim);
        claim.record.status = RunStatus::Running;
        // A prepared run's job starts at its instant, a little after this decision.
        claim.record.started_unix_ms = Some(now.max(pending.start_at).timestamp_millis());
        let name = &pending.config.spec.name;
        if let (Some(state), None) = (self.jobs.get_mut(name), &pending.submission) {
            state.raise_newest_tick(pending.tick);
            if pending.in_backlog {
                state.backlog_claiming = false;
            }
        }
        self.runs.started(
            &claim,
            &pending.config,
            pending.in_backlog,
            pending.submission.clone(),
            now,
        );
        out.push(Action::StartRun {
            spec: Arc::clone(&pending.config.spec),
            claim,
            context,
            record_first: pending.submission.is_some(),
            not_before: pending.start_at,
        });
        if pending.in_backlog {
            self.release_held(name, now, out);
        }
    }

    /// A run whose job names limits starts only once it holds a lease of each: asks for them
    /// (`true`: not yet, the answer comes as [`Input::LeasesTaken`]).
    fn ask_for_leases(&mut self, id: ClaimId, out: &mut Vec<Action>) -> bool {
        let Some(pending) = self.claims.get_mut(&id) else {
            return false;
        };
        if pending.config.limits.is_empty() || pending.lease == LeaseWait::Held {
            return false;
        }
        let (PendingState::Claimed(claim) | PendingState::Replacing { claim, .. }) = &pending.state
        else {
            return false;
        };
        if pending.lease != LeaseWait::Asking {
            out.push(Action::TakeLeases {
                id,
                run_id: claim.record.run_id.clone(),
                limits: pending.config.limits.clone(),
            });
            pending.lease = LeaseWait::Asking;
        }
        true
    }

    /// Answer to [`Action::TakeLeases`]: start, or try again after a failed take.
    fn leases_taken(
        &mut self,
        id: ClaimId,
        run_id: String,
        failed: Option<String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(pending) = self
            .claims
            .get_mut(&id)
            .filter(|p| p.lease == LeaseWait::Asking)
        else {
            // Settled meanwhile (the lock lost, a stop): what was taken goes back.
            if failed.is_none() {
                out.push(Action::GiveBackLeases { run_id });
            }
            return;
        };
        match failed {
            None => {
                pending.lease = LeaseWait::Held;
                self.try_start(id, now, out);
            }
            Some(limit) => {
                let at = now + chrono::Duration::from_std(LEASE_RETRY).unwrap_or_default();
                pending.lease = LeaseWait::Failed { at, limit };
            }
        }
    }

    /// A claim ends without a run: forget it, and let its job's catch-up sequence go on.
    fn settle(&mut self, id: ClaimId, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(pending) = self.claims.remove(&id) else {
            return;
        };
        // Leases held, or still waited for: either way given back (a wait is given up).
        pending.give_back(out);
        if pending.in_backlog {
            if let Some(state) = self.jobs.get_mut(&pending.config.spec.name) {
                state.backlog_done();
            }
            self.advance(&pending.config.spec.name, now, out);
        }
        self.maybe_hand_over(now, out);
    }

    fn lock_changed(&mut self, status: LockStatus, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let before = std::mem::replace(&mut self.reported, status);
        if status.token.is_none() || status.token != before.token {
            self.steering.lock_moved();
        }
        self.apply_lock(now, out);
    }

    /// What the machine acts on: the reported status, unable to fire before the pauses are
    /// known or while yielding the lock.
    fn effective_lock(&self) -> LockStatus {
        LockStatus {
            may_fire: self.reported.may_fire
                && self.steering.pauses_known()
                && !self.steering.yielding(),
            ..self.reported
        }
    }

    /// Moves to the [`FireMachine::effective_lock`]: on_lost, cannot fire, can fire.
    fn apply_lock(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let status = self.effective_lock();
        let before = std::mem::replace(&mut self.lock, status);
        match (before.connected, status.connected) {
            (true, false) => self.outage = Some((now, None)),
            (false, true) => {
                if let Some((_, until)) = self.outage.as_mut() {
                    *until = Some(now);
                }
                self.rewrites.reconnected(now);
                self.write_records_again(now, out);
                self.guards.send_again(out);
            }
            _ => {}
        }
        if self.stopping.is_some() {
            return; // runs are stopped after the handoff, whatever `on_lost` says
        }
        // A new token is a Lost and an acquisition, even with no status between them.
        let lost = before.token.is_some() && before.token != status.token;
        if lost {
            self.lost(out);
        }
        if before.may_fire && (lost || !status.may_fire) {
            self.jobs.cannot_fire();
            self.delayed.stop();
            self.give_up_lease_waits(now, out);
        }
        if status.may_fire && (lost || !before.may_fire) {
            self.behind_the_ledger_said = false;
            self.can_fire(now, out);
        }
    }

    /// Runs waiting for a limit's lease cannot start any more: their waits are given up now,
    /// not at their deadline (the records stay for the next owner, as every claimed tick's).
    fn give_up_lease_waits(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        for id in self.claims.asking_leases() {
            self.try_start(id, now, out);
        }
    }

    /// Final records whose write failed, due to go again (only while connected).
    fn write_records_again(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.lock.connected {
            out.extend(self.rewrites.due(now).into_iter().map(Action::WriteRecord));
        }
    }

    /// on_lost: cancel what must not run without the lock; let `finish` jobs end.
    fn lost(&mut self, out: &mut Vec<Action>) {
        for (run_id, job, on_lost) in self.runs.unended() {
            if on_lost == crate::config::OnLost::Cancel {
                tracing::warn!(job = %job, run_id, "lock lost: cancelling the running job (on_lost = cancel)");
                out.push(Action::CancelRun { run_id });
            } else {
                tracing::info!(job = %job, run_id, "lock lost: letting the running job finish (on_lost = finish)");
            }
        }
        self.runs.drop_retries();
    }

    /// Acquired, or back from an outage: resolve what was left open, catch up what was missed,
    /// and fire the ticks declined moments before — in that order, per job (issue 8, defect 2).
    fn can_fire(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if let Some(token) = self.lock.token {
            tracing::info!(token = token.0, "this node owns the lock: firing jobs");
        }
        self.housekeeping.forget_relists();
        let names = self.jobs.can_fire(now);
        out.push(Action::PrepareJobs(names.clone()));
        out.extend(names.into_iter().map(Action::ListRecords));
        self.delayed.start(now);
        self.delayed_tick(now, out);
        self.take_backfills(now, out);
    }

    /// Starts the next item of a job's catch-up sequence once the one before it has ended; when
    /// the sequence is done, fires the ticks held behind it.
    fn advance(&mut self, job: &JobName, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(state) = self.jobs.get_mut(job) else {
            return;
        };
        if state.catch_up.is_some() || state.backlog_busy || self.stopping.is_some() {
            return;
        }
        while let Some(item) = self.jobs.get_mut(job).and_then(|s| s.backlog.pop_front()) {
            if let Some(pause) = self
                .steering
                .pause_of(job)
                .filter(|_| item.submission.is_none())
            {
                // A loop, not a recursion through the claim path: a backlog can be long.
                self.skip_paused(job, item, &pause, now, out);
                continue;
            }
            if let Some(state) = self.jobs.get_mut(job) {
                state.backlog_busy = true;
                state.backlog_claiming = true;
            }
            return self.claim_item(job, item, true, now, out);
        }
        self.release_held(job, now, out);
    }

    /// The ticks held behind catch-up go once its last item has started: a job's ticks start in
    /// order, and catch-up's last run overlaps them only as its `concurrency` allows.
    fn release_held(&mut self, job: &JobName, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(state) = self.jobs.get_mut(job) else {
            return;
        };
        let (Some(released), config) = (state.release_held(now), Arc::clone(&state.config)) else {
            return;
        };
        if let (Some(first), Some(newest)) = (released.accounted, state.newest_tick) {
            self.behind_the_ledger(job, first, newest, now);
        }
        if !released.late.is_empty() {
            let ticks = &released.late;
            tracing::warn!(job = %job, ticks = ticks.len(), "tick missed: catch-up ran past its time");
            if let Some(record) = self
                .lock
                .token
                .and_then(|token| catch_up::late_held(&self.me, token, &config, ticks, now))
            {
                self.claim_record_only(&config, record, out);
            }
        }
        for item in released.in_time {
            self.claim_item(job, item, false, now, out);
        }
    }

    fn run_ended(
        &mut self,
        claim: Claim,
        report: &RunReport,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let mut finished = claim;
        let config = self.jobs.config(&finished.record.job);
        let keep = config
            .as_ref()
            .map_or(KeepOutput::Failed, |config| config.keep_output);
        runs::finish_record(&mut finished.record, report, keep);
        // The promise of a retry goes into the same write as the failure: whoever owns the
        // lock at its time keeps it, this node or the next (issue 24).
        finished.record.retry_at_unix_ms = config
            .and_then(|config| runs::retry_at(&finished.record, &config, report.retry_after, now))
            .map(|at| at.timestamp_millis());
        self.runs.ended(&finished);
        out.push(Action::WriteRecord(finished));
    }

    /// A run's process never started: nothing is recorded (its record says `claimed`, which is
    /// the truth), its guard goes, and it is claimed again as the same attempt — now if this
    /// node may fire, else by the next catch-up, ours or the next owner's (issue 31, defect 3:
    /// such runs were recorded `failed` and never run).
    fn run_not_started(
        &mut self,
        claim: &Claim,
        why: &str,
        maybe_written: bool,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if maybe_written {
            let run_id = claim.record.run_id.clone();
            self.claims.maybe_marked_running(run_id, claim.version + 1);
        }
        let Some(run) = self.runs.remove(&claim.record.run_id) else {
            return;
        };
        self.guards.release(claim, out);
        // As stored: the `running` write never went through.
        let mut stored = claim.record.clone();
        stored.status = RunStatus::Claimed;
        stored.started_unix_ms = None;
        let item = Item {
            tick: DateTime::from_timestamp_millis(claim.record.scheduled_unix_ms).unwrap_or(now),
            reason: FireReason::CaughtUp,
            again: Some((stored, claim.version)),
            submission: run.submission.clone(),
        };
        let job = run.job.clone();
        let run_id = &claim.record.run_id;
        if self.stopping.is_some() {
            tracing::info!(job = %job, run_id, why, "run not started before the stop; its record stays claimed for the next owner");
        } else if self.lock.may_fire && !self.jobs.busy_catching_up(&job) {
            tracing::info!(job = %job, run_id, why, "run not started; claiming it again as the same attempt");
            self.claim_item(&job, item, false, now, out);
        } else if let Some(state) = self.jobs.get_mut(&job) {
            tracing::info!(job = %job, run_id, why, "run not started; claimed again as the same attempt once this node can fire");
            state.not_started.push(item);
        }
        if run.in_backlog {
            if let Some(state) = self.jobs.get_mut(&job) {
                state.backlog_busy = false;
            }
            self.advance(&job, now, out);
        }
        self.maybe_stopped(out);
    }

    fn record_written(
        &mut self,
        run_id: &str,
        write: RecordWrite,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if self.rewrites.owns(run_id) {
            if let Some(record) = self.rewrites.answered(run_id, write, now) {
                self.tell(&record, record.retry_at_unix_ms.is_some(), out);
            }
            return;
        }
        let Some(run) = self.runs.remove(run_id) else {
            return; // the record of a tick that never started
        };
        if let (RecordWrite::Written(_), Some(finished)) = (write, &run.finished) {
            let record = &finished.record;
            self.tell(record, record.retry_at_unix_ms.is_some(), out);
        }
        if let (RecordWrite::Failed, Some(finished)) = (write, &run.finished) {
            self.rewrites.first_failed(finished.clone(), now);
        }
        let job = run.job.clone();
        self.guard_gone(&job, now, out);
        if self.stopping.is_none() {
            let retry = run.finished.as_ref().and_then(|claim| {
                let at = claim.record.retry_at_unix_ms?;
                Some((DateTime::from_timestamp_millis(at)?, claim))
            });
            match (retry, write) {
                (Some((at, claim)), RecordWrite::Written(version)) => {
                    self.runs.schedule_retry(runs::Retry {
                        at,
                        record: claim.record.clone(),
                        version,
                        submission: run.submission.clone(),
                        resumed: false,
                    });
                }
                _ => self
                    .housekeeping
                    .prune(&job, Retention::of(&run.config), now, out),
            }
        }
        if run.in_backlog {
            if let Some(state) = self.jobs.get_mut(&job) {
                state.backlog_busy = false;
            }
            self.advance(&job, now, out);
        }
        self.maybe_stopped(out);
    }

    /// Answer to [`Action::ReleaseGuard`]: claims waiting on a run of ours still alive wait
    /// for its end instead.
    fn guard_released(
        &mut self,
        run_id: &str,
        settled: bool,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if let Some(job) = self.guards.answered(run_id, settled)
            && !self.runs.alive_of(&job)
        {
            self.guard_gone(&job, now, out);
        }
    }

    /// `job`'s guard is gone: claims that found it alive try again now (issue 8, defect 1), the
    /// earliest tick first.
    fn guard_gone(&mut self, job: &JobName, now: DateTime<Utc>, out: &mut Vec<Action>) {
        for id in self.claims.waiting_on_guard(job) {
            match self.claims.get(&id).map(|p| &p.state) {
                Some(PendingState::Replacing { .. }) if !self.runs.alive_of(job) => {
                    self.start_replacing(id, now, out)
                }
                Some(PendingState::RunAlive { .. }) => self.claim_again(id, now, out),
                _ => {}
            }
        }
    }

    /// `record` is stored: the notice it calls for and the pause, if any (`again`: the run will
    /// be started again, so this is not its end).
    fn tell(&mut self, record: &RunRecord, again: bool, out: &mut Vec<Action>) {
        let Some(config) = self.jobs.config(&record.job) else {
            return;
        };
        let told = self
            .streaks
            .recorded(record, &config, again, &self.me.node_id);
        if let Some(notice) = told.notice {
            out.push(Action::Notify(Box::new(notice)));
        }
        if let Some(reason) = told.pause {
            tracing::warn!(job = %record.job, reason, "pausing the job");
            out.push(Action::PauseJob {
                job: record.job.clone(),
                reason,
            });
        }
    }

    /// Lists again the jobs whose catch-up listing failed, once their wait is over, while this
    /// node may fire (a new acquisition lists every job anyway).
    fn relists_due(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        for job in self.housekeeping.relists_due(now) {
            if !self.lock.may_fire {
                continue;
            }
            if self
                .jobs
                .start_catch_up(&job, |state| state.catch_up.is_none())
            {
                out.push(Action::ListRecords(job));
            }
        }
    }

    /// Tries failed runs again whose backoff has passed, if this node still owns the lock (the
    /// record is claimed again under our current token, so a retry is at most once like a tick).
    fn retries_due(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        // A pause holds a promised retry, and the resume starts it (issue 24).
        let steering = &self.steering;
        for retry in self.runs.take_due_retries(now, |job| steering.paused(job)) {
            let job = retry.record.job.clone();
            let run_id = retry.record.run_id.as_str();
            if !self.lock.may_fire || self.stopping.is_some() {
                tracing::info!(job = %job, run_id, "retry left to the next owner: its record says when it is due");
                continue;
            }
            if self.elsewhere.contains(&job) {
                // Its record and marker stay: the catch-up of the job's new group resumes it.
                tracing::info!(job = %job, run_id, "retry left to the job's new lock group");
                continue;
            }
            if !self.jobs.contains(&job) {
                tracing::warn!(job = %job, run_id, "retry dropped: the job is no longer in the schedule");
                let mut record = retry.record;
                let dropped = format!(
                    "attempt {} dropped: the job left the schedule",
                    record.attempt + 1
                );
                record.retry_at_unix_ms = None;
                record.error = Some(match record.error.take() {
                    Some(error) => format!("{error}; {dropped}"),
                    None => dropped,
                });
                out.push(Action::DropRetry {
                    record,
                    version: retry.version,
                });
                continue;
            }

            let tick =
                DateTime::from_timestamp_millis(retry.record.scheduled_unix_ms).unwrap_or(now);
            let item = Item {
                tick,
                reason: if retry.resumed {
                    FireReason::RetryResumed
                } else {
                    FireReason::Retry
                },
                again: Some((retry.record, retry.version)),
                submission: retry.submission,
            };
            self.claim_item(&job, item, false, now, out);
        }
    }

    fn reloaded(&mut self, jobs: &[Arc<JobConfig>], now: DateTime<Utc>, out: &mut Vec<Action>) {
        let (jobs, elsewhere) = mine(self.group.as_deref(), jobs);
        self.wanted = Wanted::of(self.group.as_deref(), &jobs, &elsewhere);
        let jobs = &jobs[..];
        let was_elsewhere = std::mem::replace(&mut self.elsewhere, elsewhere);
        self.queue = self.queue.rebuilt(jobs, now);
        let (added, gone) = self.jobs.reload(jobs);
        for gone in &gone {
            self.streaks.forget(gone);
        }
        // Submissions kept for a job that was missing or disabled may fire now.
        self.delayed.rescan();
        if self.lock.may_fire && !added.is_empty() {
            out.push(Action::PrepareJobs(added.clone()));
            // A job that moved here from another group is caught up like a gained lock: while
            // the nodes' schedules disagreed (a rolling reload), neither group may have fired
            // it, and what its old owner left open or promised is ours now.
            for name in added
                .into_iter()
                .filter(|name| was_elsewhere.contains(name))
            {
                if self
                    .jobs
                    .start_catch_up(&name, |state| state.config.enabled)
                {
                    out.push(Action::ListRecords(name));
                }
            }
        }
    }

    fn shutdown(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(Stopping::began(now));
        self.runs.drop_retries();
        self.housekeeping.stop();
        self.claims.stop();
        self.jobs.stop();
        self.claims.withdraw_unstarted(out);
        self.maybe_hand_over(now, out);
    }

    /// The backfill requests waiting now (the driver's watch on `control/`).
    fn backfills_read(
        &mut self,
        requests: Vec<(String, crate::control::BackfillRequest)>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        self.backfills.read(requests);
        self.take_backfills(now, out);
    }

    /// Once this node may fire: each request for one of its jobs goes into the job's backlog,
    /// its ticks oldest first, and is removed. One for a job that no group fires is removed
    /// too; one for another group's job is that group's.
    fn take_backfills(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        let elsewhere = &self.elsewhere;
        for (name, request) in self.backfills.take(|job| elsewhere.contains(job)) {
            let job = request.job.clone();
            let Some(state) = self.jobs.get_mut(&job) else {
                tracing::warn!(job = %job, by = request.by, "backfill of a job not in the schedule: dropped");
                out.push(Action::RemoveBackfill(name));
                continue;
            };
            tracing::info!(job = %job, ticks = request.ticks.len(), by = request.by, "backfill taken: its ticks run in order");
            state.backlog.extend(backfill::items(&request));
            out.push(Action::RemoveBackfill(name));
            self.advance(&job, now, out);
        }
    }

    /// The pauses as read now (the driver's watch on `control/`).
    fn pauses_read(&mut self, pauses: Pauses, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.steering.pauses_read(pauses) {
            self.apply_lock(now, out);
        }
        // Submissions of a resumed job wait for no deadline: claim what is due.
        self.claim_due_submissions(now, out);
    }

    /// A paused job's item: a tick is recorded `skipped`, a rerun or retry is not started.
    fn skip_paused(
        &mut self,
        job: &JobName,
        item: Item,
        pause: &Pause,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let reason = pause.skip_reason();
        if let Some((record, _)) = &item.again {
            tracing::info!(job = %job, run_id = record.run_id, reason, "not started again: the job is paused");
            return;
        }
        tracing::info!(job = %job, tick = %item.tick, reason, "tick skipped: the job is paused");
        let (Some(token), Some(state)) = (self.lock.token, self.jobs.get(job)) else {
            return;
        };
        let config = std::sync::Arc::clone(&state.config);
        let me = (&self.me.node_id, self.me.ip.as_str());
        let mut record = fresh_record(job, item.tick, None, me, token, now.timestamp_millis());
        record.status = RunStatus::Skipped;
        record.error = Some(reason);
        self.claim_record_only(&config, record, out);
    }

    fn release_requested(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping.is_some() || self.steering.yielding() {
            return;
        }
        if self.reported.token.is_none() {
            tracing::info!("asked to hand the lock over, but this node does not own it");
            return;
        }
        tracing::info!("asked to hand the lock over: giving back unstarted claims, then releasing");
        self.steering.start_yielding(now);
        // Withdrawn before the lock's status changes: a claim waiting for a limit's lease
        // would otherwise be settled as a lost lock's, its record and guard left behind, and
        // the guard kept the job from running on the new owner while this session lived.
        self.claims.withdraw_unstarted(out);
        self.apply_lock(now, out);
        self.maybe_hand_over(now, out);
    }

    /// Yielding: hand over once no claim is out (`outstanding`), or when the limit has passed.
    fn maybe_yield(&mut self, outstanding: usize, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(given_up) = self.steering.yield_due(outstanding, now) else {
            return;
        };
        if given_up {
            self.say_given_up();
        }
        out.push(Action::YieldLock);
    }

    /// A yield that the lock did not follow in time: fire again; else hand over when due.
    fn yield_overdue(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.steering.yield_overdue(now) {
            self.apply_lock(now, out);
        } else if self.steering.yielding() {
            self.maybe_hand_over(now, out);
        }
    }

    /// Stopping: hand the lock over once no claim is out, or when the limit has passed.
    fn maybe_hand_over(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let outstanding = self.claims.outstanding();
        let Some(stopping) = self.stopping.as_mut() else {
            return self.maybe_yield(outstanding, now, out);
        };
        if let HandOver::Now { given_up } = stopping.hand_over(outstanding, now) {
            if given_up {
                self.say_given_up();
            }
            out.push(Action::HandOver);
        }
    }

    /// The handoff's limit passed with claims still out: names each, so that an operator can
    /// tell what the lock was handed over without (issue 31).
    fn say_given_up(&self) {
        let given_up = self.claims.unanswered();
        tracing::warn!(limit = ?WITHDRAW_LIMIT, ?given_up, "claimed ticks not all withdrawn before the handoff; the next owner resolves them");
    }

    /// See [`Input::ClockStepped`].
    fn clock_stepped(&mut self, by: chrono::Duration) {
        tracing::warn!(
            by_ms = by.num_milliseconds(),
            "the wall clock stepped; the schedule follows it, the limits being counted do not"
        );
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.clock_stepped(by);
        }
        self.steering.clock_stepped(by);
        self.claims.clock_stepped(by);
        self.rewrites.clock_stepped(by);
        self.housekeeping.clock_stepped(by);
    }

    /// The lock is handed over: each job's stop policy within its grace (the runner's TERM →
    /// grace → KILL).
    fn lock_released(&mut self, out: &mut Vec<Action>) {
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.released();
        }
        let alive = self.runs.alive_ids().into_iter();
        out.extend(alive.map(|run_id| Action::CancelRun { run_id }));
        self.maybe_stopped(out);
    }

    fn maybe_stopped(&mut self, out: &mut Vec<Action>) {
        let idle = self.runs.len() == 0;
        if self.stopping.as_mut().is_some_and(|s| s.stopped(idle)) {
            out.push(Action::Stopped);
        }
    }
}

/// A run whose lease could not be taken (ZooKeeper failed) asks again this much later.
const LEASE_RETRY: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests;
