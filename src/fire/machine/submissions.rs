//! The router's side of submissions: what the delayed store holds, as the driver read or
//! watched it (`DelayedInput`); what a scan of the due buckets or the watch found is
//! considered — held by the delayed queue, or recorded `missed` — and what is due is claimed,
//! oldest first across jobs, each job up to its `max_running`.
//!
//! Owns: the order of those steps. Must not: keep state of its own (the delayed queue, `delayed`,
//! holds the submissions; `starts` the claims).

use chrono::{DateTime, Utc};

use super::delayed::JobRoom;
use super::protocol::{ClaimId, ClaimRefused, DelayedInput};
use super::{Action, FireMachine, Scanned, claims, delayed};
use crate::config::JobConfig;
use crate::delayed::submission::{Submission, SubmissionId};
use crate::run::Claim;

/// How long a submission whose claim failed waits before it is read and claimed again.
pub(super) const FAILED_CLAIM_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

impl FireMachine {
    /// What the delayed store holds, as the driver read or watched it.
    pub(super) fn delayed_input(
        &mut self,
        input: DelayedInput,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        match input {
            DelayedInput::Scanned { generation, result } => {
                self.delayed_scanned(generation, result, now, out);
            }
            DelayedInput::DueWatch { watching } => {
                self.delayed.watched(watching);
                self.delayed_tick(now, out);
            }
            DelayedInput::Created { bucket, id, job } => {
                if self.lock.may_fire && self.wanted.reads(job.as_ref()) {
                    out.extend(self.delayed.created(bucket, id));
                }
            }
            DelayedInput::Read { id, result } => {
                if let Some(submission) = self.delayed.read(&id, result) {
                    self.submission_read(id, submission, now, out);
                }
            }
        }
    }

    /// Answer to [`DelayedAction::Scan`](super::protocol::DelayedAction::Scan): what it found
    /// is considered, and the next buckets read when due.
    pub(super) fn delayed_scanned(
        &mut self,
        generation: u64,
        result: Result<Scanned, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if !self.lock.may_fire {
            return;
        }
        if let Some(found) = self.delayed.scanned(generation, result, now) {
            for (id, submission) in found {
                self.consider(id, submission, now, out);
            }
            self.delayed_tick(now, out);
        }
    }

    /// A new submission the watch reported, as read.
    pub(super) fn submission_read(
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
    pub(super) fn delayed_tick(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        self.delayed.tick(now, &self.wanted, out);
        self.claim_due_submissions(now, out);
    }

    /// Claims the submissions that are due, oldest first across jobs, each job up to its
    /// `max_running`.
    pub(super) fn claim_due_submissions(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        let room = self
            .delayed
            .jobs_due()
            .filter_map(|job| {
                let config = &self.jobs.get(job)?.config;
                // A paused job's submissions stay pending until it is resumed.
                let max = if self.steering.paused(job) {
                    0
                } else {
                    config.max_running
                };
                let room = JobRoom {
                    runs: max.saturating_sub(self.starts.open_runs_of(job)),
                    lead: self.submission_lead(config),
                };
                Some((job.clone(), room))
            })
            .collect();
        for (job, item) in self.delayed.take_due(now, room) {
            self.claim_path(now, out, |s, ctx| s.claim_item(ctx, &job, item, false));
        }
    }

    /// How long before its due instant a submission of `config`'s job is claimed.
    pub(super) fn submission_lead(&self, config: &JobConfig) -> chrono::Duration {
        if claims::claimed_at_its_instant(config) {
            chrono::Duration::zero()
        } else {
            self.claim_ahead
        }
    }

    /// Answer to [`ClaimAction::Claim`](super::ClaimAction::Claim); a submission that a reschedule moved meanwhile is
    /// considered anew once its claim is settled.
    pub(super) fn claim_done(
        &mut self,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        // Refused under an older token of ours, or failed: the submission is still pending, and
        // a scan made meanwhile held it for this claim. It is read again, not left to the next
        // scan from the oldest bucket (the next acquisition, reconnection or reload). A failed
        // claim's after a pause: a quota or an ACL that refused it refuses it again at once,
        // and claiming it as fast as the servers answer only loads them (issue 53's soak: 3000
        // refused claims of one submission in a minute).
        let still_pending = matches!(
            result,
            Err(ClaimRefused::NotOwner | ClaimRefused::Failed(_))
        );
        let failed = matches!(result, Err(ClaimRefused::Failed(_)));
        let answered = self.claim_path(now, out, |s, ctx| s.claim_done(ctx, id, result));
        let Some((submission, lost)) = answered else {
            return;
        };
        if let Some(moved) = self.delayed.claim_answered(&submission, lost) {
            tracing::info!(id = %submission, due_unix_ms = moved.due_unix_ms, "submission rescheduled");
            self.consider(submission, moved, now, out);
        } else if still_pending && self.lock.may_fire && self.stopping.is_none() {
            out.extend(if failed {
                self.delayed
                    .read_again_after(submission, FAILED_CLAIM_PAUSE)
            } else {
                self.delayed.read_again(submission)
            });
        }
    }

    /// A pending submission read from ZooKeeper: the delayed queue's to hold, or recorded
    /// `missed` through the fenced claim.
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
        let held_by_own_start = self
            .jobs
            .hold_submission(&submission.job, id.as_str())
            .then_some(submission.due_unix_ms);
        let claimed_due = self
            .starts
            .claims
            .due_of_submission(&submission.job, &id)
            .or(held_by_own_start);
        let config = self
            .jobs
            .config(&submission.job)
            .filter(|config| config.enabled);
        let job = submission.job.clone();
        let named = submission.marker_names_job;
        let considered =
            self.delayed
                .consider(id.clone(), submission, claimed_due, config.as_deref(), now);
        let (delayed::Considered::Missed { due, parents }, Some(config), Some(token)) =
            (considered, config, self.lock.token)
        else {
            return;
        };
        let mut record = delayed::missed_record(&job, &id, due, named, (&self.me, token), now);
        record.parents = parents;
        self.claim_path(now, out, |s, ctx| s.claim_record_only(ctx, &config, record));
    }
}
