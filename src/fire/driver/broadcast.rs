//! The fire driver's I/O for broadcast jobs (issue 36): reading when this node's member znode
//! was created, a member's claim of its own run of a tick, and the owner's sweep of a tick.
//!
//! Owns: turning the machine's broadcast actions into reads of `members/` and the claims and
//! sweeps of `ledger`, on the current session.
//! Must not: decide whether a tick runs here or is swept (the machine does).

use chrono::DateTime;

use super::records::{Records, settled};
use super::session::{Session, bounded};
use crate::fire::machine::{ClaimId, ClaimRefused, Input};
use crate::ids::NodeId;
use crate::layout::LockPaths;
use crate::ledger::broadcast::{Sweep, close_own, live_members, member_since, sweep};
use crate::ledger::{ClaimError, ClaimPlan, OpenRuns};
use crate::report::error_chain;
use crate::run::{ClaimMode, RunRecord};

/// Reads when `me`'s member znode was created (answered as [`Input::MembershipRead`]).
pub(super) fn read_membership(s: &Session, group: &LockPaths, me: &NodeId) -> Option<Input> {
    let Some(client) = s.client.clone() else {
        return Some(Input::MembershipRead(Err(Session::no_session())));
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
        let _ = answers.send(Input::MembershipRead(result));
    });
    None
}

impl Records {
    /// Claims this node's run of a broadcast tick under a check of its member znode `member`
    /// (answered as [`Input::BroadcastClaimed`]). An unanswered claim is read back, like a tick's.
    pub fn claim_broadcast(
        &self,
        s: &Session,
        id: ClaimId,
        record: RunRecord,
        member: String,
    ) -> Option<Input> {
        let Some(client) = s.client.clone() else {
            let result = Err(ClaimRefused::Failed(Session::no_session()));
            return Some(Input::BroadcastClaimed { id, result });
        };
        let plan = ClaimPlan::new(
            &self.paths,
            record,
            ClaimMode::Create,
            false,
            OpenRuns::ByRecord,
        )
        .fenced_by_member(member);
        let (view, answers) = (self.view.subscribe(), s.answers.clone());
        s.tasks.spawn(async move {
            let session = client.session();
            let result = settled(plan.clone().send_alone(&client), &plan, view, session).await;
            let result = result.map(Box::new);
            let _ = answers.send(Input::BroadcastClaimed { id, result });
        });
        None
    }

    /// The owner's sweep of a broadcast tick: the members live now, looked at once `wait` has
    /// passed (unless `stop` ends it first); logged, nothing answers.
    pub fn sweep_broadcast(
        &self,
        s: &Session,
        group: &LockPaths,
        sweep_of: Sweep,
        wait: std::time::Duration,
        around: Sweeping,
    ) {
        let Sweeping {
            stop,
            metrics,
            departed,
        } = around;
        let Some(client) = s.client.clone() else {
            tracing::warn!(job = %sweep_of.job, tick = sweep_of.tick_ms, "broadcast tick not swept: no session");
            return;
        };
        let (paths, group) = (self.paths.clone(), group.clone());
        s.tasks.spawn(async move {
            let job = sweep_of.job.clone();
            let tick = sweep_of.tick_ms;
            // Live at the tick: read at its start, not when the sweep looks; and those gone
            // since (an owner killed mid-run, swept by the next owner) that were members then.
            let members = match bounded(job.as_str(), live_members(&client, &group)).await {
                Some(Ok(mut members)) => {
                    for gone in departed.alive_at(tick) {
                        if !members.iter().any(|m| m.node_id == gone.node_id) {
                            members.push(gone);
                        }
                    }
                    members
                }
                Some(Err(err)) => {
                    tracing::warn!(job = %job, tick, error = %error_chain(&err), "broadcast tick not swept: members not read");
                    return;
                }
                None => return,
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return,
            }
            // A sweep done twice writes nothing twice: one that failed is tried again while
            // this owner holds on, so the members' missed ticks are not left to the next owner.
            let mut attempts = 1;
            let swept = loop {
                let swept =
                    bounded(job.as_str(), sweep(&client, &paths, &group, &members, &sweep_of)).await;
                let again = match &swept {
                    Some(Err(ClaimError::NotOwner { .. })) | Some(Ok(_)) => false,
                    Some(Err(_)) | None => attempts < SWEEP_ATTEMPTS,
                };
                if !again {
                    break swept;
                }
                attempts += 1;
                tokio::select! {
                    () = tokio::time::sleep(SWEEP_RETRY) => {}
                    () = stop.cancelled() => return,
                }
            };
            match swept {
                Some(Ok(swept)) if !swept.missed.is_empty() || !swept.interrupted.is_empty() => {
                    for record in &swept.missed {
                        metrics.recorded(record);
                    }
                    let missed: Vec<String> =
                        swept.missed.iter().map(|r| r.node_id.to_string()).collect();
                    let interrupted: Vec<String> =
                        swept.interrupted.iter().map(ToString::to_string).collect();
                    tracing::warn!(job = %job, tick, ?missed, ?interrupted, "broadcast tick missed by live members, or its runs on members gone: recorded");
                }
                Some(Ok(_)) => tracing::debug!(job = %job, tick, "broadcast tick swept: every member recorded"),
                Some(Err(err)) => tracing::warn!(job = %job, tick, error = %error_chain(&err), "broadcast tick not swept"),
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

/// What a sweep works with beside its tick: the stop, the metrics, and the members gone.
pub(super) struct Sweeping {
    pub stop: tokio_util::sync::CancellationToken,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    pub departed: std::sync::Arc<super::Departed>,
}

/// A broadcast tick's sweep is tried this many times at most.
const SWEEP_ATTEMPTS: u32 = 3;
/// Between two tries of a sweep.
const SWEEP_RETRY: std::time::Duration = std::time::Duration::from_secs(2);
