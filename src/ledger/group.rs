//! Group commit: claims, or record writes, handed in while one multi-op of their kind is out go
//! together in the next one. When submissions come due by the hundred a second, many runs cost
//! one ZooKeeper transaction instead of one each; when they come one at a time, each goes at
//! once, as it would alone.
//!
//! Owns: one session's three queues — claims, `running` records written before a start, final
//! records — and how their units are packed into multi-ops and the answers split back.
//! Must not: change what a claim or a record write means. Each unit's ops and how a failure
//! reads are the [`ClaimPlan`]'s, [`super::update`]'s and [`super::finish`]'s; a group only
//! carries several at once. The unit whose op failed a group is sent again alone (it gets the
//! answer it would have got alone), the others go in the next group; nothing of a failed multi
//! was applied.

use super::Ledger;
use std::collections::VecDeque;
use std::future::Future;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::chains::MarkCreate;
use super::store_claims::StoreClaims;
use super::{Claim, ClaimError, ClaimPlan, UpdateError};
use crate::ids::{FencingToken, SessionId};
use crate::tally;
use crate::zk::{Fault, MultiFault, Written, Zk};

/// Units per multi-op at most: a group's reply lists every op's result.
const MAX_UNITS: usize = 500;
/// Bytes of ops per multi-op at most, well under ZooKeeper's default `jute.maxbuffer` (1 MiB),
/// which a server applies to requests too.
const MAX_BYTES: usize = 256 * 1024;
/// A group this small is never shrunk further: past it, no lost connection is blamed on the
/// size of a request.
const SMALL_GROUP_BYTES: usize = 16 * 1024;
/// Multi-ops of one queue out at once. Units that come while this many are out wait for the
/// next group; below it a unit goes at once. A lane carries at most this many groups per
/// commit round trip: with 2 groups of at most 200 units, an owner delivering to an HTTP target
/// waited on its lanes (issue 23, 2000 due/s on one server: 1450 deliveries a second; with 4 of
/// at most 500, 1730).
const IN_FLIGHT: usize = 4;

/// The queues of one ZooKeeper session. Cloning shares them; the future [`GroupCommit::new`]
/// returns ends once every clone is dropped and the queues are drained.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    client: Ledger,
    /// Submissions' runs, where the delayed queue is kept in PostgreSQL.
    store: Option<StoreClaims>,
    claims: mpsc::UnboundedSender<ClaimUnit>,
    starts: mpsc::UnboundedSender<WriteUnit>,
    finals: mpsc::UnboundedSender<WriteUnit>,
}

impl GroupCommit {
    /// Queues on `client`'s session, and the future that sends them (the caller spawns it).
    /// Its multi-ops are not bounded in time: a claim's answer decides (its caller bounds it and
    /// reads it back), and a record write's caller bounds it.
    pub fn new(client: &Ledger) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, store_lane) = client
            .delayed_store_shared()
            .map(|store| StoreClaims::new(store, client.zk().unbounded()))
            .unzip();
        let client = client.on_zk(client.zk().unbounded());
        let (claims, claims_in) = mpsc::unbounded_channel();
        let (starts, starts_in) = mpsc::unbounded_channel();
        let (finals, finals_in) = mpsc::unbounded_channel();
        let lanes = {
            let client = client.zk().clone();
            async move {
                let store_lane = async move {
                    if let Some(lane) = store_lane {
                        lane.await;
                    }
                };
                tokio::join!(
                    lane(client.clone(), claims_in),
                    lane(client.clone(), starts_in),
                    lane(client, finals_in),
                    store_lane,
                );
            }
        };
        let group = Self {
            client,
            store,
            claims,
            starts,
            finals,
        };
        (group, lanes)
    }

    /// As [`super::claim()`], sent in the next group of claims.
    ///
    /// # Errors
    /// As [`super::claim()`].
    pub async fn claim(&self, plan: ClaimPlan) -> Result<Claim, ClaimError> {
        if let Some(store) = self.store.as_ref().filter(|_| plan.is_submission()) {
            // A run claimed again that is open in ZooKeeper (claimed there before the queue
            // moved) is claimed there, as before.
            let in_store = plan.mode() == crate::run::ClaimMode::Create
                || super::store_claims::holds_open(store.store(), plan.record()).await;
            if in_store {
                return store.claim(self.client.zk(), plan).await;
            }
        }
        let (reply, answer) = oneshot::channel();
        let path = plan.path.clone();
        if let Err(mpsc::error::SendError(unit)) = self.claims.send(ClaimUnit { plan, reply }) {
            return unit.plan.send_alone(&self.client).await;
        }
        match answer.await {
            Ok(Grouped::Done(result)) => result,
            Ok(Grouped::Alone(plan)) => plan.send_alone(&self.client).await,
            // The group's task ended without a word: its multi may have been applied.
            Err(_) => Err(ClaimError::Zk {
                path,
                source: Fault::ConnectionLoss,
            }),
        }
    }

    /// As [`super::update`] (the `running` record before a start), sent in the next group.
    ///
    /// # Errors
    /// As [`super::update`].
    pub async fn update(&self, claim: &mut Claim) -> Result<(), UpdateError> {
        if let Some(store) = self.kept_in_store(claim) {
            return store.update(claim).await;
        }
        self.write(WriteKind::Update, claim, Vec::new()).await
    }

    /// As [`super::finish`] (a run's final record), sent in the next group.
    ///
    /// # Errors
    /// As [`super::finish`].
    pub async fn finish(
        &self,
        claim: &mut Claim,
        marks: Vec<MarkCreate>,
    ) -> Result<(), UpdateError> {
        if let Some(store) = self.kept_in_store(claim) {
            return store.finish(self.client.zk(), claim, marks).await;
        }
        self.write(WriteKind::Finish, claim, marks).await
    }

    /// The store `claim`'s run is kept in, when it is not ZooKeeper.
    fn kept_in_store(&self, claim: &Claim) -> Option<&StoreClaims> {
        self.store
            .as_ref()
            .filter(|store| super::store_claims::kept_by(store.store(), claim))
    }

    async fn write(
        &self,
        kind: WriteKind,
        claim: &mut Claim,
        marks: Vec<MarkCreate>,
    ) -> Result<(), UpdateError> {
        // From here on the stored record may be this one although no reply came: a write sent
        // again alone then takes it for our own (see `update`).
        claim.sent = claim.record.clone();
        let (reply, answer) = oneshot::channel();
        let unit = WriteUnit {
            kind,
            data: claim.record.to_bytes(),
            claim: claim.clone(),
            marks,
            same_session: self.client.session() == claim.session,
            reply,
        };
        let queue = match kind {
            WriteKind::Update => &self.starts,
            WriteKind::Finish => &self.finals,
        };
        let (grouped, marks) = match queue.send(unit) {
            Ok(()) => (answer.await.ok(), None),
            Err(mpsc::error::SendError(unit)) => (None, Some(unit.marks)),
        };
        match grouped {
            Some(Grouped::Done(version)) => {
                claim.version = version;
                Ok(())
            }
            Some(Grouped::Alone(marks)) => self.write_alone(kind, claim, &marks).await,
            None => {
                let marks = marks.unwrap_or_default();
                self.write_alone(kind, claim, &marks).await
            }
        }
    }

    async fn write_alone(
        &self,
        kind: WriteKind,
        claim: &mut Claim,
        marks: &[MarkCreate],
    ) -> Result<(), UpdateError> {
        match kind {
            WriteKind::Update => super::update(&self.client, claim).await,
            WriteKind::Finish => super::finish(&self.client, claim, marks).await,
        }
    }
}

/// A unit's answer: done in a group, or to be sent alone by its caller.
enum Grouped<T, A> {
    Done(T),
    Alone(A),
}

/// What a queue carries, and how a group of it is committed.
trait Unit: Sized + Send + 'static {
    /// Units of one group share it.
    type Key: PartialEq;
    fn key(&self) -> Self::Key;
    /// About how many bytes its ops take in a request.
    fn size(&self) -> usize;
    /// Commits `group` in one multi-op and answers its units; returns those to go again in
    /// the next group, and whether its request went unanswered.
    fn commit(client: Zk, group: Vec<Self>) -> impl Future<Output = Committed<Self>> + Send;
}

/// How a group's multi-op ended, for its lane.
struct Committed<U> {
    /// The units to go again in the next group.
    again: Vec<U>,
    /// The request got no answer: the connection was lost under it.
    unanswered: bool,
}

impl<U> Committed<U> {
    fn answered(again: Vec<U>) -> Self {
        Self {
            again,
            unanswered: false,
        }
    }
}

/// A lane's bound on a group's bytes, shrunk when a big group went unanswered: a server closes
/// the connection on a request past its `jute.maxbuffer` (issue 53: a children list or a data
/// past it is read, but a request past it is not), and a group sent again as big would lose the
/// connection again, with every other request of the session.
struct ByteBound(usize);

impl ByteBound {
    /// A group of `bytes` went unanswered: the next are at most half as big, not below
    /// [`SMALL_GROUP_BYTES`].
    fn unanswered(&mut self, bytes: usize) {
        if bytes <= SMALL_GROUP_BYTES {
            return;
        }
        let half = (bytes / 2).max(SMALL_GROUP_BYTES);
        if half < self.0 {
            self.0 = half;
            tracing::warn!(
                bytes,
                from_now_on = half,
                "a multi-op went unanswered: the connection was lost under it. If the ZooKeeper \
                 servers' jute.maxbuffer is below its size (a server closes the connection on a \
                 larger request), set it back to 1 MiB, ZooKeeper's default; meanwhile this \
                 node sends smaller multi-ops"
            );
        }
    }
}

/// Sends one queue's units: at most [`IN_FLIGHT`] groups out, each taking what queued behind
/// the one before it.
async fn lane<U: Unit>(client: Zk, mut queue: mpsc::UnboundedReceiver<U>) {
    let mut waiting = VecDeque::new();
    let mut out: JoinSet<(Committed<U>, usize)> = JoinSet::new();
    let mut bound = ByteBound(MAX_BYTES);
    let mut open = true;
    loop {
        tokio::select! {
            Some(done) = out.join_next(), if !out.is_empty() => {
                // A group task that panicked dropped its units: their callers get no answer.
                let Ok((committed, bytes)) = done else {
                    continue;
                };
                if committed.unanswered {
                    bound.unanswered(bytes);
                }
                for unit in committed.again.into_iter().rev() {
                    waiting.push_front(unit);
                }
            }
            unit = queue.recv(), if open && out.len() < IN_FLIGHT => match unit {
                Some(unit) => waiting.push_back(unit),
                None => open = false,
            },
            else => return,
        }
        while out.len() < IN_FLIGHT {
            while let Ok(unit) = queue.try_recv() {
                waiting.push_back(unit);
            }
            let Some(group) = next_group(&mut waiting, bound.0) else {
                break;
            };
            let bytes = group.iter().map(Unit::size).sum();
            tracing::trace!(
                units = group.len(),
                bytes,
                waiting = waiting.len(),
                kind = std::any::type_name::<U>(),
                "group sent"
            );
            let committed = U::commit(client.clone(), group);
            out.spawn(async move { (committed.await, bytes) });
        }
    }
}

/// The units at the front of `waiting` that go together, up to the limits (`max_bytes` of
/// ops); `None` when none wait.
fn next_group<U: Unit>(waiting: &mut VecDeque<U>, max_bytes: usize) -> Option<Vec<U>> {
    let first_key = waiting.front()?.key();
    let mut group = Vec::new();
    let mut bytes = 0;
    while let Some(unit) = waiting.front() {
        let fits =
            group.is_empty() || (group.len() < MAX_UNITS && bytes + unit.size() <= max_bytes);
        if !fits || unit.key() != first_key {
            break;
        }
        bytes += unit.size();
        group.extend(waiting.pop_front());
    }
    Some(group)
}

/// Whether a multi-op's request lost its connection (not a timeout: a server that is slow
/// says nothing of the request's size).
fn lost_connection(err: &MultiFault) -> bool {
    matches!(err, MultiFault::Request(Fault::ConnectionLoss))
}

/// The unit whose ops hold the multi's op `index`.
fn owner_of(index: usize, op_counts: &[usize]) -> Option<usize> {
    let mut start = 0;
    for (unit, &count) in op_counts.iter().enumerate() {
        start += count;
        if index < start {
            return Some(unit);
        }
    }
    None
}

/// After a failed multi, of which nothing was applied: the unit that failed it is told to go
/// alone (it then gets the answer it would have got alone), the others go again.
fn split_failed<U>(group: Vec<U>, failing: Option<usize>, alone: impl Fn(U)) -> Vec<U> {
    let mut again = Vec::with_capacity(group.len());
    for (i, unit) in group.into_iter().enumerate() {
        if Some(i) == failing {
            alone(unit);
        } else {
            again.push(unit);
        }
    }
    again
}

struct ClaimUnit {
    plan: ClaimPlan,
    reply: oneshot::Sender<Grouped<Result<Claim, ClaimError>, ClaimPlan>>,
}

impl Unit for ClaimUnit {
    /// One epoch check per multi: claims at one token.
    type Key = FencingToken;

    fn key(&self) -> FencingToken {
        self.plan.token()
    }

    fn size(&self) -> usize {
        self.plan.request_size()
    }

    async fn commit(client: Zk, group: Vec<Self>) -> Committed<Self> {
        let Some(first) = group.first() else {
            return Committed::answered(group);
        };
        let session = SessionId(client.session_id());
        let op_counts: Vec<usize> = group.iter().map(|unit| unit.plan.op_count()).collect();
        let sent = client
            .fenced(
                tally::WriteKind::Claim,
                &first.plan.epoch,
                first.plan.fence_version(),
            )
            .and_then(|mut writer| {
                group
                    .iter()
                    .try_for_each(|unit| unit.plan.add_ops(&mut writer))?;
                Ok(writer.commit())
            });
        let reply = match sent {
            Ok(commit) => commit.await,
            Err(fault) => Err(MultiFault::Request(fault)),
        };
        match reply {
            Ok(mut results) => {
                for (unit, count) in group.into_iter().zip(op_counts) {
                    let rest = results.split_off(count.min(results.len()));
                    let claim = unit.plan.into_claim(&results, session);
                    results = rest;
                    let _ = unit.reply.send(Grouped::Done(Ok(claim)));
                }
                Committed::answered(Vec::new())
            }
            Err(MultiFault::Op { index, fault }) => {
                tracing::debug!(index, error = %fault, claims = group.len(), "a claim failed its group; it goes alone");
                Committed::answered(split_failed(group, owner_of(index, &op_counts), |unit| {
                    let _ = unit.reply.send(Grouped::Alone(unit.plan));
                }))
            }
            // The epoch check or the request failed: the same answer for every claim as if it
            // had gone alone. A lost reply is not sent again: the claims may have been made.
            Err(err) => {
                let unanswered = lost_connection(&err);
                for unit in group {
                    let refused = unit.plan.refusal(err.clone());
                    let _ = unit.reply.send(Grouped::Done(Err(refused)));
                }
                Committed {
                    again: Vec::new(),
                    unanswered,
                }
            }
        }
    }
}

struct WriteUnit {
    kind: WriteKind,
    /// The record as stored: its size counts against the group's limit (a final record can
    /// carry a long error).
    data: Vec<u8>,
    claim: Claim,
    /// The chain marks its final record leaves, in the same multi-op.
    marks: Vec<MarkCreate>,
    /// Only the session that made the claim deletes its guard (see `finish`).
    same_session: bool,
    /// The record's new version, or go alone (with its marks).
    reply: oneshot::Sender<Grouped<i32, Vec<MarkCreate>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    /// The record's compare-and-set.
    Update,
    /// The record's compare-and-set, then the deletes of the guard (same session only) and of
    /// the open marker.
    Finish,
}

impl WriteUnit {
    fn deletes(&self) -> impl Iterator<Item = &String> {
        (self.kind == WriteKind::Finish)
            .then(|| self.claim.final_deletes(self.same_session))
            .into_iter()
            .flatten()
    }
}

impl Unit for WriteUnit {
    type Key = ();

    fn key(&self) {}

    fn size(&self) -> usize {
        // The ops' headers and the paths to delete, generously.
        let marks: usize = self
            .marks
            .iter()
            .map(|m| m.path.len() + m.data.len() + 64)
            .sum();
        self.data.len() + self.claim.path.len() * 3 + 256 + marks
    }

    async fn commit(client: Zk, group: Vec<Self>) -> Committed<Self> {
        let mut op_counts = Vec::with_capacity(group.len());
        let why = match group.first().map(|unit| unit.kind) {
            Some(WriteKind::Update) => tally::WriteKind::Start,
            _ => tally::WriteKind::Final,
        };
        let mut multi = client.multi(why);
        let built = group.iter().try_for_each(|unit| {
            let claim = &unit.claim;
            multi.add_set_data(&claim.path, &unit.data, Some(claim.version))?;
            super::chains::add_creates(&unit.marks, &mut multi)?;
            let mut count = 1 + unit.marks.len();
            for path in unit.deletes() {
                multi.add_delete(path, None)?;
                count += 1;
            }
            op_counts.push(count);
            Ok::<(), Fault>(())
        });
        let reply = match built {
            Ok(()) => multi.commit().await,
            Err(fault) => Err(MultiFault::Request(fault)),
        };
        match reply {
            Ok(mut results) => {
                for (unit, count) in group.into_iter().zip(op_counts) {
                    let rest = results.split_off(count.min(results.len()));
                    let version = match results.first() {
                        Some(Written::SetData { stat }) => stat.version,
                        _ => unit.claim.version + 1,
                    };
                    results = rest;
                    let _ = unit.reply.send(Grouped::Done(version));
                }
                Committed::answered(Vec::new())
            }
            Err(MultiFault::Op { index, fault }) => {
                tracing::debug!(index, error = %fault, writes = group.len(), "a record write failed its group; it goes alone");
                Committed::answered(split_failed(group, owner_of(index, &op_counts), |unit| {
                    let _ = unit.reply.send(Grouped::Alone(unit.marks));
                }))
            }
            // A lost reply: each goes again alone, where `update` tells our own earlier write
            // from someone else's.
            Err(err @ (MultiFault::Request(_) | MultiFault::Fenced(_))) => {
                for unit in group {
                    let _ = unit.reply.send(Grouped::Alone(unit.marks));
                }
                Committed {
                    again: Vec::new(),
                    unanswered: lost_connection(&err),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ByteBound, MAX_BYTES, SMALL_GROUP_BYTES, owner_of};

    #[test]
    fn a_big_group_that_lost_its_connection_halves_the_next_but_a_small_one_does_not() {
        let mut bound = ByteBound(MAX_BYTES);
        bound.unanswered(SMALL_GROUP_BYTES);
        assert_eq!(bound.0, MAX_BYTES, "a small group's loss is the network's");
        bound.unanswered(200_000);
        assert_eq!(bound.0, 100_000);
        bound.unanswered(150_000);
        assert_eq!(
            bound.0, 75_000,
            "groups lost together: the smallest half holds"
        );
        bound.unanswered(200_000);
        assert_eq!(bound.0, 75_000, "never grown by a later loss");
        for _ in 0..10 {
            let next = bound.0;
            bound.unanswered(next);
        }
        assert_eq!(bound.0, SMALL_GROUP_BYTES, "not below the floor");
    }

    #[test]
    fn an_op_index_names_the_unit_whose_ops_hold_it() {
        let counts = [3, 1, 2];
        assert_eq!(owner_of(0, &counts), Some(0));
        assert_eq!(owner_of(2, &counts), Some(0));
        assert_eq!(owner_of(3, &counts), Some(1));
        assert_eq!(owner_of(5, &counts), Some(2));
        assert_eq!(owner_of(6, &counts), None);
    }
}
