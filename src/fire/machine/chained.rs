//! The router's side of chains (`after`): a child's marks, as read, go through the one claim
//! path — a run at the parents' instant, or a `skipped` record — and a chained claim's answer
//! settles its instant (a taken instant's marks removed, a failed claim read again).
//!
//! Owns: the order of those steps. Must not: keep state of its own (`chains` holds it; `starts`
//! the claims).

use chrono::{DateTime, Utc};

use super::FireMachine;
use super::chains::ChainStep;
use super::protocol::{Action, ClaimRefused, FireReason, Item};
use crate::ids::JobName;
use crate::run::FoundMark;

impl FireMachine {
    /// Answer to [`Action::ListMarks`]: each instant whose set is complete (or given up on) goes
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
            }
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
            Some(ClaimRefused::Failed(_)) if self.lock.may_fire => {
                self.chains.list(Some(job), out);
            }
            // The instant's record exists (a mark gone goes with its creation).
            Some(ClaimRefused::AlreadyClaimed) if !parents.is_empty() => {
                out.push(Action::DropMarks {
                    job: job.clone(),
                    tick_ms,
                    parents,
                });
            }
            _ => {}
        }
    }
}
