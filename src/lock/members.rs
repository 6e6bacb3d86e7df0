//! Registers this process as a live member of its lock group: `<root>/<lock>/members/<node_id>`.
//!
//! Owns: the member node, and refusing a second live process with the same `node_id` — after
//! waiting out the session of a previous process of this host, so that a crash-restart under
//! systemd never turns into a restart loop (DESIGN.md "The lock").
//! Must not: touch the lock node or decide anything about ownership.

use std::time::Duration;

use crate::ids::{NodeId, SessionId};
use crate::lock::node::OwnerInfo;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, Zk};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Extra wait past the session timeout: servers expire sessions on their tick, so a little late.
const EXPIRY_MARGIN: Duration = Duration::from_secs(2);

/// Why we could not register.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error(
        "node_id {node_id} is already in use by another live zkcron process ({holder}); \
         give every process its own lock.node_id"
    )]
    Duplicate { node_id: NodeId, holder: String },
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: Fault,
    },
    #[error("stopped while waiting for member node {path}")]
    Cancelled { path: String },
}

/// How long a member node of another session may stand before we call it a duplicate.
pub fn duplicate_wait(session_timeout: Duration) -> Duration {
    session_timeout + (session_timeout / 2).max(EXPIRY_MARGIN)
}

/// Creates our ephemeral member node. If another session holds it, waits (watching it) up to
/// [`duplicate_wait`] for it to vanish — usually our own previous process whose session has not
/// expired yet — and only then refuses.
///
/// # Errors
/// [`MemberError::Duplicate`] when the node outlives the wait; `Zk` on a failed request;
/// `Cancelled` when `shutdown` fires.
///
/// # Cancellation safety
/// Safe: at worst our member node exists, and it goes with the session.
pub async fn register(
    client: &Zk,
    path: &str,
    me: &OwnerInfo,
    shutdown: &CancellationToken,
) -> Result<(), MemberError> {
    let zk_err = |source| MemberError::Zk {
        path: path.to_owned(),
        source,
    };
    let my_session = SessionId(client.session_id());
    let deadline = Instant::now() + duplicate_wait(client.session_timeout());
    let mut announced = false;
    loop {
        match client
            .create(WriteKind::Member, path, &me.to_bytes(), Mode::Ephemeral)
            .await
        {
            Ok(_) => return Ok(()),
            Err(Fault::NodeExists) => {}
            Err(source) => return Err(zk_err(source)),
        }
        let (data, stat, watcher) = match client.get_and_watch_data(path).await {
            Ok(found) => found,
            Err(Fault::NoNode) => continue, // gone in between: create again
            Err(source) => return Err(zk_err(source)),
        };
        if SessionId(stat.ephemeral_owner) == my_session {
            return Ok(()); // our own create, whose reply was lost
        }
        let holder = describe_holder(&data, stat.ephemeral_owner);
        if Instant::now() >= deadline {
            return Err(MemberError::Duplicate {
                node_id: me.node_id.clone(),
                holder,
            });
        }
        if !announced {
            announced = true;
            tracing::info!(
                path,
                %holder,
                wait = ?duplicate_wait(client.session_timeout()),
                "member node held by another session, most likely this node's previous process; \
                 waiting for that session to expire"
            );
        }
        tokio::select! {
            () = shutdown.cancelled() => return Err(MemberError::Cancelled { path: path.to_owned() }),
            _ = watcher.changed() => {}
            // One more look at the deadline: if it is still there then, it is a live duplicate.
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

fn describe_holder(data: &[u8], session: i64) -> String {
    match OwnerInfo::parse(data) {
        Ok(info) => format!(
            "host {} pid {} session {}",
            info.host,
            info.pid,
            SessionId(session)
        ),
        Err(_) => format!("session {} with unreadable data", SessionId(session)),
    }
}
