//! Broadcast jobs (`broadcast = true`): every live member that carries a job's `requires` runs
//! each of its ticks once, and the group's owner records `missed` for the members that did not
//! (issue 36).
//!
//! Owns: the broadcast jobs' ticks on this node, whatever the lock says (a member fires them,
//! not the owner); the member znode's creation time, before which no tick is this node's (a
//! node that joins runs no backlog); and, through `sweeps`, the owner's sweep of each tick for
//! the members that did not claim it.
//! Must not: claim, start or record a run: a tick due here is handed to the claim path
//! (`starts::members`), which claims `runs/<job>/<tick>~<node>` fenced by this node's
//! membership, not by the epoch, and ends it in its final record like every run.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::{Action, BroadcastAction, TickRecords, is_late};
use super::sweeps::{self, Sweeps};
use crate::config::JobConfig;
use crate::fire::queue::FireQueue;
use crate::ids::JobName;
use crate::lock::LockStatus;
use crate::lock::node::LiveMember;
use crate::run::RunRecord;

/// A membership reading that failed is tried again after this long.
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

/// A broadcast tick due on this node: the claim path claims it.
pub(super) type DueHere = (Arc<JobConfig>, DateTime<Utc>);

/// The broadcast part of a group's machine. See the module docs.
#[derive(Debug)]
pub(super) struct Broadcasts {
    tags: BTreeSet<String>,
    /// The group's broadcast jobs: the owner sweeps them all.
    jobs: HashMap<JobName, Arc<JobConfig>>,
    /// The ticks of those this node runs (it carries their `requires`).
    queue: FireQueue,
    membership: Membership,
    /// The owner's sweeps of the jobs' ticks.
    pub sweeps: Sweeps,
    /// The membership whose predecessors' open runs were closed.
    closed_before: Option<DateTime<Utc>>,
}

/// What the broadcast part is lent of the machine for one input.
pub(super) struct Lent<'a> {
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
    }

    fn read_membership(&mut self, out: &mut Vec<Action>) {
        if self.queue.next_start().is_none() || self.membership == Membership::Reading {
            return;
        }
        self.membership = Membership::Reading;
        out.push(Action::Broadcast(BroadcastAction::ReadMembership));
    }

    /// Answer to [`BroadcastAction::ReadMembership`].
    /// A new membership also closes the runs a previous one left open (`alive`: this node's
    /// runs alive now, which are not).
    pub fn membership_read(
        &mut self,
        result: Result<Option<DateTime<Utc>>, String>,
        alive: Vec<String>,
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
                        alive,
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
        tick.into_iter().chain(membership).chain(sweep).min()
    }

    /// Time passed: the ticks due here (for the claim path), the ticks past swept.
    pub fn tick(&mut self, a: &Lent<'_>, out: &mut Vec<Action>) -> Vec<DueHere> {
        let mut here = Vec::new();
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
                if self.runs_here(&job, tick, a) {
                    here.push((job, tick));
                }
            }
        }
        self.sweeps.tick(&lend_sweeps(&self.jobs, a), out);
        here
    }

    /// Whether a tick of `job` that has come up runs on this node: it is a member since before
    /// it, connected, on time, the job not paused and the node not stopping. One that does
    /// not is the owner's to record `missed`.
    fn runs_here(&self, job: &Arc<JobConfig>, tick: DateTime<Utc>, a: &Lent<'_>) -> bool {
        let name = &job.spec.name;
        if a.stopping || a.steering.paused(name) {
            tracing::debug!(job = %name, %tick, "broadcast tick not run: the job is paused, or this node stops");
            return false;
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
            return false;
        }
        true
    }

    /// Answer to [`BroadcastAction::ReadTick`]: the job, and the `missed` records its sweep
    /// owes, for the claim path.
    pub fn sweep_tick_read(
        &mut self,
        job: &JobName,
        tick: DateTime<Utc>,
        result: Result<TickRecords, String>,
        a: &Lent<'_>,
        out: &mut Vec<Action>,
    ) -> Option<(Arc<JobConfig>, Vec<RunRecord>)> {
        let owed = self
            .sweeps
            .tick_read(job, tick, result, &lend_sweeps(&self.jobs, a), out);
        let config = self.jobs.get(job)?;
        (!owed.is_empty()).then(|| (Arc::clone(config), owed))
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
