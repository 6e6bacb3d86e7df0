//! The `running/<job>` guards of claims that will never start, kept until their release is
//! answered; and the guards taken for runs that outlive our hold of the lock, until that is
//! answered.
//!
//! A `forbid` job's claim takes the guard only where a run of the job may be alive on another
//! node: the first claim of the job under each fencing token (`claims`). Later claims under the
//! same token need none — no other node can start a run while we hold the lock — and a run that
//! outlives our hold (a handover, a yield, a lock lost with our session alive) takes its guard
//! then, before the lock goes where we can wait for it (`TakeGuard`).
//!
//! A guard is an ephemeral node of our session. A release sent while ZooKeeper does not answer
//! (an ensemble outage, a client that gave up on its session) is lost, and a session that comes
//! back — taken back by id, with its ephemerals — keeps the guard: every later claim of a
//! `forbid` job then finds "a run alive on another node" that never ran, for as long as the
//! session lives (issue 31, defect 3). So a release is sent again each time the node is
//! connected again, and when a claim of the job finds the guard, until it is answered.
//!
//! Owns: which guards wait to be released. Must not: delete anything (the machine emits
//! `ClaimAction::ReleaseGuard`, the driver deletes the node if our session still holds it).

use std::collections::BTreeMap;

use super::protocol::Action;
use crate::fire::machine::ClaimAction;
use crate::ids::JobName;
use crate::run::Claim;

#[derive(Debug, Default)]
pub(super) struct Guards {
    /// By run id: the claim whose guard is to go.
    unreleased: BTreeMap<String, Claim>,
    /// By run id: the claims of runs whose guard is being taken.
    taking: BTreeMap<String, Claim>,
}

impl Guards {
    /// Takes the guard of `claim`'s run, which outlives our hold of the lock (once per run).
    pub fn take(&mut self, claim: &Claim, out: &mut Vec<Action>) {
        if claim.guard.is_some() || self.taking.contains_key(&claim.record.run_id) {
            return;
        }
        self.taking
            .insert(claim.record.run_id.clone(), claim.clone());
        out.push(Action::Claims(ClaimAction::TakeGuard(claim.clone())));
    }

    /// Guards being taken: a handover waits for them.
    pub fn taking(&self) -> usize {
        self.taking.len()
    }

    /// The answer to a take: the run's claim with the guard our session holds now, if any.
    pub fn taken(&mut self, run_id: &str, guard: Option<String>) -> Option<Claim> {
        let mut claim = self.taking.remove(run_id)?;
        claim.guard = Some(guard?);
        Some(claim)
    }

    /// `claim` will not start: its guard, if it took one, is released.
    pub fn release(&mut self, claim: &Claim, out: &mut Vec<Action>) {
        if claim.guard.is_none() {
            return;
        }
        self.unreleased
            .insert(claim.record.run_id.clone(), claim.clone());
        out.push(Action::Claims(ClaimAction::ReleaseGuard(claim.clone())));
    }

    /// The answer to a release: `settled` when the guard is gone or not ours (nothing is left
    /// to do); the job whose guard went, if one did.
    pub fn answered(&mut self, run_id: &str, settled: bool) -> Option<JobName> {
        if !settled {
            return None;
        }
        self.unreleased.remove(run_id).map(|claim| claim.record.job)
    }

    /// Sends every release not yet answered again (the node is connected again).
    pub fn send_again(&self, out: &mut Vec<Action>) {
        out.extend(
            self.unreleased
                .values()
                .cloned()
                .map(|claim| Action::Claims(ClaimAction::ReleaseGuard(claim))),
        );
    }

    /// Sends the releases of `job`'s guards again; whether there was one (a claim of the job
    /// found its guard).
    pub fn send_again_of(&self, job: &JobName, out: &mut Vec<Action>) -> bool {
        let mut any = false;
        for claim in self.unreleased.values().filter(|c| c.record.job == *job) {
            out.push(Action::Claims(ClaimAction::ReleaseGuard(claim.clone())));
            any = true;
        }
        any
    }
}
