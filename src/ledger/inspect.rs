//! Reading a lock group from outside its machine: who owns it, the fencing token, the live
//! members — for `zkcron status` and for catch-up's "is that node still alive".
//!
//! Owns: the read-only ZooKeeper requests on the lock, epoch and member nodes, and parsing their
//! untrusted data (garbage is reported as such, never a panic).
//! Must not: write anything or decide anything about ownership.

use super::{Ledger, RequestFailed};
use crate::ids::{NodeId, SessionId};
use crate::layout::LockPaths;
use crate::lock::node::{EpochData, MemberBrief, OwnerInfo};
use crate::zk::Fault;

/// The lock node as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    None,
    /// A persistent node squats the lock path: no session can ever own it.
    Squatter,
    /// A session holds it; `info` is `None` when its data is not zkcron's.
    Held {
        session: SessionId,
        info: Option<OwnerInfo>,
    },
}

/// The epoch node as read: its version is the latest acquisition's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epoch {
    pub token: i32,
    /// Who acquired last, when the data parses.
    pub by: Option<NodeId>,
}

/// One live member: its id, and what it wrote (`None`: unreadable or gone meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node_id: NodeId,
    pub info: Option<OwnerInfo>,
}

/// Who owns the lock.
///
/// # Errors
/// The read failed (a missing node is [`Owner::None`]).
pub async fn owner(client: &Ledger, paths: &LockPaths) -> Result<Owner, RequestFailed> {
    match client.zk().get_data(&paths.lock).await {
        Ok((_, stat)) if stat.ephemeral_owner == SessionId::PERSISTENT.0 => Ok(Owner::Squatter),
        Ok((data, stat)) => Ok(Owner::Held {
            session: SessionId(stat.ephemeral_owner),
            info: OwnerInfo::parse(&data).ok(),
        }),
        Err(Fault::NoNode) => Ok(Owner::None),
        Err(source) => Err(RequestFailed::on(&paths.lock)(source)),
    }
}

/// The epoch; `None` when the group was never acquired.
///
/// # Errors
/// The read failed.
pub async fn epoch(client: &Ledger, paths: &LockPaths) -> Result<Option<Epoch>, RequestFailed> {
    match client.zk().get_data(&paths.epoch).await {
        Ok((data, stat)) => Ok(Some(Epoch {
            token: stat.version,
            by: EpochData::parse(&data).ok().map(|epoch| epoch.node_id),
        })),
        Err(Fault::NoNode) => Ok(None),
        Err(source) => Err(RequestFailed::on(&paths.epoch)(source)),
    }
}

/// The node ids of the live members, without reading their data.
///
/// # Errors
/// Listing failed (a group without members has none).
pub async fn member_ids(client: &Ledger, paths: &LockPaths) -> Result<Vec<NodeId>, RequestFailed> {
    match client.zk().list_children(&paths.members).await {
        Ok(names) => Ok(names.into_iter().map(NodeId::new).collect()),
        Err(Fault::NoNode) => Ok(Vec::new()),
        Err(source) => Err(RequestFailed::on(&paths.members)(source)),
    }
}

/// The live members with what each wrote.
///
/// # Errors
/// Listing failed; a member that vanished meanwhile is listed with no info.
pub async fn members(client: &Ledger, paths: &LockPaths) -> Result<Vec<Member>, RequestFailed> {
    let members = member_data(client, paths).await?;
    Ok(members
        .into_iter()
        .map(|(node_id, data)| Member {
            node_id,
            info: data.and_then(|data| OwnerInfo::parse(&data).ok()),
        })
        .collect())
}

/// What `node_id`'s member node says at a glance; `None` when it is gone or not zkcron's.
///
/// # Errors
/// The read failed.
pub async fn member_brief(
    client: &Ledger,
    paths: &LockPaths,
    node_id: &NodeId,
) -> Result<Option<MemberBrief>, RequestFailed> {
    let path = paths.member(node_id);
    match client.zk().get_data(&path).await {
        Ok((data, _)) => Ok(OwnerInfo::parse_brief(&data)),
        Err(Fault::NoNode) => Ok(None),
        Err(source) => Err(RequestFailed::on(&path)(source)),
    }
}

/// The live members with the data each wrote, unparsed (`None`: vanished meanwhile).
///
/// # Errors
/// Listing failed.
pub async fn member_data(
    client: &Ledger,
    paths: &LockPaths,
) -> Result<Vec<(NodeId, Option<Vec<u8>>)>, RequestFailed> {
    let mut members = Vec::new();
    for node_id in member_ids(client, paths).await? {
        let data = client.zk().get_data(&paths.member(&node_id)).await.ok();
        members.push((node_id, data.map(|(data, _)| data)));
    }
    Ok(members)
}
