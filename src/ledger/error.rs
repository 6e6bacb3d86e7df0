//! Why the ledger could not claim a tick or update a record, and whether a claim may have been
//! applied without its answer coming back.
//!
//! Owns: `ClaimError`, `UpdateError` and `RequestFailed`.
//! Must not: send requests.

use std::sync::Arc;

use super::postgres::StoreError;
use crate::zk::Fault;

use crate::ids::{FencingToken, JobName};
use crate::run::RunStatus;

/// Why a tick was not claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("lock lost before the tick: the epoch has moved past token {token}")]
    NotOwner { token: FencingToken },
    #[error("tick {scheduled_unix_ms} of job {job} is already claimed")]
    AlreadyClaimed {
        job: JobName,
        scheduled_unix_ms: i64,
    },
    #[error("a run of job {job} is still alive in the cluster")]
    RunAlive { job: JobName },
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: Fault,
    },
    /// The delayed queue's PostgreSQL store failed; the claim was not applied (one without an
    /// answer is read back first).
    #[error("the delayed store failed on {path}")]
    Store {
        path: String,
        #[source]
        source: Arc<StoreError>,
    },
}

impl ClaimError {
    /// A request on `path` failed, for `map_err`.
    pub(super) fn on(path: &str) -> impl FnOnce(Fault) -> Self + '_ {
        move |source| Self::Zk {
            path: path.to_owned(),
            source,
        }
    }

    /// The claim may have gone out without its answer coming back — the connection was lost
    /// (`ConnectionLoss`, or the client's own "no response from connection"), the reply was
    /// unreadable — so its multi may have been applied. [`read_back`](super::ClaimPlan::read_back) tells. A
    /// server's refusal is an answer: nothing of the multi was applied.
    pub fn unanswered(&self) -> bool {
        let ClaimError::Zk { source, .. } = self else {
            return false;
        };
        source.is_unknown_outcome()
    }

    /// A refusal that holds until an operator acts, and which: the ensemble will refuse every
    /// such write until then.
    pub fn standing_refusal(&self) -> Option<StandingRefusal> {
        match self {
            ClaimError::Zk {
                source: Fault::QuotaExceeded,
                ..
            } => Some(StandingRefusal::Quota),
            ClaimError::Zk {
                source: Fault::NoAuth,
                ..
            } => Some(StandingRefusal::Acl),
            _ => None,
        }
    }
}

/// Why ZooKeeper refuses writes until an operator acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandingRefusal {
    /// A quota on a parent of the node is exceeded (`zookeeper.enforceQuota`).
    Quota,
    /// The node's ACL does not let this node's identity write.
    Acl,
}

/// A failed update of a claimed record.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// A definite answer: retrying cannot change it.
    #[error("run record {path} was changed by someone else; not overwriting it")]
    Conflict {
        path: String,
        /// The stored record's status, when it was read (`None`: gone, or not read).
        stored: Option<RunStatus>,
    },
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: Fault,
    },
    #[error("the delayed store failed on {path}")]
    Store {
        path: String,
        #[source]
        source: Arc<StoreError>,
    },
    /// Only the lock's owner resolves a run kept in the delayed store, and we are not it now.
    #[error("not the lock's owner now: the run is left for the owner to resolve")]
    NotOwner,
}

/// A request of the ledger's failed: a read, a watch, or a write with nothing to decide.
#[derive(Debug, thiserror::Error)]
#[error("zookeeper request on {path} failed")]
pub struct RequestFailed {
    pub path: String,
    #[source]
    pub source: Fault,
}

impl RequestFailed {
    /// A request on `path` failed, for `map_err`.
    pub fn on(path: &str) -> impl FnOnce(Fault) -> Self + '_ {
        move |source| Self {
            path: path.to_owned(),
            source,
        }
    }
}
