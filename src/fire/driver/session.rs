//! What the fire driver's concerns perform with: the current session's client and its group
//! commit, where the answers go and the tasks that carry the requests; and the limit in time
//! of one request.
//!
//! Owns: that shared ground, swapped whole when the session changes.
//! Must not: perform anything itself.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::fire::machine::Input;
use crate::ledger::Ledger;
use crate::ledger::group::GroupCommit;

/// A request whose answer has not come by then is answered as failed, so that no listing or
/// final record keeps the machine (or a stop) waiting on an ensemble that does not answer. Not a
/// claim: its outcome decides whether the tick is ours, so it is awaited (and read back when the
/// answer is lost); a stop does not wait for it past its own limit.
pub(super) const REQUEST_LIMIT: Duration = Duration::from_secs(10);

/// `request`'s output, or `None` (logged) when it took longer than [`REQUEST_LIMIT`].
pub(super) async fn bounded<T>(what: &str, request: impl Future<Output = T>) -> Option<T> {
    let answer = tokio::time::timeout(REQUEST_LIMIT, request).await;
    if answer.is_err() {
        tracing::warn!(what, limit = ?REQUEST_LIMIT, "zookeeper did not answer in time");
    }
    answer.ok()
}

/// Reads of many nodes go out this many at a time (see `open_submissions`).
pub(super) const READ_WINDOW: usize = 256;

/// The session the actions go out on (none while no session is up), and where they answer.
#[derive(Clone)]
pub(super) struct Session {
    pub client: Option<Ledger>,
    /// The session's claims and record writes, grouped into multi-ops under load.
    pub group: Option<GroupCommit>,
    pub answers: mpsc::UnboundedSender<Input>,
    pub tasks: TaskTracker,
}

impl Session {
    /// The answer a request gets at once when no session is up.
    pub fn no_session() -> String {
        "no zookeeper session".to_owned()
    }
}
