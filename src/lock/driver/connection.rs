//! One established ZooKeeper session of the lock driver: opening it (connect with backoff, the
//! lock group's persistent nodes, our member node), the heartbeat that tells when a server last
//! answered, and the one clock the lock path reads.
//!
//! Owns: `Connection`, its setup and its heartbeat task; why the driver stops (`DriverError`).
//! Must not: send the lock machine's requests (`lock::driver::requests`) or decide what a
//! session's state means (the lock machine does).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::ensemble::ZkSettings;
use crate::ids::SessionId;
use crate::layout::LockPaths;
use crate::lock::members::{self, MemberError};
use crate::report::error_chain;
use crate::tally::WriteKind;
use crate::zk::{self, Fault, Mode, States, Zk};

use super::settings::{Heard, LockRole, LockSettings};

/// Pause before retrying a session whose setup (paths, member node) failed; doubles up to the max.
const MIN_SETUP_RETRY: Duration = Duration::from_millis(500);
const MAX_SETUP_RETRY: Duration = Duration::from_secs(30);

/// Why the driver stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Member(MemberError),
    /// The servers refuse `addWatch`: they are older than 3.6. Waiting cannot fix that.
    #[error(
        "the ZooKeeper servers of {connect} refuse addWatch (persistent recursive watches, which \
         zkcron's pauses, delayed submissions and drift checks need): zkcron needs ZooKeeper 3.6 \
         or newer"
    )]
    NoRecursiveWatches { connect: String },
}

/// One established session.
pub(super) struct Connection {
    pub(super) zk: Zk,
    pub(super) session: SessionId,
    pub(super) timeout: Duration,
    pub(super) states: States,
    heartbeat: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The heartbeat holds a clone; the session closes only once every clone is gone.
        self.heartbeat.abort();
    }
}

impl Connection {
    /// The session ready for the machine: its heartbeat runs and its lease shows in status.
    pub(super) fn start(zk: Zk, states: States, settings: &LockSettings) -> Self {
        let timeout = zk.session_timeout();
        settings.heard.heard_at(std::time::SystemTime::now());
        settings.heard.set_timeout(timeout);
        let heartbeat = tokio::spawn(heartbeat(
            zk.clone(),
            settings.paths.dir.clone(),
            Arc::clone(&settings.heard),
        ));
        Self {
            session: SessionId(zk.session_id()),
            zk,
            timeout,
            states,
            heartbeat,
        }
    }

    /// Requests are bounded so that a request sent just as the connection drops cannot keep the
    /// loop from the machine's deadlines; a timed-out request is a lost reply to the machine.
    pub(super) fn request_timeout(&self) -> Duration {
        self.timeout / 3
    }

    /// When the latest answered request of the session was sent, whoever sent it.
    pub(super) fn last_heard(&self) -> Instant {
        self.zk.last_answered().into_std()
    }
}

/// The one clock read on the lock path; tokio's clock, so `tokio::time::pause()` drives it in tests.
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Connects (retrying until up), creates the group's persistent nodes and registers our member.
/// `Ok(None)` when shut down meanwhile.
pub(super) async fn open_session(
    zk: &ZkSettings,
    settings: &LockSettings,
    shutdown: &CancellationToken,
) -> Result<Option<Connection>, DriverError> {
    let mut retry = MIN_SETUP_RETRY;
    loop {
        let Some(doorway) = zk::connect_until_up(zk, shutdown).await else {
            return Ok(None);
        };
        let states = doorway.states();
        let setup = async {
            ensure_lock_paths(&doorway, &settings.paths).await?;
            if !matches!(settings.role, LockRole::Member { .. }) {
                return Ok(());
            }
            let member = settings.paths.member(&settings.me.node_id);
            members::register(&doorway, &member, &settings.me, shutdown).await
        };
        match setup.await {
            Ok(()) => {
                if !zk::serves_recursive_watches(&doorway, &settings.paths.dir).await {
                    return Err(DriverError::NoRecursiveWatches {
                        connect: zk.connect.clone(),
                    });
                }
                return Ok(Some(Connection::start(doorway, states, settings)));
            }
            Err(MemberError::Cancelled { .. }) => return Ok(None),
            Err(err @ MemberError::Duplicate { .. }) => return Err(DriverError::Member(err)),
            Err(err) => {
                tracing::warn!(error = %error_chain(&err), retry_in = ?retry, "lock group setup failed");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(MAX_SETUP_RETRY);
    }
}

/// Makes sure the servers answer the session at least every seventh of the session timeout, so
/// a disconnected owner can count the session timeout from the same moment the server does
/// (DESIGN.md "The lock": Lost within the session timeout). Any request of the session proves
/// it heard (`Zk::last_answered`), so this asks something cheap only when nothing else was
/// answered for that long: an owner firing every second never asks. A seventh, just under the
/// client's own ping interval (3/20 of the session timeout, after which an idle client pings):
/// an idle client then never pings beside it, one round trip where there were two.
async fn heartbeat(client: Zk, path: String, heard: Arc<Heard>) {
    let period = client.session_timeout() / 7;
    let client = client.bounded_by(period * 2);
    let mut asked = tokio::time::Instant::now();
    loop {
        let last_answered = client.last_answered();
        heard.heard_at(system_time_of(last_answered));
        // At most one question a period, answered or not: a session that fails every request
        // at once must not make this a busy loop.
        let next = (last_answered + period).max(asked + period);
        if tokio::time::Instant::now() < next {
            tokio::time::sleep_until(next).await;
            continue;
        }
        asked = tokio::time::Instant::now();
        // Its answer, if any, is noted by the doorway.
        let _ = client.check_stat(&path).await;
    }
}

/// The wall-clock time of `instant` on the monotonic clock, for the status's lease.
fn system_time_of(instant: tokio::time::Instant) -> std::time::SystemTime {
    let ago = tokio::time::Instant::now().saturating_duration_since(instant);
    std::time::SystemTime::now()
        .checked_sub(ago)
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// The lock group's persistent nodes: its directory, `members/` and `epoch`.
pub(super) async fn ensure_lock_paths(client: &Zk, paths: &LockPaths) -> Result<(), MemberError> {
    let zk_err = |path: &str, source| MemberError::Zk {
        path: path.to_owned(),
        source,
    };
    for dir in [&paths.members, &paths.dir] {
        client
            .ensure_persistent(dir)
            .await
            .map_err(|source| zk_err(dir, source))?;
    }
    if client
        .check_stat(&paths.epoch)
        .await
        .map_err(|source| zk_err(&paths.epoch, source))?
        .is_some()
    {
        return Ok(());
    }
    match client
        .create(WriteKind::Lock, &paths.epoch, b"", Mode::Persistent)
        .await
    {
        Ok(_) | Err(Fault::NodeExists) => Ok(()),
        Err(source) => Err(zk_err(&paths.epoch, source)),
    }
}
