//! The owner's sweep of a broadcast job's tick (issue 36): a `missed` record for each live
//! member that should have run the tick and did not claim it, then the job's old records pruned.
//!
//! Owns: reading the members with when each joined and its tags, which of them a tick's
//! records lack, and their `missed` records — each one claim of `runs/<job>/<tick>~<node>`
//! under `check(epoch, token)`, in the same create-once race as the member's own claim.
//! Must not: decide when a tick is swept (the fire machine does) or claim a member's run.

use super::Ledger;
use std::collections::{BTreeSet, HashSet};

use super::{
    ClaimError, ClaimPlan, OpenRuns, Remember, prune, read_versioned, record_names, rewrite_record,
};
use crate::ids::{FencingToken, JobName, NodeId};
use crate::layout::{LedgerPaths, LockPaths};
use crate::lock::node::{LiveMember, OwnerInfo};
use crate::run::{ClaimMode, RunRecord, RunStatus};
use crate::zk::Fault;

/// Why a broadcast tick is recorded `missed` for a node (and the metrics' `broadcast_node`).
pub const MISSED_BY_A_MEMBER: &str = "a live member that did not claim the tick in time";

/// When `me`'s member znode was made (ms since the epoch): from then on this node owes its
/// runs of broadcast ticks. `None` when it is not there.
///
/// # Errors
/// The read failed.
pub async fn member_since(
    client: &Ledger,
    group: &LockPaths,
    me: &NodeId,
) -> Result<Option<i64>, Fault> {
    let stat = client.zk().check_stat(&group.member(me)).await?;
    Ok(stat.map(|stat| stat.ctime))
}

/// The live members, each with its tags and when it joined; one that vanished meanwhile, or
/// whose data is not a member's (logged), is left out.
///
/// # Errors
/// Listing the members failed.
pub async fn live_members(
    client: &Ledger,
    group: &LockPaths,
) -> Result<Vec<LiveMember>, ClaimError> {
    let names = client
        .zk()
        .children_if_there(&group.members)
        .await
        .map_err(ClaimError::on(&group.members))?;
    // Each request goes out as it is made: the reads travel together, one wait for all.
    let reads: Vec<_> = names
        .into_iter()
        .map(|name| {
            let path = group.member(&NodeId::new(name));
            (client.zk().get_data(&path), path)
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
    /// The members gone since the tick's start that had runs still open, this tick's or an
    /// earlier one's (among its newest [`OWN_LOOK_BACK`]): each run marked `interrupted`.
    pub interrupted: Vec<NodeId>,
    /// Old records pruned.
    pub pruned: usize,
}

/// Records `missed` for each member of `members` (those live at the tick's start, and those
/// gone since that were members then: `fire::driver::departed`) that carries
/// `sweep.requires`, joined before the tick, and has no record of it; marks `interrupted` the
/// open runs of each of them that is gone from `group`'s members since — this tick's, and an
/// earlier tick's still running when its node died (killed mid-run: nobody else would end its
/// record), among its newest [`OWN_LOOK_BACK`] — then prunes the job's records beyond `keep` per
/// member.
///
/// # Errors
/// Listing the records failed, or a claim failed otherwise than by finding the record there
/// (`NotOwner`: the lock moved; the next owner sweeps again).
pub async fn sweep(
    client: &Ledger,
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
        );
        match plan.send_alone(client).await {
            Ok(_) => swept.missed.push(record),
            Err(ClaimError::AlreadyClaimed { .. }) => {} // its own claim came first
            Err(err) => return Err(err),
        }
    }
    if !members.is_empty() {
        let live_now: HashSet<String> = client
            .zk()
            .children_if_there(&group.members)
            .await
            .map_err(ClaimError::on(&group.members))?
            .into_iter()
            .collect();
        let gone = members
            .iter()
            .filter(|member| !live_now.contains(member.node_id.as_str()));
        for member in gone {
            let open = LeftOpen {
                job: &sweep.job,
                node: &member.node_id,
                through_ms: sweep.tick_ms,
                spare: &HashSet::new(),
                now_ms: sweep.now_ms,
                why: "its node left the fleet before the run's end",
            };
            if close_open(client, paths, &names, &open).await > 0 {
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

/// Whose open runs of which job to close, and why.
struct LeftOpen<'a> {
    job: &'a JobName,
    node: &'a NodeId,
    /// Only records of ticks at or before this one.
    through_ms: i64,
    /// Run ids left alone: runs of this process that outlived a session.
    spare: &'a HashSet<String>,
    now_ms: i64,
    why: &'a str,
}

/// Marks `interrupted` the runs still open among `open.node`'s newest [`OWN_LOOK_BACK`] records
/// of `open.job` (of `names`, the job's records) through `open.through_ms`, but those it spares;
/// each a compare-and-set at the version read. Returns how many it marked.
async fn close_open(
    client: &Ledger,
    paths: &LedgerPaths,
    names: &[crate::layout::RecordName],
    open: &LeftOpen<'_>,
) -> usize {
    let theirs = names
        .iter()
        .rev()
        .filter(|name| {
            name.node.as_ref() == Some(open.node) && name.scheduled_unix_ms <= open.through_ms
        })
        .take(OWN_LOOK_BACK);
    let mut closed = 0;
    for name in theirs {
        let path = paths.broadcast_record(open.job, name.scheduled_unix_ms, open.node);
        let Some((mut record, version)) = read_versioned(client, &path).await else {
            continue;
        };
        if record.status.is_final() || open.spare.contains(&record.run_id) {
            continue;
        }
        record.status = RunStatus::Interrupted;
        record.finished_unix_ms = Some(open.now_ms);
        record.error = Some(open.why.to_owned());
        match rewrite_record(client, paths, &record, version, true).await {
            Ok(_) => closed += 1,
            Err(err) => {
                tracing::debug!(path, error = %err, "a broadcast run left open was not marked")
            }
        }
    }
    closed
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
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
    me: &NodeId,
    before_ms: i64,
    alive: &HashSet<String>,
    now_ms: i64,
) -> Result<usize, ClaimError> {
    let names = record_names(client, paths, job).await?;
    let open = LeftOpen {
        job,
        node: me,
        through_ms: before_ms - 1,
        spare: alive,
        now_ms,
        why: "its node stopped or lost its session before the run's end",
    };
    Ok(close_open(client, paths, &names, &open).await)
}
