//! The owner's sweep of a broadcast job's tick (issue 36): a `missed` record for each live
//! member that should have run the tick and did not claim it, then the job's old records pruned.
//!
//! Owns: reading the members with when each joined and its tags, which of them a tick's
//! records lack, and their `missed` records — each one claim of `runs/<job>/<tick>~<node>`
//! under `check(epoch, token)`, in the same create-once race as the member's own claim.
//! Must not: decide when a tick is swept (the fire machine does) or claim a member's run.

use std::collections::{BTreeSet, HashSet};

use zookeeper_client::Client;

use super::{
    ClaimError, ClaimPlan, OpenRuns, Remember, prune, read_versioned, record_names, rewrite_record,
};
use crate::ids::{FencingToken, JobName, NodeId};
use crate::layout::{LedgerPaths, LockPaths};
use crate::lock::node::OwnerInfo;
use crate::run::{ClaimMode, RunRecord, RunStatus};

/// Why a broadcast tick is recorded `missed` for a node (and the metrics' `broadcast_node`).
pub const MISSED_BY_A_MEMBER: &str = "a live member that did not claim the tick in time";

/// A live member as a sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMember {
    pub node_id: NodeId,
    pub ip: String,
    pub tags: BTreeSet<String>,
    /// When its member znode was created (the servers' clock): it runs only later ticks.
    pub since_unix_ms: i64,
}

/// The live members, each with its tags and when it joined; one that vanished meanwhile, or
/// whose data is not a member's (logged), is left out.
///
/// # Errors
/// Listing the members failed.
pub async fn live_members(
    client: &Client,
    group: &LockPaths,
) -> Result<Vec<LiveMember>, ClaimError> {
    let names = crate::zk::children_if_there(client, &group.members)
        .await
        .map_err(ClaimError::on(&group.members))?;
    // Each request goes out as it is made: the reads travel together, one wait for all.
    let reads: Vec<_> = names
        .into_iter()
        .map(|name| {
            let path = group.member(&NodeId::new(name));
            (client.get_data(&path), path)
        })
        .collect();
    let mut members = Vec::new();
    for (read, path) in reads {
        let Ok((data, stat)) = read.await else {
            continue;
        };
        match OwnerInfo::parse(&data) {
            Ok(info) => members.push(LiveMember {
                node_id: info.node_id,
                ip: info.ip,
                tags: info.tags,
                since_unix_ms: stat.ctime,
            }),
            Err(err) => {
                tracing::warn!(path, error = %err, "member znode holds no member's data: left out of the broadcast sweep")
            }
        }
    }
    Ok(members)
}

/// One tick's sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub job: JobName,
    pub tick_ms: i64,
    pub requires: BTreeSet<String>,
    pub token: FencingToken,
    /// The owner's own clock, for the records it writes.
    pub now_ms: i64,
    /// The job's `history`: records kept per member.
    pub keep: usize,
    pub remember: Remember,
}

/// What a sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// The `missed` records made, one for each member that did not claim the tick.
    pub missed: Vec<RunRecord>,
    /// The members gone since the tick's start whose run of it was still open: `interrupted`.
    pub interrupted: Vec<NodeId>,
    /// Old records pruned.
    pub pruned: usize,
}

/// Records `missed` for each member of `members` (those live at the tick's start) that carries
/// `sweep.requires`, joined before the tick, and has no record of it; marks `interrupted` the
/// open run of each of them that is gone from `group`'s members since (killed mid-run: nobody
/// else would end its record); then prunes the job's records beyond `keep` per member.
///
/// # Errors
/// Listing the records failed, or a claim failed otherwise than by finding the record there
/// (`NotOwner`: the lock moved; the next owner sweeps again).
pub async fn sweep(
    client: &Client,
    paths: &LedgerPaths,
    group: &LockPaths,
    members: &[LiveMember],
    sweep: &Sweep,
) -> Result<Swept, ClaimError> {
    let names = record_names(client, paths, &sweep.job).await?;
    let recorded: HashSet<&NodeId> = names
        .iter()
        .filter(|name| name.scheduled_unix_ms == sweep.tick_ms)
        .filter_map(|name| name.node.as_ref())
        .collect();
    let mut swept = Swept::default();
    for member in members {
        let due = member.since_unix_ms < sweep.tick_ms && sweep.requires.is_subset(&member.tags);
        if !due || recorded.contains(&member.node_id) {
            continue;
        }
        let node = (&member.node_id, member.ip.as_str());
        let mut record = RunRecord::claimed_broadcast(
            &sweep.job,
            sweep.tick_ms,
            node,
            sweep.token,
            sweep.now_ms,
        );
        record.status = RunStatus::Missed;
        record.finished_unix_ms = Some(sweep.now_ms);
        record.error = Some(MISSED_BY_A_MEMBER.to_owned());
        let plan = ClaimPlan::new(
            paths,
            record.clone(),
            ClaimMode::Create,
            false,
            OpenRuns::ByRecord,
            sweep.remember.acls,
        );
        match plan.send_alone(client).await {
            Ok(_) => swept.missed.push(record),
            Err(ClaimError::AlreadyClaimed { .. }) => {} // its own claim came first
            Err(err) => return Err(err),
        }
    }
    let recorded_gone: Vec<&LiveMember> = members
        .iter()
        .filter(|member| recorded.contains(&member.node_id))
        .collect();
    if !recorded_gone.is_empty() {
        let live_now: HashSet<String> = crate::zk::children_if_there(client, &group.members)
            .await
            .map_err(ClaimError::on(&group.members))?
            .into_iter()
            .collect();
        for member in recorded_gone {
            if live_now.contains(member.node_id.as_str()) {
                continue;
            }
            if interrupt_open(client, paths, sweep, &member.node_id).await {
                swept.interrupted.push(member.node_id.clone());
            }
        }
    }
    let keep = sweep.keep.saturating_mul(members.len().max(1));
    if names.len() > keep {
        swept.pruned = prune(client, paths, &sweep.job, keep, sweep.remember).await?;
    }
    Ok(swept)
}

/// Marks `node`'s record of the swept tick `interrupted` if it is still open; whether it did.
async fn interrupt_open(
    client: &Client,
    paths: &LedgerPaths,
    sweep: &Sweep,
    node: &NodeId,
) -> bool {
    let path = paths.broadcast_record(&sweep.job, sweep.tick_ms, node);
    let Some((mut record, version)) = read_versioned(client, &path).await else {
        return false;
    };
    if record.status.is_final() {
        return false;
    }
    record.status = RunStatus::Interrupted;
    record.finished_unix_ms = Some(sweep.now_ms);
    record.error = Some("its node left the fleet before the run's end".to_owned());
    rewrite_record(client, paths, &record, version, true)
        .await
        .is_ok()
}

/// How many of its newest records of a job a restarted node looks at for runs left open.
pub const OWN_LOOK_BACK: usize = 20;

/// Marks `interrupted` this node's records of `job`'s ticks before `before_ms` (when its
/// member znode was made) that are still open — a run of its previous process or session that
/// ended without its final record — but not those in `alive` (runs of this process that outlived
/// a session). Each is a compare-and-set at the version read. Returns how many were marked.
///
/// # Errors
/// Listing the records failed.
pub async fn close_own(
    client: &Client,
    paths: &LedgerPaths,
    job: &JobName,
    me: &NodeId,
    before_ms: i64,
    alive: &HashSet<String>,
    now_ms: i64,
) -> Result<usize, ClaimError> {
    let names = record_names(client, paths, job).await?;
    let mine = names
        .iter()
        .rev()
        .filter(|name| name.node.as_ref() == Some(me) && name.scheduled_unix_ms < before_ms)
        .take(OWN_LOOK_BACK);
    let mut closed = 0;
    for name in mine {
        let path = paths.broadcast_record(job, name.scheduled_unix_ms, me);
        let Some((mut record, version)) = read_versioned(client, &path).await else {
            continue;
        };
        if record.status.is_final() || alive.contains(&record.run_id) {
            continue;
        }
        record.status = RunStatus::Interrupted;
        record.finished_unix_ms = Some(now_ms);
        record.error = Some("its node stopped or lost its session before the run's end".to_owned());
        match rewrite_record(client, paths, &record, version, true).await {
            Ok(_) => closed += 1,
            Err(err) => {
                tracing::debug!(path, error = %err, "a broadcast run left open was not marked")
            }
        }
    }
    Ok(closed)
}
