//! The router's side of chains (`after`): a child's marks, as read, go through the one claim
//! path — a run at the parents' instant, or a `skipped` record — and a chained claim's answer
//! settles its instant (a taken instant's marks removed, a failed claim read again). A
//! submitted parent's mark becomes the child's submission, which the delayed queue then holds
//! and claims as any other.
//!
//! Owns: the order of those steps, and what a child's submission is made of. Must not: keep
//! state of its own (`chains` holds it; `starts` the claims; `delayed` the submissions).

use chrono::{DateTime, Utc};

use super::FireMachine;
use super::chains::ChainStep;
use super::protocol::{Action, ChainsAction, ChainsInput, ClaimId, ClaimRefused, FireReason, Item};
use crate::delayed::submission::{AfterRun, Submission, SubmissionId};
use crate::ids::JobName;
use crate::layout::MarkName;
use crate::run::FoundMark;

impl FireMachine {
    /// The chain marks, as the driver read or watched them.
    pub(super) fn chains_input(
        &mut self,
        input: ChainsInput,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        match input {
            ChainsInput::MarksChanged(job) => {
                if self.lock.may_fire && self.stopping.is_none() {
                    self.chains.list(job.as_ref(), out);
                }
            }
            ChainsInput::MarksListed { job, result } => self.marks_listed(job, result, now, out),
            ChainsInput::ChildSubmitted {
                job,
                mark,
                submission,
                result,
            } => self.child_submitted(job, &mark, *submission, result, now, out),
        }
    }

    /// Answer to [`ChainsAction::ListMarks`]: each instant whose set is complete (or given up on) goes
    /// through the one claim path — a run, or a `skipped` record — whose claim takes the marks.
    pub(super) fn marks_listed(
        &mut self,
        job: JobName,
        result: Result<Vec<FoundMark>, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let marks = match result {
            Ok(marks) => marks,
            Err(why) => {
                tracing::warn!(job = %job, error = why, "chain marks not read; reading them again shortly");
                self.chains.listing_failed(&job, now);
                return;
            }
        };
        let config = self.jobs.config(&job).filter(|config| config.enabled);
        let able = self.lock.may_fire && self.stopping.is_none() && !self.steering.paused(&job);
        let (Some(config), true, Some(token)) = (config, able, self.lock.token) else {
            // A paused job's marks wait for its resume, as its submissions do.
            self.chains.listing_dropped(&job);
            return;
        };
        for step in self.chains.listed(&config, marks, now, out) {
            match step {
                ChainStep::Run { tick, parents } => {
                    let item = Item {
                        parents,
                        ..Item::tick(tick, FireReason::Chained)
                    };
                    self.claim_path(now, out, |s, ctx| s.claim_item(ctx, &job, item, false));
                }
                ChainStep::Skip { tick, parents, why } => {
                    tracing::info!(job = %job, %tick, why, "chained run skipped");
                    let mut record = self.me.skipped(&job, tick, token, now, why);
                    record.parents = parents;
                    self.claim_path(now, out, |s, ctx| s.claim_record_only(ctx, &config, record));
                }
                ChainStep::Submit { parent, found } => {
                    let (id, submission) = child_submission(&job, &parent, found.clone(), now);
                    out.push(Action::Chains(ChainsAction::SubmitChild {
                        job: job.clone(),
                        mark: found.name,
                        id,
                        submission: Box::new(submission),
                        token,
                    }));
                }
                ChainStep::Forget { mark, why } => {
                    tracing::info!(job = %job, parent = %mark.parent, why, "a submitted parent's run makes no run of this job");
                    self.chains.submitted(&job, &mark);
                    out.push(Action::Chains(ChainsAction::DropMarks {
                        job: job.clone(),
                        marks: vec![mark],
                    }));
                }
            }
        }
    }

    /// Answer to [`ChainsAction::SubmitChild`]: the child's submission, made, is the watch's to
    /// report, as any other's; without a watch it is considered at once (the buckets are then
    /// read a second at a time, and its bucket is past). A failed submit reads the marks again.
    pub(super) fn child_submitted(
        &mut self,
        job: JobName,
        mark: &MarkName,
        submission: Submission,
        result: Result<Option<SubmissionId>, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if !self.chains.submitted(&job, mark) {
            return;
        }
        match result {
            Ok(Some(id)) => {
                tracing::info!(job = %job, id = %id, parent = %mark.parent, "chained run submitted after a submitted parent's run");
                // Considered here as well as read on the watch's report, it would be claimed
                // twice when the read comes after the first claim's answer.
                if !self.delayed.watching() {
                    self.submission_read(id, submission, now, out);
                }
            }
            // The mark was gone, or the submit went under an older token of ours: a listing made
            // since this node took the lock again skipped the mark while the submit was out, so
            // it is read again now.
            Ok(None) if self.lock.may_fire => self.chains.list(Some(&job), out),
            Ok(None) => {}
            Err(why) => {
                tracing::warn!(job = %job, parent = %mark.parent, error = why, "chained submission not made; reading the marks again shortly");
                self.chains.listing_failed(&job, now);
            }
        }
    }

    /// Answer to [`ClaimAction::Claim`](super::ClaimAction::Claim); a chained run's claim also tells the chains.
    pub(super) fn claim_answered(
        &mut self,
        id: ClaimId,
        result: Result<Box<crate::run::Claim>, ClaimRefused>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        // A chained submission's claim took no marks: it is the delayed queue's.
        let chained = self
            .starts
            .claims
            .get(&id)
            .filter(|p| p.submission.is_none());
        let chained = chained.map(|pending| {
            let parents = pending.parents.iter().map(|p| p.job.clone()).collect();
            let job = pending.config.spec.name.clone();
            (job, pending.tick.timestamp_millis(), parents)
        });
        let refused = result.as_ref().err().cloned();
        self.claim_done(id, result.map(|claim| *claim), now, out);
        if let Some((job, tick_ms, parents)) = chained {
            self.chain_claim_done(&job, tick_ms, parents, refused, out);
        }
    }

    /// A chained claim of `job` at `tick_ms` was answered (`refused`: why not). A claim that
    /// found the instant taken leaves marks nobody will take: they go. One that failed is read
    /// again.
    pub(super) fn chain_claim_done(
        &mut self,
        job: &JobName,
        tick_ms: i64,
        parents: Vec<JobName>,
        refused: Option<ClaimRefused>,
        out: &mut Vec<Action>,
    ) {
        if !self.chains.settled(job, tick_ms) {
            return;
        }
        match refused {
            // Failed, or made under an older token of ours: a listing since skipped the instant
            // while its claim was out.
            Some(ClaimRefused::Failed(_) | ClaimRefused::NotOwner) if self.lock.may_fire => {
                self.chains.list(Some(job), out);
            }
            // The instant's record exists (a mark gone goes with its creation).
            Some(ClaimRefused::AlreadyClaimed) if !parents.is_empty() => {
                out.push(Action::Chains(ChainsAction::DropMarks {
                    job: job.clone(),
                    marks: parents
                        .iter()
                        .map(|parent| MarkName::of_tick(tick_ms, parent))
                        .collect(),
                }));
            }
            _ => {}
        }
    }
}

/// The submission of chained job `job` that a submitted parent's mark `found` makes: due at the
/// parent's due instant (`ZKCRON_SCHEDULED_AT` the same; its lateness counts from now, when it
/// is submitted), with the parent's payload and run, under `<parent id>.<job>`
/// ([`SubmissionId::of_child`]). Anonymous: its mark's delete, in the same multi-op, is what
/// makes it once, so nothing needs to remember its id after its record.
fn child_submission(
    job: &JobName,
    parent: &SubmissionId,
    found: FoundMark,
    now: DateTime<Utc>,
) -> (SubmissionId, Submission) {
    let id = SubmissionId::of_child(parent, job);
    let submission = Submission {
        job: job.clone(),
        due_unix_ms: found.name.scheduled_unix_ms,
        submitted_unix_ms: now.timestamp_millis(),
        payload: found.mark.payload,
        requested_by: None,
        anonymous: true,
        // Every zkcron that reads chain marks reads a marker that names its job.
        marker_names_job: true,
        retry_of: None,
        // The parent run's span, as a submitter's context: the child's run span links to it.
        traceparent: found
            .mark
            .trace
            .as_ref()
            .map(crate::run::RunTrace::traceparent),
        after: Some(AfterRun {
            job: found.name.parent,
            run_id: found.mark.run_id,
            status: found.mark.status.as_str().to_owned(),
        }),
    };
    (id, submission)
}
