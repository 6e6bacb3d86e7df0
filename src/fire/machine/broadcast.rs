//! Broadcast jobs (`broadcast = true`): every live member that carries a job's `requires` runs
//! each of its ticks once, and the group's owner records `missed` for the members that did not
//! (issue 36).
//!
//! Owns: the broadcast jobs' ticks on this node, whatever the lock says (a member fires them,
//! not the owner); the member znode's creation time, before which no tick is this node's (a
//! node that joins runs no backlog); the claims of `runs/<job>/<tick>~<node>`, the runs they
//! start and their final records; and, through `sweeps`, the owner's sweep of each tick for
//! the members that did not claim it.
//! Must not: touch the owner's claim path (`starts`), its queue or `max_running`: a broadcast
//! run is the node's own, fenced by its membership, not by the epoch.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::{
    Action, BroadcastAction, ClaimId, ClaimRefused, Me, RecordWrite, StartWrite, is_late,
};
use super::runs::finish_record;
use super::sweeps::{self, Sweeps};
use crate::config::{Concurrency, JobConfig};
use crate::fire::queue::FireQueue;
use crate::ids::{FencingToken, JobName};
use crate::lock::LockStatus;
use crate::lock::node::LiveMember;
use crate::run::{Claim, RunContext, RunRecord, RunReport, RunStatus};

/// A membership reading or a final record that failed is tried again after this long.
const AGAIN_AFTER: chrono::Duration = chrono::Duration::seconds(1);

/// What this node knows of its own member znode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Membership {
    /// Not read in this connection.
    Unknown,
    /// A reading is out.
    Reading,
    /// Read: created at this instant (the servers' clock).
    Since(DateTime<Utc>),
    /// Not there yet, or the reading failed: read again at this instant.
    ReadAgainAt(DateTime<Utc>),
}

/// One broadcast run on this node, from its claim to its final record.
#[derive(Debug)]
struct Run {
    config: Arc<JobConfig>,
    /// Set once its process ended: the final record, and when to send it again.
    finished: Option<(Claim, Option<DateTime<Utc>>)>,
}

/// The broadcast part of a group's machine. See the module docs.
#[derive(Debug)]
pub(super) struct Broadcasts {
    tags: BTreeSet<String>,
    /// The group's broadcast jobs: the owner sweeps them all.
    jobs: HashMap<JobName, Arc<JobConfig>>,
    /// The ticks of those this node runs (it carries their `requires`).
    queue: FireQueue,
    membership: Membership,
    claims: HashMap<ClaimId, (Arc<JobConfig>, DateTime<Utc>)>,
    next_claim: u64,
    runs: HashMap<String, Run>,
    /// The owner's sweeps of the jobs' ticks.
    pub sweeps: Sweeps,
    /// The membership whose predecessors' open runs were closed.
    closed_before: Option<DateTime<Utc>>,
}

/// What the broadcast part is lent of the machine for one input.
pub(super) struct Lent<'a> {
    pub me: &'a Me,
    pub lock: LockStatus,
    pub stopping: bool,
    pub steering: &'a super::steering::Steering,
    pub claim_ahead: chrono::Duration,
    pub now: DateTime<Utc>,
}

impl Broadcasts {
    /// The broadcast jobs among `jobs` (the group's), for a node carrying `tags`.
    pub fn of(jobs: &[Arc<JobConfig>], tags: BTreeSet<String>, now: DateTime<Utc>) -> Self {
        let mut this = Self {
            tags,
            jobs: HashMap::new(),
            queue: FireQueue::new(&[], now),
            membership: Membership::Unknown,
            claims: HashMap::new(),
            next_claim: 0,
            runs: HashMap::new(),
            sweeps: Sweeps::default(),
            closed_before: None,
        };
        this.reloaded(jobs, now);
        this
    }

    /// This node's tags, which decide the broadcast jobs it runs.
    pub fn set_tags(&mut self, tags: BTreeSet<String>, now: DateTime<Utc>) {
        self.tags = tags;
        let jobs: Vec<Arc<JobConfig>> = self.jobs.values().cloned().collect();
        self.reloaded(&jobs, now);
    }

    /// Whether `job` is a broadcast job (the owner's claim path leaves it alone).
    pub fn is_broadcast(job: &JobConfig) -> bool {
        job.broadcast.is_some()
    }

    /// The jobs the owner's claim path fires: all but the broadcast ones, which every member
    /// fires.
    pub fn others(jobs: Vec<Arc<JobConfig>>) -> Vec<Arc<JobConfig>> {
        jobs.into_iter()
            .filter(|job| !Self::is_broadcast(job))
            .collect()
    }

    /// The schedule was reloaded: `jobs` are the group's.
    pub fn reloaded(&mut self, jobs: &[Arc<JobConfig>], now: DateTime<Utc>) {
        // A disabled job runs nowhere, and nobody missed it.
        self.jobs = jobs
            .iter()
            .filter(|job| Self::is_broadcast(job) && job.enabled)
            .map(|job| (job.spec.name.clone(), Arc::clone(job)))
            .collect();
        let mine: Vec<Arc<JobConfig>> = self
            .jobs
            .values()
            .filter(|job| {
                job.broadcast
                    .as_ref()
                    .is_some_and(|b| b.runs_on(&self.tags))
            })
            .cloned()
            .collect();
        self.queue = self.queue.rebuilt(&mine, now);
        self.sweeps.reloaded(&self.jobs, now);
    }

    /// Reads the membership if a broadcast job runs here and it is not known (a reload added
    /// the first one while connected).
    pub fn read_membership_if_unknown(&mut self, connected: bool, out: &mut Vec<Action>) {
        if connected && self.membership == Membership::Unknown {
            self.read_membership(out);
        }
    }

    /// The broadcast jobs this node runs.
    fn running_here(&self) -> impl Iterator<Item = JobName> + '_ {
        self.jobs
            .values()
            .filter(|job| {
                job.broadcast
                    .as_ref()
                    .is_some_and(|b| b.runs_on(&self.tags))
            })
            .map(|job| job.spec.name.clone())
    }

    /// Whether this run id is one of ours.
    pub fn owns(&self, run_id: &str) -> bool {
        self.runs.contains_key(run_id)
    }

    /// Nothing of ours is left: no claim out, no run alive or record unwritten.
    pub fn idle(&self) -> bool {
        self.claims.is_empty() && self.runs.is_empty()
    }

    /// The lock's status changed from `before`.
    pub fn lock_changed(&mut self, before: LockStatus, a: &Lent<'_>, out: &mut Vec<Action>) {
        if !a.lock.connected {
            // A new connection may be a new session, with a new member znode.
            self.membership = Membership::Unknown;
        }
        if a.lock.connected && !before.connected {
            self.read_membership(out);
        }
        self.sweeps
            .lock_changed(a.lock.may_fire, &lend_sweeps(&self.jobs, a));
        self.rewrite_due(a, out);
    }

    fn read_membership(&mut self, out: &mut Vec<Action>) {
        if self.queue.next_start().is_none() || self.membership == Membership::Reading {
            return;
        }
        self.membership = Membership::Reading;
        out.push(Action::Broadcast(BroadcastAction::ReadMembership));
    }

    /// Answer to [`BroadcastAction::ReadMembership`].
    /// A new membership also closes the runs a previous one left open.
    pub fn membership_read(
        &mut self,
        result: Result<Option<DateTime<Utc>>, String>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if self.membership != Membership::Reading {
            return; // disconnected meanwhile: read again on the next connection
        }
        self.membership = match result {
            Ok(Some(since)) => {
                tracing::info!(%since, "a member since: broadcast ticks after it are this node's");
                if self.closed_before.is_none_or(|closed| closed < since) {
                    self.closed_before = Some(since);
                    let mut jobs: Vec<JobName> = self.running_here().collect();
                    jobs.sort();
                    out.push(Action::Broadcast(BroadcastAction::CloseOwn {
                        jobs,
                        before: since,
                        alive: self.runs.keys().cloned().collect(),
                    }));
                }
                Membership::Since(since)
            }
            Ok(None) => {
                tracing::debug!("the member znode is not there yet; reading it again");
                Membership::ReadAgainAt(now + AGAIN_AFTER)
            }
            Err(why) => {
                tracing::warn!(
                    error = why,
                    "cannot read this node's member znode; reading it again"
                );
                Membership::ReadAgainAt(now + AGAIN_AFTER)
            }
        };
    }

    /// When the next thing is due.
    pub fn next_deadline(&self, claim_ahead: chrono::Duration) -> Option<DateTime<Utc>> {
        let tick = self.queue.next_start().map(|start| start - claim_ahead);
        let membership = match self.membership {
            Membership::ReadAgainAt(at) => Some(at),
            _ => None,
        };
        let sweep = self.sweeps.next_deadline(&self.jobs);
        let rewrite = self
            .runs
            .values()
            .filter_map(|run| run.finished.as_ref()?.1);
        tick.into_iter()
            .chain(membership)
            .chain(sweep)
            .chain(rewrite)
            .min()
    }

    /// Time passed: claim the ticks due, sweep the ticks past, write again what failed.
    pub fn tick(&mut self, a: &Lent<'_>, out: &mut Vec<Action>) {
        if matches!(self.membership, Membership::ReadAgainAt(at) if at <= a.now) {
            self.membership = Membership::Unknown;
        }
        self.read_membership_if_unknown(a.lock.connected, out);
        while let Some(next) = self.queue.next_start() {
            if next - a.claim_ahead > a.now {
                break;
            }
            let due = self.queue.pop_start(a.now);
            if due.is_empty() {
                break;
            }
            for (tick, job) in due {
                self.due(&job, tick, a, out);
            }
        }
        self.sweeps.tick(&lend_sweeps(&self.jobs, a), out);
        self.rewrite_due(a, out);
    }

    /// A tick of `job` has come up on this node.
    fn due(
        &mut self,
        job: &Arc<JobConfig>,
        tick: DateTime<Utc>,
        a: &Lent<'_>,
        out: &mut Vec<Action>,
    ) {
        let name = &job.spec.name;
        if a.stopping || a.steering.paused(name) {
            tracing::debug!(job = %name, %tick, "broadcast tick not run: the job is paused, or this node stops");
            return;
        }
        let why_not = if !a.lock.connected {
            Some("not connected")
        } else if is_late(job, tick, a.now) {
            Some("its time passed while this node could not fire")
        } else {
            match self.membership {
                Membership::Since(since) if since < tick => None,
                Membership::Since(_) => Some("this node joined after it"),
                _ => Some("this node's membership is not known yet"),
            }
        };
        if let Some(why) = why_not {
            tracing::info!(job = %name, %tick, why, "broadcast tick not run here; the owner records it missed");
            return;
        }
        let me = (&a.me.node_id, a.me.ip.as_str());
        let token = a.lock.token.unwrap_or(FencingToken(0));
        let now_ms = a.now.timestamp_millis();
        let mut record =
            RunRecord::claimed_broadcast(name, tick.timestamp_millis(), me, token, now_ms);
        let alive_here = self
            .runs
            .values()
            .any(|run| run.config.spec.name == *name && run.finished.is_none());
        if alive_here && job.concurrency == Concurrency::Forbid {
            record.status = RunStatus::Skipped;
            record.finished_unix_ms = Some(now_ms);
            record.error = Some("an earlier run of the job is still running on this node".into());
        }
        let id = ClaimId(self.next_claim);
        self.next_claim += 1;
        self.claims.insert(id, (Arc::clone(job), tick));
        let record = Box::new(record);
        out.push(Action::Broadcast(BroadcastAction::Claim { id, record }));
    }

    /// Answer to [`BroadcastAction::Claim`].
    pub fn claimed(
        &mut self,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
        a: &Lent<'_>,
        out: &mut Vec<Action>,
    ) {
        let Some((config, tick)) = self.claims.remove(&id) else {
            return;
        };
        let name = &config.spec.name;
        let mut claim = match result {
            Ok(claim) => claim,
            Err(refused) => {
                tracing::info!(job = %name, %tick, ?refused, "broadcast tick not run here: its record for this node exists (run before a restart, or recorded missed) or this node is no member");
                return;
            }
        };
        if claim.record.status != RunStatus::Claimed {
            return; // a record only (`skipped`)
        }
        let run_id = claim.record.run_id.clone();
        if a.stopping {
            claim.record.status = RunStatus::Skipped;
            claim.record.finished_unix_ms = Some(a.now.timestamp_millis());
            claim.record.error = Some("this node stopped before its start".into());
            out.push(Action::WriteRecord(claim.clone()));
            let finished = Some((claim, None));
            self.runs.insert(run_id, Run { config, finished });
            return;
        }
        let context = RunContext {
            run_id: run_id.clone(),
            scheduled_at: tick,
            node: a.me.node_id.clone(),
            fencing_token: claim.record.fencing_token,
            attempt: claim.record.attempt,
            resumed: false,
            backfill: false,
            submission: None,
            parent_runs: Vec::new(),
        };
        out.push(Action::StartRun {
            spec: Arc::clone(&config.spec),
            claim,
            context,
            record: StartWrite::InClaim,
            not_before: config.start_of(tick),
        });
        self.runs.insert(
            run_id,
            Run {
                config,
                finished: None,
            },
        );
    }

    /// A broadcast run's process ended: its final record goes out.
    pub fn run_ended(&mut self, claim: Claim, report: &RunReport, out: &mut Vec<Action>) {
        let Some(run) = self.runs.get_mut(&claim.record.run_id) else {
            return;
        };
        let mut finished = claim;
        finish_record(&mut finished.record, report, run.config.keep_output);
        out.push(Action::WriteRecord(finished.clone()));
        run.finished = Some((finished, None));
    }

    /// A broadcast run's process never started: recorded `failed`, since its record says
    /// `claimed` and no one else will run this node's tick.
    pub fn run_not_started(
        &mut self,
        claim: &Claim,
        why: &str,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(run) = self.runs.get_mut(&claim.record.run_id) else {
            return;
        };
        let mut finished = claim.clone();
        finished.record.status = RunStatus::Failed;
        finished.record.finished_unix_ms = Some(now.timestamp_millis());
        finished.record.error = Some(format!("not started: {why}"));
        out.push(Action::WriteRecord(finished.clone()));
        run.finished = Some((finished, None));
    }

    /// Answer to a broadcast run's [`Action::WriteRecord`].
    pub fn record_written(&mut self, run_id: &str, write: RecordWrite, a: &Lent<'_>) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        match (write, run.finished.as_mut()) {
            (RecordWrite::Failed, Some((_, again))) if !a.stopping => {
                *again = Some(a.now + AGAIN_AFTER);
            }
            (RecordWrite::Failed, _) => {
                tracing::warn!(
                    run_id,
                    "a broadcast run's final record was not written before the stop; it stays open"
                );
                self.runs.remove(run_id);
            }
            (RecordWrite::Written(_) | RecordWrite::Refused, _) => {
                self.runs.remove(run_id);
            }
        }
    }

    fn rewrite_due(&mut self, a: &Lent<'_>, out: &mut Vec<Action>) {
        if !a.lock.connected {
            return;
        }
        for run in self.runs.values_mut() {
            if let Some((claim, again)) = run.finished.as_mut()
                && again.is_some_and(|at| at <= a.now)
            {
                *again = None;
                out.push(Action::WriteRecord(claim.clone()));
            }
        }
    }

    /// The stop: the broadcast runs alive here are stopped like the owner's, after the handoff;
    /// a final record waiting to be sent again is given up (it stays `claimed`, which tells
    /// the truth: the run's end was not recorded), so a stop never waits for a connection.
    pub fn cancel_runs(&mut self, out: &mut Vec<Action>) {
        self.runs.retain(|run_id, run| match &run.finished {
            None => {
                out.push(Action::CancelRun {
                    run_id: run_id.clone(),
                });
                true
            }
            Some((_, Some(_))) => {
                tracing::warn!(
                    run_id,
                    "a broadcast run's final record was not written before the stop; it stays open"
                );
                false
            }
            Some((_, None)) => true,
        });
    }

    /// Answer to [`BroadcastAction::ReadMembers`].
    pub fn sweep_members_read(
        &mut self,
        job: &JobName,
        tick: DateTime<Utc>,
        result: Result<Vec<LiveMember>, String>,
    ) {
        self.sweeps.members_read(&self.jobs, job, tick, result);
    }
}

/// What the sweeps are lent of the broadcast part and the machine.
fn lend_sweeps<'a>(
    jobs: &'a HashMap<JobName, Arc<JobConfig>>,
    a: &'a Lent<'a>,
) -> sweeps::Lent<'a> {
    sweeps::Lent {
        jobs,
        token: a.lock.token.filter(|_| a.lock.may_fire),
        stopping: a.stopping,
        steering: a.steering,
        now: a.now,
    }
}
