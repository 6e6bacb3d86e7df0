//! Following a subtree of what the group records — the due queue, the chain marks, the control
//! nodes, the members, the runs — as the fire driver, the placement and the console's index do.
//!
//! Owns: `Follow`, one persistent recursive watch on a path `layout` names, and what it tells
//! its follower (`Change`, in the ledger's words).
//! Must not: read what changed (the follower reads it through the ledger's use cases), or know
//! what a change means.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Ledger, RequestFailed};
use crate::zk::watch::{self, RecursiveWatch};
use crate::zk::{Fault, NodeEvent, ZkError};

/// What the follower must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Read everything below the path: the watch has just begun, or the connection came back
    /// after a disconnection, during which changes may have gone unreported.
    ReadAll,
    /// The connection is lost: changes may go unreported until the [`Change::ReadAll`] that
    /// follows the reconnection. For a follower that shows what it holds as possibly behind.
    Disconnected,
    /// A node at or below the path changed.
    Node { path: String, kind: NodeChange },
}

/// How a node changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
}

impl From<watch::Change> for Change {
    fn from(change: watch::Change) -> Self {
        match change {
            watch::Change::ReadAll => Self::ReadAll,
            watch::Change::Disconnected => Self::Disconnected,
            watch::Change::Node { path, kind } => Self::Node {
                path,
                kind: match kind {
                    NodeEvent::Created => NodeChange::Created,
                    NodeEvent::Deleted => NodeChange::Deleted,
                    NodeEvent::DataChanged => NodeChange::DataChanged,
                    NodeEvent::ChildrenChanged => NodeChange::ChildrenChanged,
                },
            },
        }
    }
}

/// A subtree followed for the life of one session.
pub struct Follow(RecursiveWatch);

impl Follow {
    /// Follows `path` and everything below it; the first [`changed`](Self::changed) says
    /// [`Change::ReadAll`].
    ///
    /// # Errors
    /// The servers refused the watch (ZooKeeper before 3.6 has no persistent watches) or the
    /// session is gone.
    pub async fn add(ledger: &Ledger, path: &str) -> Result<Self, RequestFailed> {
        RecursiveWatch::add(ledger.zk(), path)
            .await
            .map(Self)
            .map_err(|err| failed(path, err))
    }

    /// Creates `parent` (with its ancestors) when it is missing, then follows `path`; `None`
    /// when `stop` came first. A parent that cannot be created is logged and the watch tried
    /// all the same.
    pub async fn add_after_creating(
        ledger: &Ledger,
        path: &str,
        parent: &str,
        stop: &CancellationToken,
    ) -> Option<Result<Self, RequestFailed>> {
        let added = RecursiveWatch::add_after_creating(ledger.zk(), path, parent, stop).await?;
        Some(added.map(Self).map_err(|err| failed(path, err)))
    }

    /// For a follower that reads everything before it first waits: the first change is then a
    /// change, not [`Change::ReadAll`] (a read after a disconnection is still owed).
    pub fn read_all_done(self) -> Self {
        Self(self.0.read_all_done())
    }

    /// The next change, unless `stop` comes first; `None` once stopped or the session is over.
    pub async fn changed_until(&mut self, stop: &CancellationToken) -> Option<Change> {
        self.0.changed_until(stop).await.map(Change::from)
    }

    /// The next change; `None` once the session is over, and every time after that.
    pub async fn changed(&mut self) -> Option<Change> {
        self.0.changed().await.map(Change::from)
    }

    /// Sends every change to a channel until the session ends or `stop` is cancelled, for a
    /// follower that takes them in batches (`recv_many`); the channel closes then.
    pub fn forward(mut self, stop: CancellationToken) -> mpsc::UnboundedReceiver<Change> {
        let (changes, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    () = stop.cancelled() => return,
                    change = self.changed() => change,
                };
                let Some(change) = change else {
                    return;
                };
                if changes.send(change).is_err() {
                    return;
                }
            }
        });
        received
    }
}

/// How often a follower that idles looks whether it does.
const IDLE_SWEEP: std::time::Duration = std::time::Duration::from_secs(30);

/// A follower's changes taken in batches (a burst of changes is read in one go), until the
/// session ends, it is stopped, or it idles.
pub struct Batches<T> {
    changes: mpsc::UnboundedReceiver<T>,
    sweep: tokio::time::Interval,
    batch: Vec<T>,
}

impl<T> Batches<T> {
    pub fn new(changes: mpsc::UnboundedReceiver<T>) -> Self {
        Self {
            changes,
            sweep: tokio::time::interval(IDLE_SWEEP),
            batch: Vec::new(),
        }
    }

    /// The next batch; `Err` with why the follower stops: `stop` was cancelled, the session
    /// ended, or `idle` (asked every 30 s) says the follower is no longer wanted, which cancels
    /// `stop`.
    pub async fn next(
        &mut self,
        stop: &CancellationToken,
        idle: impl Fn() -> Option<String>,
    ) -> Result<&mut Vec<T>, String> {
        self.batch.clear();
        loop {
            tokio::select! {
                () = stop.cancelled() => return Err("stopped".to_owned()),
                _ = self.sweep.tick() => {
                    if let Some(why) = idle() {
                        stop.cancel();
                        return Err(why);
                    }
                }
                received = self.changes.recv_many(&mut self.batch, 1024) => {
                    if received == 0 {
                        return Err("the session ended".to_owned());
                    }
                    return Ok(&mut self.batch);
                }
            }
        }
    }
}

/// The watch's failure, in the ledger's words.
fn failed(path: &str, err: ZkError) -> RequestFailed {
    match err {
        ZkError::Request { path, source } => RequestFailed { path, source },
        other => RequestFailed {
            path: path.to_owned(),
            source: Fault::Other(other.to_string()),
        },
    }
}
