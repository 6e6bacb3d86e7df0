//! The claims out or held, by id and by the run they are for ([`RunKey`]: at most one claim out
//! per run, whichever producer made it due); per job how many of them will start a run: the fire
//! machine's bookkeeping, pure like the machine itself.
//!
//! The count is what `max_running` bounds (with the runs alive and the retries waiting, which
//! `runs` counts). It is kept as claims come and go, not counted again for every input: with a
//! thousand runs open (a backlog of due submissions) counting took two thirds of the machine's
//! CPU (issue 23's profile). A claim's kind (record-only or not) never changes while it is held
//! here, so the count taken at insert is the one given back at removal.

use std::collections::{BTreeMap, HashMap, VecDeque};

use chrono::{DateTime, Utc};

use super::protocol::{Action, ClaimAction, ClaimId, Fence, RunAction, TickClaim};
use crate::config::Concurrency;
use crate::delayed::submission::SubmissionId;
use crate::ids::{FencingToken, JobName};
use crate::run::{Claim, ClaimMode, Due, RunKey, RunRecord, RunStatus};

mod pending;

use pending::said_running_by_its_claim;
pub(super) use pending::{
    LeaseWait, Pending, PendingState, StartVerdict, claimed_at_its_instant, fresh_record,
    missed_claim, never_started,
};

#[derive(Debug, Default)]
pub(super) struct Claims {
    by_id: BTreeMap<ClaimId, Pending>,
    next_id: u64,
    /// Runs that never started whose `running` write may have been applied all the same (its
    /// answer was lost): run id → the record's version if it was. Their claim again tries that
    /// version when the one they were claimed at is refused.
    maybe_marked_running: HashMap<String, i32>,
    /// Per job, the claims held here that start a run (not record-only).
    starting: HashMap<JobName, usize>,
    /// The run each claim is for (its [`RunKey::run`]), and the one claim out for each run: a
    /// scan finds each due submission once more per second, and asks.
    runs: HashMap<RunKey, ClaimId>,
    run_of: HashMap<ClaimId, RunKey>,
    /// Claims of a run whose claim is out, whichever producer made them: each goes, in order,
    /// once the one before it has settled (and is refused then if that one made the record).
    held: HashMap<RunKey, VecDeque<HeldClaim>>,
    /// Held claims whose run is free now, to send at the end of the input.
    released: Vec<HeldClaim>,
    /// Per `forbid` job, the token under which a claim of it took the guard: no run of the job
    /// was alive on another node then, and none can start elsewhere while that token holds
    /// (every other node's claim fails its epoch check; a run that outlives a hold takes its
    /// guard before the lock goes). Its claims under that token go without the guard.
    guard_proven: HashMap<JobName, FencingToken>,
}

/// A claim waiting for its run's claim out to settle.
#[derive(Debug)]
struct HeldClaim {
    pending: Pending,
    record: RunRecord,
    mode: ClaimMode,
}

fn starts_a_run(pending: &Pending) -> bool {
    !matches!(pending.state, PendingState::RecordOnly)
}

impl Claims {
    /// Holds `pending` under a new id, and sends its claim of `record` — or, when a claim of
    /// the same run is out, holds it until that one settles: one claim out per run, whichever
    /// producers made it due (a tick's on-time claim and catch-up's; a submission's `missed`
    /// record sent again by the next scan).
    pub fn send(
        &mut self,
        pending: Pending,
        record: RunRecord,
        mode: ClaimMode,
        out: &mut Vec<Action>,
    ) {
        let run = RunKey::of(&record).run();
        if self.runs.contains_key(&run) {
            let held = HeldClaim {
                pending,
                record,
                mode,
            };
            self.held.entry(run).or_default().push_back(held);
            return;
        }
        let id = ClaimId(self.next_id);
        self.next_id += 1;
        let guarded = pending.config.concurrency == Concurrency::Forbid
            && pending.fence == Fence::Epoch
            && record.status == RunStatus::Claimed
            && self.guard_proven.get(&pending.config.spec.name) != Some(&pending.token);
        let record = said_running_by_its_claim(record, &pending);
        let pending_fence = pending.fence;
        self.runs.insert(run.clone(), id);
        self.run_of.insert(id, run);
        self.insert(id, pending);
        out.push(Action::Claims(ClaimAction::Claim(TickClaim {
            id,
            record,
            mode,
            guarded,
            fence: pending_fence,
        })));
    }

    /// A run that never started may have its `running` write applied, at `version`.
    /// Whether a claim of `record`'s run is out or held here: its answer, not a listing read
    /// meanwhile, decides what becomes of the run.
    pub fn out_for(&self, record: &RunRecord) -> bool {
        self.runs.contains_key(&RunKey::of(record).run())
    }

    /// Whether a claim of `job`'s scheduled tick `tick_ms` is out or held here.
    pub fn out_for_tick(&self, job: &JobName, tick_ms: i64) -> bool {
        let run = RunKey {
            job: job.clone(),
            due: Due::Tick(tick_ms),
            node: None,
            attempt: 0,
        };
        self.runs.contains_key(&run)
    }

    pub fn maybe_marked_running(&mut self, run_id: String, version: i32) {
        self.maybe_marked_running.insert(run_id, version);
    }

    /// The claim of a run settled: what may have been written before is known now; a claim
    /// that took the guard proves no run of its job alive elsewhere under its token.
    pub fn claimed(&mut self, claim: &Claim) {
        self.maybe_marked_running.remove(&claim.record.run_id);
        if claim.guard.is_some() {
            self.guard_proven
                .insert(claim.record.job.clone(), claim.record.fencing_token);
        }
    }

    /// A run that never started, claimed again at the version it was claimed at, was refused:
    /// if its `running` write may have been applied (issue 31: the answer was lost in an
    /// outage), its claim is pointed at that version instead, once. The claim's fence and
    /// compare-and-set still decide: whoever changed the record since (the next owner marking
    /// it interrupted) makes this claim fail too.
    pub fn at_its_running_version(&mut self, id: ClaimId) -> bool {
        let Some((record, version)) = self.by_id.get_mut(&id).and_then(|p| p.stored.as_mut())
        else {
            return false;
        };
        match self.maybe_marked_running.remove(&record.run_id) {
            Some(written) if written == *version + 1 => {
                tracing::info!(job = %record.job, run_id = record.run_id, "the record of a run that never started says running (a write whose answer was lost): claiming it at that version");
                *version = written;
                true
            }
            _ => false,
        }
    }

    /// Stopping: a run that never started stays `claimed` for the next owner to take over.
    pub fn stop(&mut self) {
        self.maybe_marked_running.clear();
    }

    /// Claimed but unstarted ticks are given back while we still own the lock, so the peer we
    /// hand over to fires them (a planned handoff loses no tick).
    pub fn withdraw_unstarted(&mut self, out: &mut Vec<Action>) {
        let ids: Vec<ClaimId> = self.by_id.keys().copied().collect();
        for id in ids {
            let Some(pending) = self.by_id.get_mut(&id).filter(|p| !p.is_members()) else {
                // A member's own run is not the lock's to give back (`starts::members`).
                continue;
            };
            match std::mem::replace(&mut pending.state, PendingState::Withdrawing) {
                PendingState::Claimed(claim)
                | PendingState::Replacing { claim, .. }
                | PendingState::AfterOwnRun(claim) => {
                    if std::mem::take(&mut pending.prepared) {
                        out.push(Action::Runs(RunAction::Unprepare {
                            run_id: claim.record.run_id.clone(),
                        }));
                    }
                    if matches!(
                        std::mem::take(&mut pending.lease),
                        LeaseWait::Held | LeaseWait::Asking
                    ) {
                        out.push(Action::Claims(ClaimAction::GiveBackLeases {
                            run_id: claim.record.run_id.clone(),
                        }));
                    }
                    out.push(Action::Claims(ClaimAction::Withdraw { id, claim }));
                }
                state @ (PendingState::InFlight { .. } | PendingState::RecordOnly) => {
                    pending.state = state;
                }
                PendingState::RunAlive { .. } | PendingState::Withdrawing => {
                    self.remove(&id);
                }
            }
        }
    }

    /// A claim of this node's own run of a broadcast tick is held (out, or waiting for its
    /// instant).
    pub fn members_out(&self) -> bool {
        self.by_id.values().any(Pending::is_members)
    }

    /// This node's own claimed runs of broadcast ticks that have not started (waiting for their
    /// instant, or behind a run of their own).
    pub fn members_claimed(&self) -> Vec<(ClaimId, Claim)> {
        self.by_id
            .iter()
            .filter(|(_, pending)| pending.is_members())
            .filter_map(|(id, pending)| match &pending.state {
                PendingState::Claimed(claim) | PendingState::AfterOwnRun(claim) => {
                    Some((*id, claim.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Claims and withdrawals whose answer is still out: a handover waits for them.
    pub fn outstanding(&self) -> usize {
        self.by_id
            .values()
            .filter(|p| {
                matches!(
                    p.state,
                    PendingState::InFlight { .. } | PendingState::Withdrawing
                )
            })
            .count()
    }

    /// Each claim whose answer is still out, for the operator: job, tick, what is unanswered.
    pub fn unanswered(&self) -> Vec<String> {
        self.by_id
            .values()
            .filter_map(|p| {
                let what = match p.state {
                    PendingState::InFlight { .. } => "claim unanswered",
                    PendingState::Withdrawing => "withdrawal unanswered",
                    _ => return None,
                };
                Some(format!("{} {}: {what}", p.config.spec.name, p.tick))
            })
            .collect()
    }

    /// The claims waiting for a limit's lease.
    pub fn asking_leases(&self) -> Vec<ClaimId> {
        let asking = self
            .by_id
            .iter()
            .filter(|(_, p)| p.lease == LeaseWait::Asking);
        asking.map(|(id, _)| *id).collect()
    }

    /// `job`'s claims that wait for its guard to go (a run found alive, or being replaced),
    /// the earliest tick first.
    pub fn waiting_on_guard(&self, job: &JobName) -> Vec<ClaimId> {
        let mut waiting: Vec<(DateTime<Utc>, ClaimId)> = self
            .by_id
            .iter()
            .filter(|(_, p)| p.config.spec.name == *job)
            .filter(|(_, p)| {
                matches!(
                    p.state,
                    PendingState::RunAlive { .. }
                        | PendingState::Replacing { .. }
                        | PendingState::AfterOwnRun(_)
                )
            })
            .map(|(id, p)| (p.tick, *id))
            .collect();
        waiting.sort();
        waiting.into_iter().map(|(_, id)| id).collect()
    }

    /// The wall clock stepped by `by`: the waits keep their length.
    pub fn clock_stepped(&mut self, by: chrono::Duration) {
        for pending in self.by_id.values_mut() {
            if let PendingState::Replacing { until, .. } = &mut pending.state {
                *until += by;
            }
            if let LeaseWait::Failed { at, .. } = &mut pending.lease {
                *at += by;
            }
        }
    }

    fn insert(&mut self, id: ClaimId, pending: Pending) {
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
        if let Some(run) = self.run_of.remove(id) {
            self.runs.remove(&run);
            if let Some(queue) = self.held.get_mut(&run) {
                self.released.extend(queue.pop_front());
                if queue.is_empty() {
                    self.held.remove(&run);
                }
            }
        }
        Some(pending)
    }

    fn forget(&mut self, pending: &Pending) {
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

    /// Sends the held claims whose run's claim has settled (during this input); a stopping
    /// node sends none, as it starts nothing new.
    pub fn send_released(&mut self, stopping: bool, out: &mut Vec<Action>) {
        for held in std::mem::take(&mut self.released) {
            if stopping {
                continue;
            }
            self.send(held.pending, held.record, held.mode, out);
        }
    }

    /// The claim out here for `run` (whichever its attempt).
    pub fn of_run(&self, run: &RunKey) -> Option<&Pending> {
        self.by_id.get(self.runs.get(&run.run())?)
    }

    /// The due time of the claim held here that runs submission `id` of `job`. A claim that
    /// records it `missed` does not hold it: the delayed queue keeps it until that record is
    /// written, and considers it again if it is not.
    pub fn due_of_submission(&self, job: &JobName, id: &SubmissionId) -> Option<i64> {
        self.of_run(&RunKey::of_submission(job, id))
            .filter(|pending| starts_a_run(pending))
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

    /// The ids held now, to go through while claims come and go.
    pub fn ids(&self) -> Vec<ClaimId> {
        self.by_id.keys().copied().collect()
    }

    pub fn values(&self) -> impl Iterator<Item = &Pending> + '_ {
        self.by_id.values()
    }

    /// The count kept against one made afresh: they differ only if a claim changed kind while
    /// held (the tests check after every input).
    #[cfg(test)]
    pub fn counts_agree(&self) -> bool {
        let mut fresh: HashMap<JobName, usize> = HashMap::new();
        for pending in self.by_id.values().filter(|p| starts_a_run(p)) {
            *fresh.entry(pending.config.spec.name.clone()).or_default() += 1;
        }
        let held: std::collections::HashSet<&ClaimId> = self.by_id.keys().collect();
        // One claim out per run; a run with claims held has one out (or just settled).
        let indexed = self.run_of.len() == self.runs.len()
            && self.run_of.keys().all(|id| held.contains(id))
            && self
                .runs
                .iter()
                .all(|(run, id)| self.run_of.get(id) == Some(run))
            && self.held.values().all(|queue| !queue.is_empty())
            && self.released.is_empty();
        fresh == self.starting && indexed
    }
}

#[cfg(test)]
mod tests;
