//! The fire driver's I/O for broadcast jobs (issue 36): reading when this node's member znode
//! was created, a member's claim of its own run of a tick (fenced by that znode), and the owner's
//! sweep's readings — a tick's members, what the ledger holds of the tick — and its closing of
//! the runs members left open.
//!
//! Owns: turning the machine's broadcast actions into reads of `members/` and the ledger's
//! broadcast use cases, on the current session.
//! Must not: decide whether a tick runs here, who owes it, or when it is swept or swept again
//! (the machine does); write a `missed` record (the claim path does).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::departed::Departed;
use super::records::{Records, settled};
use super::session::{Session, bounded};
use crate::fire::machine::{
    BroadcastInput, ClaimInput, ClaimRefused, Input, TickClaim, TickRecords,
};
use crate::ids::{JobName, NodeId};
use crate::layout::LockPaths;
use crate::ledger::broadcast::{close_gone, close_own, live_members, member_since, read_tick};
use crate::ledger::{ClaimPlan, OpenRuns};
use crate::report::error_chain;

/// Reads when `me`'s member znode was created (answered as [`BroadcastInput::MembershipRead`]).
pub(super) fn read_membership(s: &Session, group: &LockPaths, me: &NodeId) -> Option<Input> {
    let Some(client) = s.client.clone() else {
        return Some(Input::Broadcast(BroadcastInput::MembershipRead(Err(
            Session::no_session(),
        ))));
    };
    let (group, me, answers) = (group.clone(), me.clone(), s.answers.clone());
    s.tasks.spawn(async move {
        let path = group.member(&me);
        let since = member_since(&client, &group, &me);
        let result = match bounded(&path, since).await {
            Some(Ok(ms)) => Ok(ms.and_then(DateTime::from_timestamp_millis)),
            Some(Err(err)) => Err(format!("reading {path}: {err}")),
            None => Err(format!("reading {path}: zookeeper did not answer in time")),
        };
        let _ = answers.send(Input::Broadcast(BroadcastInput::MembershipRead(result)));
    });
    None
}

impl Records {
    /// Claims this node's run of a broadcast tick under a check of its member znode `member`
    /// (answered as [`ClaimInput::Done`]), alone: a group's claims share one epoch check. An
    /// unanswered claim is read back, like a tick's.
    pub fn claim_as_member(&self, s: &Session, claim: TickClaim, member: String) -> Option<Input> {
        let TickClaim {
            id, record, mode, ..
        } = claim;
        let Some(client) = s.client.clone() else {
            let result = Err(ClaimRefused::Failed(Session::no_session()));
            return Some(Input::Claims(ClaimInput::Done { id, result }));
        };
        let plan = ClaimPlan::new(&self.paths, record, mode, false, OpenRuns::ByRecord)
            .fenced_by_member(member);
        let (view, answers) = (self.view.subscribe(), s.answers.clone());
        s.tasks.spawn(async move {
            let session = client.session();
            let result = settled(plan.clone().send_alone(&client), &plan, view, session).await;
            let result = result.map(Box::new);
            let _ = answers.send(Input::Claims(ClaimInput::Done { id, result }));
        });
        None
    }

    /// Reads the members of a broadcast tick's instant, at its start: those live now, and
    /// those gone since that were members then (an owner killed mid-run, swept by the next
    /// owner). Answered as [`BroadcastInput::MembersRead`].
    pub fn read_sweep_members(
        &self,
        s: &Session,
        group: &LockPaths,
        departed: &Arc<Departed>,
        job: JobName,
        tick: DateTime<Utc>,
    ) -> Option<Input> {
        let Some(client) = s.client.clone() else {
            let result = Err(Session::no_session());
            return Some(Input::Broadcast(BroadcastInput::MembersRead {
                job,
                tick,
                result,
            }));
        };
        let (group, departed, answers) = (group.clone(), Arc::clone(departed), s.answers.clone());
        s.tasks.spawn(async move {
            let result = match bounded(job.as_str(), live_members(&client, &group)).await {
                Some(Ok(mut members)) => {
                    for gone in departed.alive_at(tick.timestamp_millis()) {
                        if !members.iter().any(|m| m.node_id == gone.node_id) {
                            members.push(gone);
                        }
                    }
                    Ok(members)
                }
                Some(Err(err)) => Err(error_chain(&err)),
                None => Err("zookeeper did not answer in time".to_owned()),
            };
            let _ = answers.send(Input::Broadcast(BroadcastInput::MembersRead {
                job,
                tick,
                result,
            }));
        });
        None
    }

    /// Reads what the ledger holds of a broadcast tick for the owner's sweep (answered as
    /// [`BroadcastInput::TickRead`]).
    pub fn read_broadcast_tick(
        &self,
        s: &Session,
        group: &LockPaths,
        job: JobName,
        tick: DateTime<Utc>,
    ) -> Option<Input> {
        let Some(client) = s.client.clone() else {
            let result = Err(Session::no_session());
            return Some(Input::Broadcast(BroadcastInput::TickRead {
                job,
                tick,
                result,
            }));
        };
        let (paths, group, answers) = (self.paths.clone(), group.clone(), s.answers.clone());
        s.tasks.spawn(async move {
            let reading = read_tick(&client, &paths, &group, &job, tick.timestamp_millis());
            let result = match bounded(job.as_str(), reading).await {
                Some(Ok(read)) => Ok(TickRecords {
                    recorded: read.recorded,
                    live: read.live,
                    records: read.records,
                }),
                Some(Err(err)) => Err(error_chain(&err)),
                None => Err("zookeeper did not answer in time".to_owned()),
            };
            let _ = answers.send(Input::Broadcast(BroadcastInput::TickRead {
                job,
                tick,
                result,
            }));
        });
        None
    }

    /// Marks `interrupted` the runs left open by `nodes`, members at `through` gone since (see
    /// [`crate::ledger::broadcast::close_gone`]); logged, nothing answers.
    pub fn close_gone_broadcasts(
        &self,
        s: &Session,
        job: JobName,
        through: DateTime<Utc>,
        nodes: Vec<NodeId>,
    ) {
        let Some(client) = s.client.clone() else {
            return;
        };
        let paths = self.paths.clone();
        s.tasks.spawn(async move {
            let now_ms = Utc::now().timestamp_millis();
            let through_ms = through.timestamp_millis();
            let closing = close_gone(&client, &paths, &job, &nodes, through_ms, now_ms);
            match bounded(job.as_str(), closing).await {
                Some(Ok(closed)) if closed.is_empty() => {}
                Some(Ok(closed)) => {
                    let closed: Vec<String> = closed.iter().map(ToString::to_string).collect();
                    tracing::warn!(job = %job, %through, ?closed, "broadcast runs of members gone mid-run: marked interrupted");
                }
                Some(Err(err)) => tracing::warn!(job = %job, error = %error_chain(&err), "broadcast runs of members gone not looked for"),
                None => {}
            }
        });
    }

    /// Marks what a previous process or session of this node left open (see
    /// [`crate::ledger::broadcast::close_own`]); logged, nothing answers.
    pub fn close_own_broadcasts(
        &self,
        s: &Session,
        me: &NodeId,
        jobs: Vec<crate::ids::JobName>,
        before: DateTime<chrono::Utc>,
        alive: Vec<String>,
    ) {
        let Some(client) = s.client.clone() else {
            return;
        };
        let (paths, me) = (self.paths.clone(), me.clone());
        s.tasks.spawn(async move {
            let alive: std::collections::HashSet<String> = alive.into_iter().collect();
            let now_ms = chrono::Utc::now().timestamp_millis();
            for job in jobs {
                let closing = close_own(&client, &paths, &job, &me, before.timestamp_millis(), &alive, now_ms);
                match bounded(job.as_str(), closing).await {
                    Some(Ok(0)) | None => {}
                    Some(Ok(closed)) => tracing::warn!(job = %job, closed, "broadcast runs a previous process of this node left open: marked interrupted"),
                    Some(Err(err)) => tracing::warn!(job = %job, error = %error_chain(&err), "broadcast runs left open not looked for"),
                }
            }
        });
    }
}
