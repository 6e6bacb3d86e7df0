//! The owner's sweep of each broadcast tick (issue 36): at the tick's start the members of that
//! instant are read (those live then, and those gone since that were members at it); once
//! [`SWEEP_AFTER`] has passed, the tick's records are read, and each of those members that
//! carries the job's `requires`, joined before the tick and has no record of it is owed a
//! `missed` record — handed to the claim path like any gap's record (issue 50) — while the
//! open runs of those gone since are closed. A sweep whose reading or records failed is tried
//! again while this node owns the lock; one the lock moved under is the next owner's, whose
//! look back sweeps it again.
//!
//! Owns: while this node owns the group's lock, each broadcast job's next tick to sweep, the
//! sweeps under way (members being read, due, the tick being read, its records out) and their
//! attempts; who is owed a record.
//! Must not: read or write anything (the driver does, on [`BroadcastAction::ReadMembers`],
//! [`BroadcastAction::ReadTick`] and [`BroadcastAction::CloseGone`]; the claim path writes the
//! records), nor run a member's tick (`broadcast`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::protocol::{Action, BroadcastAction, ClaimRefused, TickRecords};
use super::steering::Steering;
use crate::config::JobConfig;
use crate::ids::{FencingToken, JobName, NodeId};
use crate::layout::Keep;
use crate::lock::node::LiveMember;
use crate::run::RunRecord;

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
/// A tick's records are read this many times at most…
const SWEEP_ATTEMPTS: u32 = 3;
/// …this long apart.
const SWEEP_RETRY: chrono::Duration = chrono::Duration::seconds(2);

/// One tick's sweep, from its start to its answer.
#[derive(Debug)]
enum Sweep {
    /// The members of the tick's instant are being read.
    Reading,
    /// Read: the tick's records are read once `at` has come.
    Due {
        at: DateTime<Utc>,
        members: Vec<LiveMember>,
        attempts: u32,
    },
    /// The tick's records are being read.
    Looking {
        members: Vec<LiveMember>,
        attempts: u32,
    },
    /// The `missed` records owed are out on the claim path: `out` not answered yet; `failed`:
    /// one could not be written.
    Recording {
        members: Vec<LiveMember>,
        attempts: u32,
        out: usize,
        failed: bool,
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
    /// The most members a tick of each job had since this node began sweeping it: a prune is
    /// asked for when the job holds more than `history` ticks of that many.
    peak_members: HashMap<JobName, usize>,
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
        if a.token.is_none() || !self.sweeping || a.stopping {
            return;
        }
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
            if !a.jobs.contains_key(&key.0) {
                continue;
            }
            out.push(Action::Broadcast(BroadcastAction::ReadTick {
                job: key.0.clone(),
                tick: key.1,
            }));
            let looking = Sweep::Looking {
                members,
                attempts: attempts + 1,
            };
            self.under_way.insert(key, looking);
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

    /// Answer to [`BroadcastAction::ReadTick`]: the `missed` records owed, for the claim path
    /// (the sweep waits for their answers in [`Sweeps::recorded`]); the open runs of the members
    /// gone since closed, and the job's records beyond `history` per member pruned.
    pub fn tick_read(
        &mut self,
        job: &JobName,
        tick: DateTime<Utc>,
        result: Result<TickRecords, String>,
        a: &Lent<'_>,
        out: &mut Vec<Action>,
    ) -> Vec<RunRecord> {
        let key = (job.clone(), tick);
        if !matches!(self.under_way.get(&key), Some(Sweep::Looking { .. })) {
            return Vec::new();
        }
        let Some(Sweep::Looking { members, attempts }) = self.under_way.remove(&key) else {
            return Vec::new();
        };
        let (Some(token), Some(config)) = (a.token.filter(|_| !a.stopping), a.jobs.get(job)) else {
            return Vec::new();
        };
        let read = match result {
            Ok(read) => read,
            Err(why) => {
                self.failed(key, members, attempts, &why, a.now);
                return Vec::new();
            }
        };
        let gone: Vec<NodeId> = members
            .iter()
            .filter(|member| !read.live.contains(&member.node_id))
            .map(|member| member.node_id.clone())
            .collect();
        if !gone.is_empty() {
            out.push(Action::Broadcast(BroadcastAction::CloseGone {
                job: job.clone(),
                through: tick,
                nodes: gone,
            }));
        }
        // Pruned by ticks: `history` of them are kept whether a member was away or not. The
        // listing a prune costs is asked for once the records could hold more.
        let peak = self.peak_members.entry(job.clone()).or_default();
        *peak = (*peak).max(members.len()).max(1);
        if read.records > config.history.saturating_mul(*peak) {
            // A broadcast's records are ticks': no submission id to remember.
            let remember = Duration::ZERO;
            out.push(Action::Prune {
                job: job.clone(),
                keep: Keep::Ticks(config.history),
                remember,
            });
        }
        let owed = owed_records(config, tick, &members, &read, token, a.now);
        if owed.is_empty() {
            tracing::debug!(job = %job, %tick, "broadcast tick swept: every member recorded");
            return owed;
        }
        let missed: Vec<&str> = owed.iter().map(|record| record.node_id.as_str()).collect();
        tracing::warn!(job = %job, %tick, ?missed, "broadcast tick not claimed in time by live members: recorded missed");
        let recording = Sweep::Recording {
            members,
            attempts,
            out: owed.len(),
            failed: false,
        };
        self.under_way.insert(key, recording);
        owed
    }

    /// The claim of one `missed` record of the sweep of `job`'s `tick` was answered: once all
    /// are, the sweep is done, or tried again [`SWEEP_RETRY`] later if one failed while attempts
    /// are left. A record found there is the member's own claim, come first: done. The lock
    /// moved: the next owner's look back sweeps the tick.
    pub fn recorded(
        &mut self,
        job: &JobName,
        tick: DateTime<Utc>,
        result: &Result<(), ClaimRefused>,
        now: DateTime<Utc>,
    ) {
        let key = (job.clone(), tick);
        let Some(Sweep::Recording { out, failed, .. }) = self.under_way.get_mut(&key) else {
            return;
        };
        match result {
            Ok(()) | Err(ClaimRefused::AlreadyClaimed) => {}
            Err(ClaimRefused::NotOwner) => {
                tracing::info!(job = %job, %tick, "broadcast tick not swept: the lock moved; the next owner sweeps it");
                self.under_way.remove(&key);
                return;
            }
            Err(_) => *failed = true,
        }
        *out = out.saturating_sub(1);
        if *out > 0 {
            return;
        }
        if let Some(Sweep::Recording {
            members,
            attempts,
            failed: true,
            ..
        }) = self.under_way.remove(&key)
        {
            self.failed(
                key,
                members,
                attempts,
                "a missed record was not written",
                now,
            );
        }
    }

    /// A sweep's reading or records failed: read again [`SWEEP_RETRY`] later while attempts are
    /// left.
    fn failed(
        &mut self,
        key: (JobName, DateTime<Utc>),
        members: Vec<LiveMember>,
        attempts: u32,
        why: &str,
        now: DateTime<Utc>,
    ) {
        let (job, tick) = (&key.0, key.1);
        if attempts >= SWEEP_ATTEMPTS {
            tracing::warn!(job = %job, %tick, error = why, attempts, "broadcast tick not swept");
            return;
        }
        tracing::debug!(job = %job, %tick, error = why, "broadcast sweep failed; trying again");
        let retry = Sweep::Due {
            at: now + SWEEP_RETRY,
            members,
            attempts,
        };
        self.under_way.insert(key, retry);
    }
}

/// The `missed` records `tick` of broadcast job `config` owes, under `token`: one for each of
/// `members` (those of the tick's instant) that carries the job's `requires`, was a member
/// before the tick, and has no record of it in `read`.
fn owed_records(
    config: &JobConfig,
    tick: DateTime<Utc>,
    members: &[LiveMember],
    read: &TickRecords,
    token: FencingToken,
    now: DateTime<Utc>,
) -> Vec<RunRecord> {
    let requires = config.broadcast.as_ref().map(|b| &b.requires);
    let (tick_ms, now_ms) = (tick.timestamp_millis(), now.timestamp_millis());
    members
        .iter()
        .filter(|member| {
            member.since_unix_ms < tick_ms
                && requires.is_none_or(|requires| requires.is_subset(&member.tags))
                && !read.recorded.contains(&member.node_id)
        })
        .map(|member| {
            let node = (&member.node_id, member.ip.as_str());
            RunRecord::missed_by_member(&config.spec.name, tick_ms, node, token, now_ms)
        })
        .collect()
}
