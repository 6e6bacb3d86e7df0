//! Who this process is in its lock group: node_id (default: this host's IP), ip, host, pid.
//!
//! Owns: finding the local IP and host name for this process's owner and member data.
//! Must not: talk to ZooKeeper.

use crate::ids::{NodeId, validate_znode_name};
use crate::lock::node::OwnerInfo;

/// This build: the crate's version and the commit it was built from (`build.rs`), as
/// `--version` prints it and every member node publishes it.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("ZKCRON_COMMIT"), ")");

/// Why this process cannot name itself.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot find this host's IP address to use as node_id; set lock.node_id")]
    NoLocalIp(#[source] local_ip_address::Error),
    #[error("invalid node_id {id:?}: {reason}")]
    BadNodeId { id: String, reason: &'static str },
}

/// This process's lock and member node data; `node_id` overrides the default (the local IP).
///
/// # Errors
/// No node_id was given and no local IP can be found, or the node_id is not a valid znode name.
pub fn this_process(node_id: Option<&NodeId>) -> Result<OwnerInfo, IdentityError> {
    let (node_id, ip) = match (node_id, local_ip_address::local_ip()) {
        (Some(id), ip) => (
            id.clone(),
            ip.map_or_else(|_| "unknown".to_owned(), |ip| ip.to_string()),
        ),
        (None, Ok(ip)) => (NodeId::new(ip.to_string()), ip.to_string()),
        (None, Err(err)) => return Err(IdentityError::NoLocalIp(err)),
    };
    validate_znode_name(node_id.as_str()).map_err(|reason| IdentityError::BadNodeId {
        id: node_id.to_string(),
        reason,
    })?;
    Ok(OwnerInfo {
        node_id,
        ip,
        host: gethostname::gethostname().to_string_lossy().into_owned(),
        pid: std::process::id(),
        version: VERSION.into(),
        since_unix_ms: 0,
        releasing: false,
        schedule: None,
        clock_offset_ms: None,
        clock_standing: None,
        reload: None,
        tags: std::collections::BTreeSet::new(),
        ledger_format: Some(crate::layout::LEDGER_FORMAT),
        api: None,
        delayed_store: None,
        delayed_store_reachable: None,
    })
}
