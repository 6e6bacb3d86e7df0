//! What the lock group records in ZooKeeper about ticks: for now, the per-tick ownership proof.
//!
//! Owns: the tick's one round trip that proves we still own the lock (DESIGN.md "ZooKeeper
//! layout": a check of the epoch at our fencing token; issue "Exactly once per tick" turns it into
//! the tick claim that also creates the run record).
//! Must not: spawn processes or decide lock policy.

pub mod record;

use zookeeper_client::{Client, MultiWriteError};

use crate::ids::FencingToken;

/// Why a tick could not be proved ours.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("lock lost before the tick: the epoch has moved past token {token}")]
    NotOwner { token: FencingToken },
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: zookeeper_client::Error,
    },
}

/// Proves in one round trip that nobody acquired the lock since we did and that our session is
/// alive: a multi-op whose only operation checks the epoch's version against our token. A write
/// path operation, so the leader orders it — a plain read could be served stale by a follower.
///
/// # Errors
/// `NotOwner` when the epoch moved on; `Zk` when the request failed (an expired session fails here
/// with `SessionExpired`).
///
/// # Cancellation safety
/// The request is sent when this is called, not when awaited; dropping the future only drops the
/// answer.
pub fn prove_ownership<'c>(
    client: &'c Client,
    epoch_path: &str,
    token: FencingToken,
) -> impl Future<Output = Result<(), ClaimError>> + Send + 'c {
    let zk_err = |source| ClaimError::Zk {
        path: epoch_path.to_owned(),
        source,
    };
    let mut multi = client.new_multi_writer();
    let sent = multi
        .add_check_version(epoch_path, token.0)
        .map(|()| multi.commit())
        .map_err(zk_err);
    let path = epoch_path.to_owned();
    async move {
        match sent?.await {
            Ok(_) => Ok(()),
            Err(MultiWriteError::OperationFailed {
                source: zookeeper_client::Error::BadVersion,
                ..
            }) => Err(ClaimError::NotOwner { token }),
            Err(
                MultiWriteError::OperationFailed { source, .. }
                | MultiWriteError::RequestFailed { source },
            ) => Err(ClaimError::Zk { path, source }),
        }
    }
}
