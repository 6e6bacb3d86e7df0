//! A persistent recursive watch that tells its follower when to read everything again.
//!
//! Owns: adding the watch, turning its events into changes of the nodes below the path, the
//! re-read owed after a disconnection (the servers may drop persistent-watch events while a
//! client reconnects, ZOOKEEPER-4698), adding the watch again after a reconnection (the client
//! does not: zookeeper-client 0.11's `resend_watches` sends only the one-shot watches, because
//! its `index = index.max(index)` never lets a persistent one choose `SetWatches2`), and ending
//! with the session (the client's watcher panics when it is polled after a terminal state).
//! Must not: know what is watched or what a change means.

use tokio_util::sync::CancellationToken;
use zookeeper_client::{AddWatchMode, Client, PersistentWatcher, SessionState};

pub use super::door::NodeEvent;
use super::{Zk, ZkError};

/// What the follower of a watch must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Read everything below the path: the watch has just begun, or the connection came back
    /// after a disconnection, during which changes may have gone unreported.
    ReadAll,
    /// The connection is lost: changes may go unreported until the [`Change::ReadAll`] that
    /// follows the reconnection. For a follower that shows what it holds as possibly behind.
    Disconnected,
    /// A node at or below the path changed.
    Node { path: String, kind: NodeEvent },
}

/// A persistent recursive watch for the life of one session.
pub struct RecursiveWatch {
    client: Client,
    path: String,
    /// `None` once the session has ended.
    watcher: Option<PersistentWatcher>,
    owes_read_all: bool,
    disconnected: bool,
    /// Reconnected: the watch is to be added again (kept until it is, so a `changed` dropped
    /// while adding, as in a `select!`, does not lose it).
    owes_rewatch: bool,
}

impl RecursiveWatch {
    /// Watches `path` and everything below it; the first [`changed`](Self::changed) says
    /// [`Change::ReadAll`].
    ///
    /// # Errors
    /// The servers refused the watch (ZooKeeper before 3.6 has no persistent watches) or the
    /// session is gone.
    pub async fn add(zk: &Zk, path: &str) -> Result<Self, ZkError> {
        let client = zk.client();
        let watcher = client
            .watch(path, AddWatchMode::PersistentRecursive)
            .await
            .map_err(|source| ZkError::Request {
                path: path.to_owned(),
                source: source.into(),
            })?;
        Ok(Self {
            client: client.clone(),
            path: path.to_owned(),
            watcher: Some(watcher),
            owes_read_all: true,
            disconnected: false,
            owes_rewatch: false,
        })
    }

    /// Creates `parent` (with its ancestors) when it is missing, then watches `path`; `None`
    /// when `stop` came first. A parent that cannot be created is logged and the watch tried
    /// all the same.
    pub async fn add_after_creating(
        client: &Zk,
        path: &str,
        parent: &str,
        stop: &CancellationToken,
    ) -> Option<Result<Self, ZkError>> {
        let ready = async {
            if let Err(err) = client.ensure_persistent(parent).await {
                tracing::warn!(error = %crate::report::error_chain(&err), "cannot create a watched node");
            }
            Self::add(client, path).await
        };
        tokio::select! {
            () = stop.cancelled() => None,
            watch = ready => Some(watch),
        }
    }

    /// For a follower that reads everything before it first waits: the first change is then a
    /// change, not [`Change::ReadAll`] (a read after a disconnection is still owed).
    pub fn read_all_done(mut self) -> Self {
        self.owes_read_all = false;
        self
    }

    /// The next change, unless `stop` comes first; `None` once stopped or the session is over.
    pub async fn changed_until(&mut self, stop: &CancellationToken) -> Option<Change> {
        tokio::select! {
            () = stop.cancelled() => None,
            change = self.changed() => change,
        }
    }

    /// The next change; `None` once the session is over, and every time after that.
    pub async fn changed(&mut self) -> Option<Change> {
        if std::mem::take(&mut self.owes_read_all) {
            return Some(Change::ReadAll);
        }
        if self.owes_rewatch {
            return Some(self.rewatch().await);
        }
        loop {
            let event = self.watcher.as_mut()?.changed().await;
            if let Some(kind) = NodeEvent::of(event.event_type) {
                return Some(Change::Node {
                    path: event.path,
                    kind,
                });
            }
            match event.session_state {
                state if state.is_terminated() => {
                    self.watcher = None;
                    return None;
                }
                SessionState::Disconnected if !self.disconnected => {
                    self.disconnected = true;
                    return Some(Change::Disconnected);
                }
                SessionState::SyncConnected if std::mem::take(&mut self.disconnected) => {
                    self.owes_rewatch = true;
                    return Some(self.rewatch().await);
                }
                _ => {}
            }
        }
    }

    /// After a reconnection: the watch added again, and everything to be read. A watch that
    /// could not be added is tried again at the next reconnection; what can be read is read now.
    async fn rewatch(&mut self) -> Change {
        self.disconnected = !self.add_again().await;
        self.owes_rewatch = false;
        Change::ReadAll
    }

    /// Adds the watch again on the reconnected session, then lets the old watcher go (dropped
    /// after the new one is in place, so the server's watch on the path stays). `false`: not
    /// added (logged).
    async fn add_again(&mut self) -> bool {
        match self
            .client
            .watch(&self.path, AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(watcher) => {
                self.watcher = Some(watcher);
                true
            }
            Err(err) => {
                tracing::warn!(path = self.path, error = %err, "cannot watch again after a reconnection; changes below it go unseen until the next one");
                false
            }
        }
    }
}
