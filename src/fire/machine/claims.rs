//! The claims out or held, by id; per job how many of them will start a run, and which
//! submissions they are for: the fire machine's bookkeeping, pure like the machine itself.
//!
//! The count is what `max_running` bounds (with the runs alive and the retries waiting, which
//! `runs` counts). It is kept as claims come and go, not counted again for every input: with a
//! thousand runs open (a backlog of due submissions) counting took two thirds of the machine's
//! CPU (issue 23's profile). A claim's kind (record-only or not) never changes while it is held
//! here, so the count taken at insert is the one given back at removal.

use std::collections::{BTreeMap, HashMap, HashSet};

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::{ClaimId, FireReason, Me, START_LEAD};
use crate::config::JobConfig;
use crate::ids::{FencingToken, JobName};
use crate::run::{Claim, RunContext, RunRecord, SubmissionInput};

/// A claim sent and not yet settled.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) config: Arc<JobConfig>,
    pub(super) tick: DateTime<Utc>,
    pub(super) reason: FireReason,
    pub(super) token: FencingToken,
    /// Not before this instant: the tick itself for on-time ticks.
    pub(super) start_at: DateTime<Utc>,
    /// Part of its job's catch-up sequence.
    pub(super) in_backlog: bool,
    /// A submission's run: its id and payload.
    pub(super) submission: Option<SubmissionInput>,
    pub(super) state: PendingState,
    /// An [`Action::PrepareRun`] went out for it.
    pub(super) prepared: bool,
    /// Its job's `limits`: where its leases stand.
    pub(super) lease: LeaseWait,
    /// A claim of an existing record (a retry, a rerun): the record as read and its version, so
    /// a second try (after a run was found alive) claims it again the same way.
    pub(super) stored: Option<(RunRecord, i32)>,
}

/// Where a claimed run stands with the leases of its job's limits (issue 19).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) enum LeaseWait {
    /// Not asked for (yet, or its job has no limits).
    #[default]
    NotAsked,
    /// [`Action::TakeLeases`] is out: the driver waits in each limit's queue, holding nothing
    /// of a limit until its turn, and answers once it holds them all.
    Asking,
    /// Taking failed (ZooKeeper did not answer): try again at `at`.
    Failed { at: DateTime<Utc>, limit: String },
    /// Held: the run may start; the driver gives them back when it ends.
    Held,
}

impl LeaseWait {
    /// It asked: its start is bounded by `starting_deadline`, not by the late-tick rule.
    pub(super) fn asked(&self) -> bool {
        *self != Self::NotAsked
    }
}

impl Pending {
    /// What the claimed run's job is told: the same when it is prepared as when it starts.
    pub(super) fn context(&self, me: &Me, claim: &Claim) -> RunContext {
        RunContext {
            run_id: claim.record.run_id.clone(),
            scheduled_at: self.tick,
            node: me.node_id.clone(),
            fencing_token: claim.record.fencing_token,
            attempt: claim.record.attempt,
            resumed: self.reason.resumed(),
            // Its retries and reruns are the backfill's too.
            backfill: claim.record.backfill,
            submission: self.submission.clone(),
        }
    }

    /// The latest its start may be once it waits for a limit.
    pub(super) fn lease_deadline(&self) -> DateTime<Utc> {
        self.tick + chrono::Duration::from_std(self.config.starting_deadline).unwrap_or_default()
    }

    /// Whether to look at its start now: its instant, the next try after a failed take, or
    /// the end of its wait for a limit.
    pub(super) fn start_due(&self, now: DateTime<Utc>) -> bool {
        match &self.lease {
            LeaseWait::Asking => now > self.lease_deadline(),
            LeaseWait::Failed { at, .. } => *at <= now,
            _ => self.start_deadline() <= now,
        }
    }

    /// When to look at it again while claimed.
    pub(super) fn claimed_deadline(&self) -> DateTime<Utc> {
        match &self.lease {
            LeaseWait::Asking => self.lease_deadline() + chrono::Duration::milliseconds(1),
            LeaseWait::Failed { at, .. } => *at,
            _ => self.start_deadline(),
        }
    }

    /// When its start goes out: its instant, or [`START_LEAD`] before it when prepared.
    pub(super) fn start_deadline(&self) -> DateTime<Utc> {
        if self.prepared {
            self.start_at - chrono::Duration::from_std(START_LEAD).unwrap_or_default()
        } else {
            self.start_at
        }
    }
}

#[derive(Debug, Clone)]
pub(super) enum PendingState {
    /// Sent; `again` once it is the second try after finding a run alive.
    InFlight { again: bool },
    /// Ours; starts at `start_at`.
    Claimed(Claim),
    /// Found a run alive before the tick: try once more at `at`, or as soon as this node's run
    /// of the job has ended (DESIGN.md promise 3: skip only what really overlaps).
    RunAlive { at: DateTime<Utc> },
    /// Waiting, up to `until`, for this node's run of the job to end (concurrency = replace).
    Replacing { claim: Claim, until: DateTime<Utc> },
    /// Given back (stopping).
    Withdrawing,
    /// A `skipped` or `missed` record: nothing starts from it.
    RecordOnly,
}

#[derive(Debug, Default)]
pub(super) struct Claims {
    by_id: BTreeMap<ClaimId, Pending>,
    /// Per job, the claims held here that start a run (not record-only).
    starting: HashMap<JobName, usize>,
    /// The submissions these claims are for: a scan finds each due one once more per second.
    submissions: HashSet<String>,
}

fn starts_a_run(pending: &Pending) -> bool {
    !matches!(pending.state, PendingState::RecordOnly)
}

impl Claims {
    pub fn insert(&mut self, id: ClaimId, pending: Pending) {
        if let Some(submission) = &pending.submission {
            self.submissions.insert(submission.id.clone());
        }
        if starts_a_run(&pending) {
            *self
                .starting
                .entry(pending.config.spec.name.clone())
                .or_default() += 1;
        }
        if let Some(old) = self.by_id.insert(id, pending) {
            self.forget(&old);
        }
    }

    pub fn remove(&mut self, id: &ClaimId) -> Option<Pending> {
        let pending = self.by_id.remove(id)?;
        self.forget(&pending);
        Some(pending)
    }

    fn forget(&mut self, pending: &Pending) {
        if let Some(submission) = &pending.submission {
            self.submissions.remove(&submission.id);
        }
        if !starts_a_run(pending) {
            return;
        }
        let job = &pending.config.spec.name;
        if let Some(count) = self.starting.get_mut(job) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.starting.remove(job);
            }
        }
    }

    /// A claim of submission `id` is held here.
    pub fn holds_submission(&self, id: &str) -> bool {
        self.submissions.contains(id)
    }

    /// The due time of the claim of submission `id` held here.
    pub fn due_of_submission(&self, id: &str) -> Option<i64> {
        if !self.holds_submission(id) {
            return None; // the common case, without a walk over every claim
        }
        self.by_id
            .values()
            .find(|pending| pending.submission.as_ref().is_some_and(|s| s.id == id))
            .map(|pending| pending.tick.timestamp_millis())
    }

    /// The claims of `job` held here that start a run.
    pub fn starting_of(&self, job: &JobName) -> usize {
        self.starting.get(job).copied().unwrap_or(0)
    }

    pub fn get(&self, id: &ClaimId) -> Option<&Pending> {
        self.by_id.get(id)
    }

    /// A held claim, to change its state. Its kind must stay what it was: a record-only claim
    /// stays record-only, another never becomes one (see the module's doc).
    pub fn get_mut(&mut self, id: &ClaimId) -> Option<&mut Pending> {
        self.by_id.get_mut(id)
    }

    /// Every held claim, to change its state; the same rule as [`Claims::get_mut`].
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Pending> + '_ {
        self.by_id.values_mut()
    }

    pub fn keys(&self) -> impl Iterator<Item = &ClaimId> + '_ {
        self.by_id.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &Pending> + '_ {
        self.by_id.values()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ClaimId, &Pending)> + '_ {
        self.by_id.iter()
    }

    /// The count kept against one made afresh: they differ only if a claim changed kind while
    /// held (the tests check after every input).
    #[cfg(test)]
    pub fn counts_agree(&self) -> bool {
        let mut fresh: HashMap<JobName, usize> = HashMap::new();
        for pending in self.by_id.values().filter(|p| starts_a_run(p)) {
            *fresh.entry(pending.config.spec.name.clone()).or_default() += 1;
        }
        let ids: HashSet<String> = self
            .by_id
            .values()
            .filter_map(|p| p.submission.as_ref().map(|s| s.id.clone()))
            .collect();
        fresh == self.starting && ids == self.submissions
    }
}
