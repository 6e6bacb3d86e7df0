//! What this node knows of itself right now, for its HTTP API: the current ZooKeeper session
//! (to read and steer the lock group through) and the lock's status.
//!
//! Owns: the shape of that view; the fire driver publishes it as lock updates come.
//! Must not: decide anything, or hold what ZooKeeper holds (the API reads that on request).

use crate::ledger::Ledger;
use crate::lock::LockStatus;

/// Published on a `tokio::sync::watch` channel by the fire driver.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    /// `None` while no session is up.
    pub client: Option<Ledger>,
    pub lock: LockStatus,
}
