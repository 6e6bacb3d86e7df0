//! What every handler of the listener reads: the node's view, the schedule as loaded, the
//! tokens, the console's index; and this node's own report.
//!
//! Owns: `HttpState` and the ways a handler reaches the node through it.
//! Must not: answer a request (the handlers do).

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::errors::ApiError;
use super::index::RunIndex;
use crate::config::{Config, NamedToken};
use crate::ids::NodeId;
use crate::ledger::Ledger;
use crate::lock::driver::Heard;
use crate::metrics::Metrics;
use crate::secret::Secret;
use crate::view::NodeView;

/// What every handler reads.
#[derive(Clone)]
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    pub view: watch::Receiver<NodeView>,
    /// The schedule as last loaded (start, SIGHUP).
    pub config: watch::Receiver<Arc<Config>>,
    pub token: Option<Secret>,
    /// `[http] tokens_file`'s tokens, hashed; empty without one.
    pub tokens: Arc<Vec<NamedToken>>,
    pub me: NodeId,
    pub heard: Arc<Heard>,
    /// The console's index of the run ledger, started by the first page that needs it.
    pub console: Arc<ConsoleIndex>,
    /// The lock group's events, followed while someone follows them.
    pub events: Arc<crate::events::hub::Hubs>,
    /// The runs' whole output kept on this host, if it is.
    pub outputs: Option<Arc<crate::output_store::OutputStore>>,
    /// Cancelled when the node stops: answers that follow a run end then.
    pub stop: CancellationToken,
}

/// The console's `RunIndex` while one runs, and what stops it.
#[derive(Default)]
pub struct ConsoleIndex {
    running: std::sync::Mutex<Option<RunIndex>>,
    pub(super) stop: CancellationToken,
}

impl HttpState {
    /// The schedule as loaded now: shared, not copied.
    pub(super) fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.borrow())
    }

    /// The console's index on `client`'s session: the running one, or a new one.
    pub(super) fn index(&self, client: &Ledger) -> RunIndex {
        let mut running = match self.console.running.lock() {
            Ok(running) => running,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(index) = running.as_ref().filter(|index| index.serves(client)) {
            index.touch();
            return index.clone();
        }
        if let Some(old) = running.take() {
            // Another session's, or one that ended: its watch goes with it.
            old.stop();
        }
        let config = self.config();
        let runs = config.lock.group_paths().ledger.runs;
        let jobs = config
            .jobs
            .iter()
            .map(|job| job.spec.name.clone())
            .collect();
        let index = RunIndex::start(client.clone(), runs, jobs, self.console.stop.child_token());
        *running = Some(index.clone());
        index
    }

    /// This node's own view, beside the cluster's.
    pub(super) fn node_report(&self) -> NodeReport {
        let lock = self.view.borrow().lock;
        let lease = self.heard.lease();
        NodeReport {
            node_id: self.me.clone(),
            owner: lock.may_fire,
            fencing_token: lock.token.map(|t| t.0),
            connected: lock.connected,
            last_heard_unix_ms: lease.map(|(heard, _)| heard),
            session_timeout_ms: lease.map(|(_, timeout)| timeout),
            lease_until_unix_ms: lease
                .filter(|_| lock.token.is_some())
                .map(|(heard, timeout)| heard + timeout),
        }
    }

    pub(super) fn client(&self) -> Result<Ledger, ApiError> {
        self.view
            .borrow()
            .client
            .clone()
            .ok_or_else(|| ApiError::unavailable("no zookeeper session on this node right now"))
    }
}

/// This node's own view, beside the lock group's: ownership as a lease.
#[derive(Serialize)]
pub(crate) struct NodeReport {
    node_id: NodeId,
    owner: bool,
    fencing_token: Option<i32>,
    connected: bool,
    /// When a ZooKeeper server last answered this node.
    last_heard_unix_ms: Option<i64>,
    session_timeout_ms: Option<i64>,
    /// While owner: until when its ownership is provable without another answer (last heard +
    /// session timeout); a peer may take over only after that and the takeover delay.
    lease_until_unix_ms: Option<i64>,
}
