//! What a lock group's owner, members and pauses are now, each with the change the read saw:
//! the event stream's reads (`events::hub`), which diffs them with what it knew.
//!
//! A node's deletion leaves no zxid on the node itself: what a read of a missing owner, or of a
//! set of children, reports is its parent's `pzxid`, the zxid of the last child created or
//! deleted there, which has no time of its own.
//!
//! Owns: those read-only requests and their parsing (garbage is logged with its path).
//! Must not: write anything, or say what a change means.

use std::collections::BTreeSet;

use super::{Ledger, RequestFailed};
use crate::ids::{JobName, NodeId};
use crate::layout::{ControlPaths, LockPaths};
use crate::lock::node::OwnerInfo;
use crate::zk::Fault;

/// A value read, with the zxid of the change it reflects and that change's time when the
/// servers keep one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen<T> {
    pub value: T,
    pub zxid: i64,
    pub at_unix_ms: Option<i64>,
}

/// Who owns the lock at `paths`: the owner's node id (`"?"` when its data is not zkcron's),
/// stamped with the lock node's creation; `None`, stamped with the last change of the lock's
/// parent's children.
///
/// # Errors
/// A read failed.
pub async fn owner_now(
    client: &Ledger,
    paths: &LockPaths,
) -> Result<Seen<Option<NodeId>>, RequestFailed> {
    match client.zk().get_data(&paths.lock).await {
        Ok((data, stat)) => {
            let owner = OwnerInfo::parse(&data).map_or_else(
                |err| {
                    tracing::warn!(path = %paths.lock, error = %err, "lock node holds foreign data");
                    NodeId::new("?".to_owned())
                },
                |info| info.node_id,
            );
            Ok(Seen {
                value: Some(owner),
                zxid: stat.czxid,
                at_unix_ms: Some(stat.ctime),
            })
        }
        Err(Fault::NoNode) => {
            let parent = paths
                .lock
                .rsplit_once('/')
                .map_or(paths.dir.as_str(), |(parent, _)| parent);
            Ok(Seen {
                value: None,
                zxid: children_zxid(client, parent).await?,
                at_unix_ms: None,
            })
        }
        Err(source) => Err(RequestFailed::on(&paths.lock)(source)),
    }
}

/// The live members' ids, stamped with the last join or leave.
///
/// # Errors
/// A read failed.
pub async fn members_now(
    client: &Ledger,
    paths: &LockPaths,
) -> Result<Seen<BTreeSet<NodeId>>, RequestFailed> {
    let names = children(client, &paths.members).await?;
    Ok(Seen {
        value: names.into_iter().map(NodeId::new).collect(),
        zxid: children_zxid(client, &paths.members).await?,
        at_unix_ms: None,
    })
}

/// What the member at `path` published, stamped with its last write; `None` when it is gone,
/// or its data is not zkcron's (logged).
///
/// # Errors
/// The read failed.
pub async fn member_now(
    client: &Ledger,
    path: &str,
) -> Result<Option<Seen<OwnerInfo>>, RequestFailed> {
    match client.zk().get_data(path).await {
        Ok((data, stat)) => Ok(OwnerInfo::parse(&data)
            .inspect_err(|err| tracing::warn!(path, error = %err, "member node holds foreign data"))
            .ok()
            .map(|info| Seen {
                value: info,
                zxid: stat.mzxid,
                at_unix_ms: Some(stat.mtime),
            })),
        Err(Fault::NoNode) => Ok(None),
        Err(source) => Err(RequestFailed::on(path)(source)),
    }
}

/// The paused jobs, stamped with the last pause or resume.
///
/// # Errors
/// A read failed.
pub async fn paused_now(
    client: &Ledger,
    paths: &ControlPaths,
) -> Result<Seen<BTreeSet<JobName>>, RequestFailed> {
    let names = children(client, &paths.paused).await?;
    Ok(Seen {
        value: names.into_iter().map(JobName::new).collect(),
        zxid: children_zxid(client, &paths.paused).await?,
        at_unix_ms: None,
    })
}

/// `parent`'s children; none when it is missing.
async fn children(client: &Ledger, parent: &str) -> Result<Vec<String>, RequestFailed> {
    match client.zk().list_children(parent).await {
        Ok(names) => Ok(names),
        Err(Fault::NoNode) => Ok(Vec::new()),
        Err(source) => Err(RequestFailed::on(parent)(source)),
    }
}

/// The zxid of the last child created or deleted under `parent`; 0 when it is missing.
async fn children_zxid(client: &Ledger, parent: &str) -> Result<i64, RequestFailed> {
    match client.zk().check_stat(parent).await {
        Ok(stat) => Ok(stat.map_or(0, |stat| stat.pzxid)),
        Err(source) => Err(RequestFailed::on(parent)(source)),
    }
}
