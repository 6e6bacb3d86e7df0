//! The ACL of a lock group's nodes already there: each given the one the schedule asks for now
//! (`acl`, `read_acl`), for a fleet that closes a ledger it ran open, names a new reader, or
//! opens it again (`zkcron acl apply`, docs/UPGRADING.md "Closing an open ledger").
//!
//! Owns: walking the group's directory and setting each node's ACL where it differs.
//! Must not: create or delete a node, touch one outside the group's directory, or stop at the
//! first node it may not change (each is reported with its path).

use super::{Ledger, RequestFailed};
use crate::zk::{Fault, NodeAcl};

/// How many nodes are asked about at once: the requests are pipelined on the one session, and
/// a directory of a million submissions is read in windows rather than all at once.
const WINDOW: usize = 256;

/// What a walk did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AclApplied {
    /// The ACL every node has now, as the servers keep it.
    pub acl: String,
    /// Nodes seen, the directory included.
    pub nodes: usize,
    /// Nodes whose ACL was changed.
    pub changed: usize,
    /// Nodes deleted while the walk was on them (a run pruned, a lock released).
    pub gone: usize,
    /// Nodes this session may not change (closed to other credentials), each with why.
    pub refused: Vec<(String, Fault)>,
}

/// Gives `dir` and every node under it the ACL this session creates nodes with.
///
/// The directory's ACL is set first and read back: that is the ACL the servers keep for the
/// schedule's (a creator's ACL reads back as the session's identities), which every other node
/// is compared with.
///
/// # Errors
/// The directory itself cannot be set or read (it is missing, or closed to these credentials).
pub async fn apply(client: &Ledger, dir: &str) -> Result<AclApplied, RequestFailed> {
    let zk = client.zk();
    let had: NodeAcl = zk.get_acl(dir).await.map_err(RequestFailed::on(dir))?;
    zk.set_own_acl(dir).await.map_err(RequestFailed::on(dir))?;
    let want: NodeAcl = zk.get_acl(dir).await.map_err(RequestFailed::on(dir))?;
    let mut applied = AclApplied {
        acl: want.to_string(),
        nodes: 1,
        changed: usize::from(had != want),
        ..AclApplied::default()
    };
    let mut to_visit: Vec<String> = zk
        .list_children(dir)
        .await
        .map_err(RequestFailed::on(dir))?
        .into_iter()
        .map(|name| format!("{}/{name}", dir.trim_end_matches('/')))
        .collect();
    while !to_visit.is_empty() {
        let window: Vec<String> = to_visit.split_off(to_visit.len().saturating_sub(WINDOW));
        // Each request is sent before any is awaited: a round trip or two for the window, not
        // one per node.
        let listings: Vec<_> = window.iter().map(|path| zk.list_children(path)).collect();
        let acls: Vec<_> = window.iter().map(|path| zk.get_acl(path)).collect();
        let mut differing = Vec::new();
        for (path, acl) in window.iter().zip(acls) {
            match acl.await {
                Ok(acl) => {
                    applied.nodes += 1;
                    if acl != want {
                        differing.push(path);
                    }
                }
                Err(Fault::NoNode) => applied.gone += 1,
                Err(fault) => applied.refused.push((path.clone(), fault)),
            }
        }
        let sets: Vec<_> = differing.iter().map(|path| zk.set_own_acl(path)).collect();
        for (path, set) in differing.into_iter().zip(sets) {
            match set.await {
                Ok(()) => applied.changed += 1,
                Err(Fault::NoNode) => applied.gone += 1,
                Err(fault) => applied.refused.push((path.clone(), fault)),
            }
        }
        for (path, listing) in window.iter().zip(listings) {
            match listing.await {
                Ok(names) => to_visit.extend(
                    names
                        .into_iter()
                        .map(|name| format!("{}/{name}", path.trim_end_matches('/'))),
                ),
                // Gone since: counted above.
                Err(Fault::NoNode) => {}
                Err(fault) => applied.refused.push((path.clone(), fault)),
            }
        }
    }
    Ok(applied)
}
