//! Random interleavings of time, connections, acquisitions, membership readings, claim answers,
//! run ends, record answers, pauses and a stop, for a machine with two broadcast jobs (issue
//! 36), checked after every step: a tick is claimed once per node, only on time and only after
//! the node joined, while connected; a run starts only from a granted claim, once; every run's
//! final record is written, again only after a failure; the owner sweeps only while it owns,
//! reading a tick's members at its start and its records no sooner than `SWEEP_AFTER` later,
//! again only after a failure, three times at most, and sends a `missed` record through the
//! claim path, under its token, only for a member of the tick's instant; the stop waits for
//! every broadcast run and its record.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::lock::node::LiveMember;

#[derive(Debug, Clone)]
enum Step {
    Advance(u16),
    /// 0: owner, 1: follower, 2: disconnected, 3: a new acquisition.
    Lock(u8),
    /// Answer the membership reading: joined this many ms before now (negative: after), not
    /// there, or failed.
    Membership(i16, u8),
    Claim(u8, u8),
    End(u8, u8),
    Write(u8, u8),
    Pause(bool),
    /// Answer a sweep's member reading or a sweep: which one, and how.
    Sweep(u8, u8),
    Shutdown,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0u16..1500).prop_map(Step::Advance),
        1 => (2000u16..6000).prop_map(Step::Advance),
        2 => (0u8..4).prop_map(Step::Lock),
        2 => (any::<i16>(), any::<u8>()).prop_map(|(ms, k)| Step::Membership(ms, k)),
        5 => (any::<u8>(), any::<u8>()).prop_map(|(i, k)| Step::Claim(i, k)),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(i, k)| Step::End(i, k)),
        4 => (any::<u8>(), any::<u8>()).prop_map(|(i, k)| Step::Write(i, k)),
        1 => any::<bool>().prop_map(Step::Pause),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(i, k)| Step::Sweep(i, k)),
        1 => Just(Step::Shutdown),
    ]
}

fn sim_jobs() -> String {
    [
        job("f", EVERY_SECOND, "broadcast = true"),
        job(
            "g",
            "*/2 * * * * *",
            "broadcast = true\nconcurrency = \"allow\"",
        ),
    ]
    .join("")
}

#[derive(Default)]
struct World {
    now: i64,
    token: i32,
    status: LockStatus,
    reading: bool,
    /// The membership answered in this connection.
    since: Option<i64>,
    claims: Vec<(ClaimId, RunRecord)>,
    /// Every (job, tick) this node claimed, and whether the claim went out at or before the tick's
    /// late-tick limit.
    claimed: BTreeSet<(String, i64)>,
    granted: BTreeMap<String, RunRecord>,
    running: BTreeMap<String, Claim>,
    ended: BTreeSet<String>,
    writes: Vec<Claim>,
    written: BTreeSet<String>,
    /// Final records asked again: only after a failed write.
    failed_writes: BTreeSet<String>,
    /// Final records sent again after a failed write: like an owner's, a stop does not wait
    /// for them (the driver's stop waits for the requests out).
    resent: BTreeSet<String>,
    handed_over: bool,
    shutdown: bool,
    /// When the stop began: the claims it waits for, it waits for until the handover's limit.
    shutdown_at: Option<i64>,
    stopped: bool,
    /// Sweeps' member readings out: (job, tick).
    sweep_reads: Vec<(JobName, DateTime<Utc>)>,
    /// Sweeps' readings of their tick out: (job, tick).
    sweeps_out: Vec<(JobName, DateTime<Utc>)>,
    /// Sweeps' `missed` records out on the claim path.
    sweep_claims: Vec<TickClaim>,
    /// The members each sweep under way was answered, and how often it was sent in this hold
    /// of the lock.
    sweep_members: BTreeMap<(JobName, DateTime<Utc>), (Vec<LiveMember>, u32)>,
}

impl World {
    fn feed(&mut self, m: &mut FireMachine, input: Input) -> Result<(), TestCaseError> {
        let actions = m.handle(input, t(self.now));
        for action in actions {
            self.perform(action)?;
        }
        Ok(())
    }

    fn perform(&mut self, action: Action) -> Result<(), TestCaseError> {
        match action {
            Action::Broadcast(BroadcastAction::ReadMembership) => {
                prop_assert!(self.status.connected, "read only while connected");
                self.reading = true;
            }
            Action::Claims(ClaimAction::Claim(TickClaim {
                id,
                record,
                fence: Fence::Member,
                ..
            })) => {
                prop_assert!(self.status.connected, "a claim only while connected");
                prop_assert!(!self.shutdown, "no claim once stopping: {record:?}");
                let tick = record.scheduled_unix_ms;
                let since = self.since.map(|s| t(s).timestamp_millis());
                prop_assert!(
                    since.is_some_and(|since| since < tick),
                    "only a tick after the node joined ({since:?}): {record:?}"
                );
                prop_assert!(
                    t(self.now).timestamp_millis() <= tick + 1_000,
                    "only on time: at {} for {tick}",
                    self.now
                );
                prop_assert!(
                    self.claimed.insert((record.job.to_string(), tick)),
                    "claimed twice on this node: {record:?}"
                );
                prop_assert!(record.broadcast && record.run_id.ends_with("~n1"));
                self.claims.push((id, record));
            }
            Action::Runs(RunAction::Start { claim, .. }) => {
                prop_assert!(!self.shutdown, "no start once stopping");
                let granted = self.granted.remove(&claim.record.run_id);
                prop_assert!(
                    granted.is_some(),
                    "a start only from a granted claim: {claim:?}"
                );
                self.running.insert(claim.record.run_id.clone(), claim);
            }
            Action::Claims(ClaimAction::WriteRecord(claim)) => {
                let run_id = claim.record.run_id.clone();
                self.granted.remove(&run_id);
                prop_assert!(claim.record.status.is_final(), "{claim:?}");
                if self.written.contains(&run_id)
                    || self.writes.iter().any(|w| w.record.run_id == run_id)
                {
                    prop_assert!(
                        false,
                        "a final record sent twice while one is out: {run_id}"
                    );
                }
                if !self.ended.contains(&run_id) {
                    let again = self.failed_writes.remove(&run_id);
                    if again {
                        self.resent.insert(run_id.clone());
                    }
                    prop_assert!(
                        again
                            || matches!(
                                claim.record.status,
                                RunStatus::Skipped | RunStatus::Missed
                            ),
                        "a final record again only after a failed write: {claim:?}"
                    );
                }
                self.ended.remove(&run_id);
                self.writes.push(claim);
            }
            Action::Broadcast(BroadcastAction::ReadMembers { job, tick }) => {
                prop_assert!(self.status.may_fire, "only the owner sweeps");
                prop_assert!(!self.shutdown, "no sweep begins once stopping");
                prop_assert!(
                    tick <= t(self.now),
                    "a tick's members are read from its start on"
                );
                let key = (job, tick);
                prop_assert!(
                    !self.sweep_reads.contains(&key) && !self.sweeps_out.contains(&key),
                    "one sweep of a tick at a time: {key:?}"
                );
                self.sweep_members.remove(&key);
                self.sweep_reads.push(key);
            }
            Action::Broadcast(BroadcastAction::ReadTick { job, tick }) => {
                prop_assert!(self.status.may_fire, "only the owner sweeps");
                let after =
                    chrono::Duration::from_std(super::super::sweeps::SWEEP_AFTER).expect("small");
                prop_assert!(
                    tick + after <= t(self.now),
                    "looked at SWEEP_AFTER past its start"
                );
                let key = (job, tick);
                prop_assert!(
                    !self.sweeps_out.contains(&key),
                    "one sweep out per tick: {key:?}"
                );
                let Some((_, sent)) = self.sweep_members.get_mut(&key) else {
                    prop_assert!(false, "a sweep only with its members read: {key:?}");
                    return Ok(());
                };
                *sent += 1;
                prop_assert!(*sent <= 3, "three attempts at most: {key:?}");
                self.sweeps_out.push(key);
            }
            Action::Claims(ClaimAction::Claim(claim)) if claim.fence == Fence::Epoch => {
                prop_assert!(self.status.may_fire, "only the owner sweeps: {claim:?}");
                prop_assert_eq!(
                    Some(claim.record.fencing_token),
                    self.status.token,
                    "under the owner's token"
                );
                let record = &claim.record;
                prop_assert!(
                    record.broadcast && record.status == RunStatus::Missed,
                    "the owner's claims of a broadcast job are its sweep's missed records: {claim:?}"
                );
                let tick = DateTime::from_timestamp_millis(record.scheduled_unix_ms);
                let key = (record.job.clone(), tick.unwrap_or_default());
                let members = self.sweep_members.get(&key).map(|(members, _)| members);
                prop_assert!(
                    members.is_some_and(|members| {
                        members.iter().any(|m| m.node_id == record.node_id)
                    }),
                    "missed only for a member of the tick's instant: {claim:?}"
                );
                self.sweep_claims.push(claim);
            }
            Action::Broadcast(BroadcastAction::CloseGone { .. }) | Action::Prune { .. } => {
                prop_assert!(self.status.may_fire, "only the owner sweeps");
            }
            Action::Broadcast(BroadcastAction::CloseOwn { before, alive, .. }) => {
                prop_assert_eq!(
                    Some(before),
                    self.since.map(t),
                    "closed before the membership"
                );
                for run_id in self.running.keys() {
                    prop_assert!(
                        alive.contains(run_id),
                        "a run alive here is not closed: {run_id}"
                    );
                }
            }
            Action::Runs(RunAction::Cancel { run_id }) => {
                prop_assert!(
                    self.running.contains_key(&run_id),
                    "cancel a run alive: {run_id}"
                );
            }
            Action::Lock(LockAction::HandOver) => self.handed_over = true,
            Action::Stopped => {
                let first_writes = self
                    .writes
                    .iter()
                    .filter(|w| !self.resent.contains(&w.record.run_id));
                let limit = i64::try_from(WITHDRAW_LIMIT.as_millis()).unwrap_or(i64::MAX);
                let claims_given_up = self
                    .shutdown_at
                    .is_some_and(|at| self.now >= at.saturating_add(limit));
                prop_assert!(
                    self.running.is_empty()
                        && first_writes.count() == 0
                        && (self.claims.is_empty() || claims_given_up),
                    "stopped with broadcast work left: {:?} {:?} {:?}",
                    self.running.keys(),
                    self.writes,
                    self.claims
                );
                self.stopped = true;
            }
            Action::Claims(ClaimAction::Claim(claim)) => {
                prop_assert!(false, "a broadcast job on the owner's path: {claim:?}")
            }
            Action::CatchUp(CatchUpAction::ListRecords(job)) => {
                prop_assert!(false, "catch-up of a broadcast job: {job}")
            }
            _ => {}
        }
        Ok(())
    }

    fn lock(&mut self, m: &mut FireMachine, kind: u8) -> Result<(), TestCaseError> {
        let status = lock_step(kind, &mut self.token);
        if !status.connected {
            self.since = None;
            self.reading = false;
        }
        if !status.may_fire {
            // A sweep under way is the next owner's; its answers are not given.
            self.sweep_members.clear();
            self.sweep_reads.clear();
            self.sweeps_out.clear();
        }
        self.status = status;
        self.feed(m, Input::Lock(LockInput::Changed(status)))
    }
}

impl World {
    /// Answers a sweep's member reading (with members, or failed) or a sweep (done, failed,
    /// or the lock moved).
    fn answer_sweep(&mut self, m: &mut FireMachine, i: u8, kind: u8) -> Result<(), TestCaseError> {
        if kind % 2 == 0 {
            let Some((at, (job, tick))) = pick(&self.sweep_reads, i) else {
                return Ok(());
            };
            self.sweep_reads.remove(at);
            let members = vec![LiveMember {
                node_id: NodeId::new(format!("m{i}")),
                ip: "10.0.0.9".into(),
                tags: BTreeSet::new(),
                since_unix_ms: 0,
            }];
            let result = if kind % 4 == 0 {
                self.sweep_members
                    .insert((job.clone(), tick), (members.clone(), 0));
                Ok(members)
            } else {
                Err("no answer".to_owned())
            };
            return self.feed(
                m,
                Input::Broadcast(BroadcastInput::MembersRead { job, tick, result }),
            );
        }
        if let Some((at, claim)) = pick(&self.sweep_claims, i).filter(|_| kind % 2 == 0) {
            self.sweep_claims.remove(at);
            let result = match kind % 8 {
                0 | 2 => Ok(Box::new(granted(&claim))),
                4 => Err(ClaimRefused::AlreadyClaimed),
                6 if kind > 128 => Err(ClaimRefused::NotOwner),
                _ => Err(ClaimRefused::Failed("no answer".into())),
            };
            let id = claim.id;
            return self.feed(m, Input::Claims(ClaimInput::Done { id, result }));
        }
        let Some((at, (job, tick))) = pick(&self.sweeps_out, i) else {
            return Ok(());
        };
        self.sweeps_out.remove(at);
        let key = (job.clone(), tick);
        let members: Vec<NodeId> = self
            .sweep_members
            .get(&key)
            .map(|(members, _)| members.iter().map(|m| m.node_id.clone()).collect())
            .unwrap_or_default();
        let result = match kind % 3 {
            // Nobody recorded: each member is owed a record.
            0 => Ok(TickRecords {
                live: members.into_iter().collect(),
                ..TickRecords::default()
            }),
            1 => Err("no answer".to_owned()),
            // Every member recorded: the sweep is done.
            _ => {
                self.sweep_members.remove(&key);
                Ok(TickRecords {
                    recorded: members.iter().cloned().collect(),
                    live: members.into_iter().collect(),
                    records: 1,
                })
            }
        };
        self.feed(
            m,
            Input::Broadcast(BroadcastInput::TickRead { job, tick, result }),
        )
    }
}

fn pick<T: Clone>(items: &[T], i: u8) -> Option<(usize, T)> {
    (!items.is_empty()).then(|| {
        let at = usize::from(i) % items.len();
        (at, items[at].clone())
    })
}

fn run_steps(steps: &[Step]) -> Result<(), TestCaseError> {
    let mut m = machine(&sim_jobs());
    let mut w = World {
        token: 7,
        ..World::default()
    };
    for step in steps {
        match step.clone() {
            Step::Advance(ms) => {
                w.now += i64::from(ms);
                w.feed(&mut m, Input::Tick)?;
            }
            Step::Lock(kind) => w.lock(&mut m, kind)?,
            Step::Membership(ago, kind) if w.reading => {
                w.reading = false;
                let result = match kind % 4 {
                    0 | 1 => {
                        w.since = Some(w.now - i64::from(ago));
                        Ok(Some(t(w.now - i64::from(ago))))
                    }
                    2 => Ok(None),
                    _ => Err("no answer".to_owned()),
                };
                w.feed(
                    &mut m,
                    Input::Broadcast(BroadcastInput::MembershipRead(result)),
                )?;
            }
            Step::Membership(..) => {}
            Step::Claim(i, kind) => {
                let Some((at, (id, record))) = pick(&w.claims, i) else {
                    continue;
                };
                w.claims.remove(at);
                let result = match kind % 4 {
                    0 | 1 => {
                        if !record.status.is_final() {
                            w.granted.insert(record.run_id.clone(), record.clone());
                        }
                        Ok(Box::new(granted_broadcast(&record)))
                    }
                    2 => Err(ClaimRefused::AlreadyClaimed),
                    _ => Err(ClaimRefused::NotOwner),
                };
                w.feed(&mut m, Input::Claims(ClaimInput::Done { id, result }))?;
            }
            Step::End(i, kind) => {
                let running: Vec<Claim> = w.running.values().cloned().collect();
                let Some((_, claim)) = pick(&running, i) else {
                    continue;
                };
                w.running.remove(&claim.record.run_id);
                w.ended.insert(claim.record.run_id.clone());
                let outcome = if kind % 2 == 0 {
                    RunOutcome::Exited { code: 0 }
                } else {
                    RunOutcome::Cancelled
                };
                w.feed(&mut m, ended(&claim, outcome, t(w.now)))?;
            }
            Step::Write(i, kind) => {
                let Some((at, claim)) = pick(&w.writes, i) else {
                    continue;
                };
                w.writes.remove(at);
                let run_id = claim.record.run_id.clone();
                let write = if kind % 3 == 0 {
                    w.failed_writes.insert(run_id.clone());
                    RecordWrite::Failed
                } else {
                    w.written.insert(run_id.clone());
                    RecordWrite::Written(1)
                };
                w.feed(
                    &mut m,
                    Input::Claims(ClaimInput::RecordWritten { run_id, write }),
                )?;
            }
            Step::Pause(on) => {
                let mut pauses = Pauses::new();
                if on {
                    pauses.insert(
                        JobName::new("f"),
                        crate::control::Pause::new(None, "ops@h1", 0),
                    );
                }
                w.feed(&mut m, Input::Control(ControlInput::PausesRead(pauses)))?;
            }
            Step::Sweep(i, kind) => w.answer_sweep(&mut m, i, kind)?,
            Step::Shutdown => {
                w.shutdown = true;
                w.shutdown_at.get_or_insert(w.now);
                w.feed(&mut m, Input::Shutdown)?;
            }
        }
        if w.handed_over {
            w.handed_over = false;
            w.feed(&mut m, Input::Lock(LockInput::Released))?;
        }
    }
    // Drain: every claim answered, every run ended, every record written; then stop.
    w.shutdown = true;
    w.shutdown_at.get_or_insert(w.now);
    w.feed(&mut m, Input::Shutdown)?;
    for _ in 0..64 {
        if w.handed_over {
            w.handed_over = false;
            w.feed(&mut m, Input::Lock(LockInput::Released))?;
        }
        if let Some((id, record)) = w.claims.pop() {
            let result = Ok(Box::new(granted_broadcast(&record)));
            if !record.status.is_final() {
                w.granted.insert(record.run_id.clone(), record.clone());
            }
            w.feed(&mut m, Input::Claims(ClaimInput::Done { id, result }))?;
        } else if let Some((_, claim)) = w.running.pop_first() {
            w.ended.insert(claim.record.run_id.clone());
            w.feed(&mut m, ended(&claim, RunOutcome::Cancelled, t(w.now)))?;
        } else if let Some(claim) = w.writes.pop() {
            let run_id = claim.record.run_id.clone();
            w.written.insert(run_id.clone());
            let write = RecordWrite::Written(1);
            w.feed(
                &mut m,
                Input::Claims(ClaimInput::RecordWritten { run_id, write }),
            )?;
        } else {
            w.now += 3_000;
            w.feed(&mut m, Input::Tick)?;
        }
        if w.stopped {
            return Ok(());
        }
    }
    prop_assert!(w.stopped, "the stop ends once the broadcast work is done");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn broadcast_ticks_run_once_per_node_on_time_after_joining_and_the_stop_waits(
        steps in proptest::collection::vec(step(), 1..120)
    ) {
        run_steps(&steps)?;
    }
}
