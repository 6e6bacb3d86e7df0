//! Every ZooKeeper path of a lock group, built in one place (DESIGN.md "ZooKeeper layout").
//!
//! Owns: the names of the lock, epoch, member, run-record and guard znodes under
//! `<root>/<lock.name>`.
//! Must not: talk to ZooKeeper or know what the nodes hold (that is `lock` and `ledger`).

use crate::ids::{JobName, NodeId};
use crate::ledger::record::tick_node_name;

/// The znodes of one lock group (DESIGN.md "ZooKeeper layout").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockPaths {
    pub dir: String,
    pub lock: String,
    pub epoch: String,
    pub members: String,
}

impl LockPaths {
    /// Paths of lock group `name` under `root` (e.g. `/zkcron` and `billing`).
    pub fn new(root: &str, name: &str) -> Self {
        let dir = format!("{}/{name}", root.trim_end_matches('/'));
        Self {
            lock: format!("{dir}/lock"),
            epoch: format!("{dir}/epoch"),
            members: format!("{dir}/members"),
            dir,
        }
    }

    /// This node's member znode.
    pub fn member(&self, node_id: &NodeId) -> String {
        format!("{}/{node_id}", self.members)
    }
}

/// The ledger's znodes under one lock group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerPaths {
    pub epoch: String,
    pub runs: String,
    /// Parent of the `running/<job>` guards: ephemeral, held for a run's life (concurrency).
    pub running: String,
}

impl LedgerPaths {
    /// The ledger of the lock group at `lock`.
    pub fn new(lock: &LockPaths) -> Self {
        Self {
            epoch: lock.epoch.clone(),
            runs: format!("{}/runs", lock.dir),
            running: format!("{}/running", lock.dir),
        }
    }

    /// The parent of one job's records.
    pub fn job_runs(&self, job: &JobName) -> String {
        format!("{}/{job}", self.runs)
    }

    /// The guard that says a run of `job` is alive somewhere in the cluster.
    pub fn running(&self, job: &JobName) -> String {
        format!("{}/{job}", self.running)
    }

    /// One tick's record.
    pub fn record(&self, job: &JobName, scheduled_unix_ms: i64) -> String {
        format!("{}/{job}/{}", self.runs, tick_node_name(scheduled_unix_ms))
    }
}
