//! A broadcast job's use cases beside the claim (issue 36): when this node became a member, the
//! members with when each joined and its tags, what the ledger holds of a tick for the owner's
//! sweep, and the runs a member left open — its own previous process's, or a member's gone
//! mid-run — marked `interrupted`.
//!
//! Owns: those reads, and the compare-and-set that closes a run left open.
//! Must not: decide who owes a tick or when a tick is swept (the fire machine does), or write
//! a claim or a `missed` record (those go through the claim, `ledger::claim`).

use super::Ledger;
use std::collections::{BTreeSet, HashSet};

use super::{ClaimError, read_versioned, record_names, rewrite_record};
use crate::ids::{JobName, NodeId};
use crate::layout::{LedgerPaths, LockPaths};
use crate::lock::node::{LiveMember, OwnerInfo};
use crate::run::RunStatus;
use crate::zk::Fault;

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

/// What the ledger holds of a broadcast tick, for the owner's sweep.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TickRecords {
    /// The members with a record of the tick: their own claim, or a sweep's `missed`.
    pub recorded: BTreeSet<NodeId>,
    /// The members live now.
    pub live: BTreeSet<NodeId>,
    /// How many records the job has, every member's.
    pub records: usize,
}

/// What the ledger holds of broadcast job `job`'s tick at `tick_ms`, for the owner's sweep: the
/// members with a record of it, the members live now in `group`, and how many records the job
/// has.
///
/// # Errors
/// Listing the records or the members failed.
pub async fn read_tick(
    client: &Ledger,
    paths: &LedgerPaths,
    group: &LockPaths,
    job: &JobName,
    tick_ms: i64,
) -> Result<TickRecords, ClaimError> {
    let names = record_names(client, paths, job).await?;
    let recorded = names
        .iter()
        .filter(|name| name.scheduled_unix_ms == tick_ms)
        .filter_map(|name| name.node.clone())
        .collect();
    let live = client
        .zk()
        .children_if_there(&group.members)
        .await
        .map_err(ClaimError::on(&group.members))?
        .into_iter()
        .map(|name| NodeId::new(&name))
        .collect();
    Ok(TickRecords {
        recorded,
        live,
        records: names.len(),
    })
}

/// Marks `interrupted` the runs still open of `nodes` — members at `through_ms` gone since —
/// among each one's newest [`OWN_LOOK_BACK`] records of `job` through that tick: a run whose
/// node died mid-run (killed), which nobody else would end. Each is a compare-and-set at the
/// version read. Returns the nodes that had one.
///
/// # Errors
/// Listing the records failed.
pub async fn close_gone(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
    nodes: &[NodeId],
    through_ms: i64,
    now_ms: i64,
) -> Result<Vec<NodeId>, ClaimError> {
    let names = record_names(client, paths, job).await?;
    let mut closed = Vec::new();
    for node in nodes {
        let open = LeftOpen {
            job,
            node,
            through_ms,
            spare: &HashSet::new(),
            now_ms,
            why: "its node left the fleet before the run's end",
        };
        if close_open(client, paths, &names, &open).await > 0 {
            closed.push(node.clone());
        }
    }
    Ok(closed)
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
