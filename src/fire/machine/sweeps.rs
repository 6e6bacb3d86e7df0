//! The owner's sweep of each broadcast tick (issue 36): at the tick's start the members of that
//! instant are read (those live then, and those gone since that were members at it); once
//! [`SWEEP_AFTER`] has passed, a `missed` record is made for each of them that did not claim
//! the tick. A sweep that failed is tried again while this node owns the lock; one the lock
//! moved under is the next owner's, whose look back sweeps it again.
//!
//! Owns: while this node owns the group's lock, each broadcast job's next tick to sweep, the
//! sweeps under way (members being read, due, sent) and their attempts.
//! Must not: read or write anything (the driver does, on [`BroadcastAction::ReadMembers`] and
//! [`BroadcastAction::Sweep`]), nor run a member's tick (`broadcast`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::protocol::{Action, BroadcastAction, SweepFailed};
use super::steering::Steering;
use crate::config::JobConfig;
use crate::ids::{FencingToken, JobName};
use crate::lock::node::LiveMember;

/// How long after a tick's start the owner looks for members that did not claim it (those of
/// the tick's instant): well past the late-tick rule (`MISSED_AFTER`), after which a member no
/// longer claims the tick.
pub const SWEEP_AFTER: Duration = Duration::from_secs(5);
/// How far back a new owner sweeps: the ticks its predecessor may not have swept, in the
/// takeover's time (a session timeout and the takeover delay)…
const SWEEP_BACK: chrono::Duration = chrono::Duration::minutes(1);
/// …and at most this many of a job's ticks.
pub(super) const SWEEP_BACK_TICKS: usize = 10;
/// At most this many ticks of one job begin their sweep at one wake (a long stall does not
/// flood).
const SWEEP_BURST: usize = 100;
/// A tick's sweep is sent this many times at most…
const SWEEP_ATTEMPTS: u32 = 3;
/// …this long apart.
const SWEEP_RETRY: chrono::Duration = chrono::Duration::seconds(2);

/// One tick's sweep, from its start to its answer.
#[derive(Debug)]
enum Sweep {
    /// The members of the tick's instant are being read.
    Reading,
    /// Read: sent once `at` has come.
    Due {
        at: DateTime<Utc>,
        members: Vec<LiveMember>,
        attempts: u32,
    },
    /// Sent: its answer is awaited.
    Sent {
        members: Vec<LiveMember>,
        attempts: u32,
    },
}

/// What the sweeps are lent for one input.
pub(super) struct Lent<'a> {
    /// The group's broadcast jobs (enabled ones: a disabled job runs nowhere, and nobody
    /// missed it).
    pub jobs: &'a HashMap<JobName, Arc<JobConfig>>,
    /// This node's token while it may fire; `None` otherwise.
    pub token: Option<FencingToken>,
    pub stopping: bool,
    pub steering: &'a Steering,
    pub now: DateTime<Utc>,
}

/// The owner's sweeps. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Sweeps {
    /// While this node owns the group's lock: each job's next tick to begin sweeping.
    next: HashMap<JobName, DateTime<Utc>>,
    under_way: BTreeMap<(JobName, DateTime<Utc>), Sweep>,
    /// This node owns the group's lock: it sweeps.
    sweeping: bool,
}

impl Sweeps {
    /// The lock was gained (`may_fire`) or lost. A sweep under way when it is lost is the next
    /// owner's: its look back sweeps it again.
    pub fn lock_changed(&mut self, may_fire: bool, a: &Lent<'_>) {
        if may_fire && !self.sweeping && !a.stopping {
            self.sweeping = true;
            self.look_back(a);
        } else if !may_fire {
            self.stop();
        }
    }

    /// The node stops: it sweeps no more (the next owner's look back sweeps what it leaves).
    pub fn stop(&mut self) {
        self.sweeping = false;
        self.next.clear();
        self.under_way.clear();
    }

    /// Every job's sweeps start at its ticks of the last [`SWEEP_BACK`], the last
    /// [`SWEEP_BACK_TICKS`] of them at most: the previous owner's last sweeps may not have
    /// happened, and a sweep done twice creates nothing twice.
    fn look_back(&mut self, a: &Lent<'_>) {
        for (name, job) in a.jobs {
            let mut back = VecDeque::with_capacity(SWEEP_BACK_TICKS);
            let mut tick = job.next_tick_after(a.now - SWEEP_BACK);
            while let Some(at) = tick.filter(|at| *at <= a.now) {
                if back.len() == SWEEP_BACK_TICKS {
                    back.pop_front();
                }
                back.push_back(at);
                tick = job.next_tick_after(at);
            }
            if let Some(first) = back.front().copied().or(tick) {
                self.next.entry(name.clone()).or_insert(first);
            }
        }
    }

    /// The schedule was reloaded: a job gone is no longer swept; one new to it had no ticks
    /// before, so its sweeps start with its next.
    pub fn reloaded(&mut self, jobs: &HashMap<JobName, Arc<JobConfig>>, now: DateTime<Utc>) {
        self.next.retain(|job, _| jobs.contains_key(job));
        self.under_way.retain(|(job, _), _| jobs.contains_key(job));
        if !self.sweeping {
            return;
        }
        for (name, job) in jobs {
            if let (false, Some(next)) = (self.next.contains_key(name), job.next_tick_after(now)) {
                self.next.insert(name.clone(), next);
            }
        }
    }

    /// When the next sweep begins, or one read is due.
    pub fn next_deadline(&self, jobs: &HashMap<JobName, Arc<JobConfig>>) -> Option<DateTime<Utc>> {
        let begin = self
            .next
            .iter()
            .filter_map(|(name, tick)| Some(jobs.get(name)?.start_of(*tick)));
        let due = self.under_way.values().filter_map(|sweep| match sweep {
            Sweep::Due { at, .. } => Some(*at),
            _ => None,
        });
        begin.chain(due).min()
    }

    /// Time passed: the ticks that have started have their members read; the sweeps due go
    /// out.
    pub fn tick(&mut self, a: &Lent<'_>, out: &mut Vec<Action>) {
        let Some(token) = a.token.filter(|_| self.sweeping && !a.stopping) else {
            return;
        };
        self.begin_due(a, out);
        let due: Vec<(JobName, DateTime<Utc>)> = self
            .under_way
            .iter()
            .filter(|(_, sweep)| matches!(sweep, Sweep::Due { at, .. } if *at <= a.now))
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            let Some(Sweep::Due {
                members, attempts, ..
            }) = self.under_way.remove(&key)
            else {
                continue;
            };
            let Some(job) = a.jobs.get(&key.0) else {
                continue;
            };
            out.push(Action::Broadcast(BroadcastAction::Sweep {
                job: key.0.clone(),
                tick: key.1,
                members: members.clone(),
                requires: job
                    .broadcast
                    .as_ref()
                    .map(|b| b.requires.clone())
                    .unwrap_or_default(),
                token,
                keep: job.history,
            }));
            let sent = Sweep::Sent {
                members,
                attempts: attempts + 1,
            };
            self.under_way.insert(key, sent);
        }
    }

    /// The ticks that have started begin their sweep: their members are read now, at the
    /// tick's start, not when the sweep looks.
    fn begin_due(&mut self, a: &Lent<'_>, out: &mut Vec<Action>) {
        for (name, next) in &mut self.next {
            let Some(job) = a.jobs.get(name) else {
                continue;
            };
            for _ in 0..SWEEP_BURST {
                if job.start_of(*next) > a.now {
                    break;
                }
                if !a.steering.paused(name) {
                    self.under_way.insert((name.clone(), *next), Sweep::Reading);
                    out.push(Action::Broadcast(BroadcastAction::ReadMembers {
                        job: name.clone(),
                        tick: *next,
                    }));
                }
                match job.next_tick_after(*next) {
                    Some(after) => *next = after,
                    None => break,
                }
            }
        }
    }

    /// Answer to [`BroadcastAction::ReadMembers`]. Members that could not be read leave the tick
    /// unswept by this owner (logged); the next owner's look back may sweep it.
    pub fn members_read(
        &mut self,
        jobs: &HashMap<JobName, Arc<JobConfig>>,
        job: &JobName,
        tick: DateTime<Utc>,
        result: Result<Vec<LiveMember>, String>,
    ) {
        let key = (job.clone(), tick);
        if !matches!(self.under_way.get(&key), Some(Sweep::Reading)) {
            return;
        }
        match (result, jobs.get(job)) {
            (Ok(members), Some(config)) => {
                let after = chrono::Duration::from_std(SWEEP_AFTER).unwrap_or_default();
                let sweep = Sweep::Due {
                    at: config.start_of(tick) + after,
                    members,
                    attempts: 0,
                };
                self.under_way.insert(key, sweep);
            }
            (Ok(_), None) => {
                self.under_way.remove(&key);
            }
            (Err(why), _) => {
                tracing::warn!(job = %job, %tick, error = why, "broadcast tick not swept: members not read");
                self.under_way.remove(&key);
            }
        }
    }

    /// Answer to [`BroadcastAction::Sweep`]: done, or tried again [`SWEEP_RETRY`] later while
    /// attempts are left and the lock has not moved (the driver logged what it did).
    pub fn swept(
        &mut self,
        job: &JobName,
        tick: DateTime<Utc>,
        result: Result<(), SweepFailed>,
        now: DateTime<Utc>,
    ) {
        let key = (job.clone(), tick);
        let Some(Sweep::Sent { attempts, .. }) = self.under_way.get(&key) else {
            return;
        };
        let again = match &result {
            Ok(()) | Err(SweepFailed::LockMoved) => false,
            Err(SweepFailed::Failed(why)) if *attempts < SWEEP_ATTEMPTS => {
                tracing::debug!(job = %job, %tick, error = why, "broadcast sweep failed; trying again");
                true
            }
            Err(SweepFailed::Failed(why)) => {
                tracing::warn!(job = %job, %tick, error = why, attempts, "broadcast tick not swept");
                false
            }
        };
        if !again {
            self.under_way.remove(&key);
            return;
        }
        if let Some(Sweep::Sent { members, attempts }) = self.under_way.remove(&key) {
            let retry = Sweep::Due {
                at: now + SWEEP_RETRY,
                members,
                attempts,
            };
            self.under_way.insert(key, retry);
        }
    }
}
