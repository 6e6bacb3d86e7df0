//! Cluster-wide caps on runs (issue 19, `[[limit]]`): a ZooKeeper semaphore of ephemeral
//! leases under `limits/<name>`, one per run that holds the limit, freed when the run gives it
//! back or its node's session ends.
//!
//! Owns: taking and giving back a lease, and reading who holds one. A lease is held when its
//! node is among the first `max` by sequence number at the moment its taker lists them; since a
//! later node's sequence is always higher, a holder stays among the first `max` for as long as
//! it exists, so at most `max` are ever held. [`take`] gives up at once when the limit is full
//! (its node deleted); [`acquire`] keeps its node as a place in the queue and waits, watching,
//! for its turn: first come, first served, with no request while it waits, and the place goes
//! when the wait is given up or the session ends.
//! Must not: decide whether a run waits, or how long (the fire machine does).

use super::Ledger;
use serde::{Deserialize, Serialize};

use crate::ids::NodeId;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode};

/// Who holds a lease: the run and its node (the lease node's data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseHolder {
    pub run_id: String,
    pub node_id: NodeId,
}

/// A lease held: give it back with [`give_back`] when the run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub path: String,
}

/// What [`take`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    Held(Lease),
    /// `max` leases are out; none is held for the caller.
    Full,
}

/// Why a lease could not be taken, given back or listed.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: Fault,
    },
    /// The wait was given up (the run will not start): its place in the queue is gone.
    #[error("the wait for a lease at {path} was given up")]
    GivenUp { path: String },
    /// A lease node was made but could not be deleted again: it counts against the limit
    /// until it goes (at the end of this node's session at the latest), never above it.
    #[error("lease {path} not given back; it goes with this node's session")]
    Stranded {
        path: String,
        #[source]
        source: Fault,
    },
}

const PREFIX: &str = "lease-";

/// Takes one of the `max` leases of the limit whose leases live under `dir` for `holder`.
///
/// # Errors
/// A request failed. A lease made whose answer was lost stays until this session ends, counted
/// against the limit (never above it).
pub async fn take(
    client: &Ledger,
    dir: &str,
    max: usize,
    holder: &LeaseHolder,
) -> Result<Taken, LimitError> {
    let (path, mine) = place(client, dir, holder).await?;
    let ahead = match client.zk().list_children(dir).await {
        Ok(children) => sequences(dir, &children)
            .into_iter()
            .filter(|other| *other < mine)
            .count(),
        Err(source) => {
            // Not known to be held: give it up rather than risk counting wrong.
            drop_lease(client, &path).await?;
            return Err(zk(dir, source));
        }
    };
    if ahead < max {
        return Ok(Taken::Held(Lease { path }));
    }
    drop_lease(client, &path).await?;
    Ok(Taken::Full)
}

/// Waits, in the queue, for one of the `max` leases under `dir` for `holder`: a place is taken at
/// once (an ephemeral sequential node), and it becomes the lease when fewer than `max` places
/// ahead of it are left. Watches the queue meanwhile; sends nothing while it waits.
///
/// # Errors
/// `cancel` fired (the place is given up), or a request or the session failed (the place is
/// given up if it can be; it goes with the session otherwise).
pub async fn acquire(
    client: &Ledger,
    dir: &str,
    max: usize,
    holder: &LeaseHolder,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Lease, LimitError> {
    let (path, mine) = place(client, dir, holder).await?;
    loop {
        let (children, watcher) = match client.zk().list_and_watch_children(dir).await {
            Ok(listed) => listed,
            Err(source) => {
                drop_lease(client, &path).await?;
                return Err(zk(dir, source));
            }
        };
        let ahead = sequences(dir, &children)
            .into_iter()
            .filter(|other| *other < mine)
            .count();
        if ahead < max {
            return Ok(Lease { path });
        }
        tokio::select! {
            () = cancel.cancelled() => {
                drop_lease(client, &path).await?;
                return Err(LimitError::GivenUp { path });
            }
            changed = watcher.changed() => {
                if !changed {
                    drop_lease(client, &path).await?;
                    return Err(zk(dir, Fault::ConnectionLoss));
                }
            }
        }
    }
}

/// Takes a place in the queue under `dir`: its path and sequence number.
async fn place(
    client: &Ledger,
    dir: &str,
    holder: &LeaseHolder,
) -> Result<(String, i64), LimitError> {
    let data = serde_json::to_vec(holder).unwrap_or_default();
    let prefix = format!("{dir}/{PREFIX}");
    let sequence = match client
        .zk()
        .create(WriteKind::Lease, &prefix, &data, Mode::EphemeralSequential)
        .await
    {
        Ok((_, sequence)) => sequence,
        Err(Fault::NoNode) => {
            client
                .zk()
                .ensure_persistent(dir)
                .await
                .map_err(|source| zk(dir, source))?;
            client
                .zk()
                .create(WriteKind::Lease, &prefix, &data, Mode::EphemeralSequential)
                .await
                .map_err(|source| zk(dir, source))?
                .1
        }
        Err(source) => return Err(zk(dir, source)),
    };
    Ok((format!("{prefix}{sequence}"), sequence.value()))
}

/// Gives `lease` back; one already gone (its session ended) is given back too.
///
/// # Errors
/// The delete failed: the lease goes with this node's session.
pub async fn give_back(client: &Ledger, lease: &Lease) -> Result<(), LimitError> {
    drop_lease(client, &lease.path).await
}

/// The holders of the leases under `dir` now, in the order they were taken (unreadable ones
/// are logged with their path and left out).
///
/// # Errors
/// The listing failed; no `dir` means no holders.
pub async fn holders(client: &Ledger, dir: &str) -> Result<Vec<LeaseHolder>, LimitError> {
    let mut children = client
        .zk()
        .children_if_there(dir)
        .await
        .map_err(|source| zk(dir, source))?;
    children.retain(|name| sequence_of(name).is_some());
    children.sort_by_key(|name| sequence_of(name));
    let mut found = Vec::new();
    for name in children {
        let path = format!("{dir}/{name}");
        match client.zk().get_data(&path).await {
            Ok((data, _)) => match serde_json::from_slice(&data) {
                Ok(holder) => found.push(holder),
                Err(err) => tracing::warn!(path, error = %err, "unreadable lease; left out"),
            },
            Err(Fault::NoNode) => {}
            Err(source) => return Err(zk(&path, source)),
        }
    }
    Ok(found)
}

async fn drop_lease(client: &Ledger, path: &str) -> Result<(), LimitError> {
    client
        .zk()
        .delete_if_there(WriteKind::Lease, path, None)
        .await
        .map_err(|source| LimitError::Stranded {
            path: path.to_owned(),
            source,
        })
}

/// The sequence numbers of the lease nodes among `children` (foreign names logged, skipped).
fn sequences(dir: &str, children: &[String]) -> Vec<i64> {
    children
        .iter()
        .filter_map(|name| {
            let sequence = sequence_of(name);
            if sequence.is_none() {
                tracing::warn!(path = format!("{dir}/{name}"), "not a lease; not counted");
            }
            sequence
        })
        .collect()
}

fn sequence_of(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(PREFIX)?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

fn zk(path: &str, source: Fault) -> LimitError {
    LimitError::Zk {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_read_back_by_sequence_and_foreign_ones_skipped() {
        assert_eq!(sequence_of("lease-0000000012"), Some(12));
        assert_eq!(sequence_of("lease-0000000000000000012"), Some(12));
        for foreign in ["lease-", "lease-x1", "other-0000000001", "0000000001"] {
            assert_eq!(sequence_of(foreign), None, "{foreign}");
        }
        let children = ["lease-0000000003", "junk", "lease-0000000001"].map(String::from);
        assert_eq!(sequences("/l", &children), [3, 1]);
    }
}
