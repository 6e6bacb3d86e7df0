//! The ZooKeeper session: connect string and chroot, session timeout, connecting with backoff.
//!
//! Owns: turning settings into a connected `zookeeper_client::Client` (creating the connect
//! string's chroot node when it is missing, as Curator does for its namespace; TLS and SASL
//! through the client's own options); the doorway every request goes through (`door`: `Zk`, its
//! time bound, its count by why, a typed `Fault`); following a subtree with a persistent
//! recursive watch (`watch`). What it writes is counted in `crate::tally`.
//! Must not: know about jobs or the lock's policy.

mod answered;
mod door;
mod tls;
pub mod watch;

pub use door::{
    Fault, Mode, Multi, MultiFault, NodeAcl, NodeEvent, OneChange, REQUEST_BOUND, Resumable,
    Sequence, SessionEvent, Stat, States, Written, Zk,
};

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use zookeeper_client::{Acl, Acls, AuthId, Client, Permission};

use crate::ensemble::{AclPolicy, BadConnectString, ZkSettings, split_connect};

/// First pause after a failed connect; doubles up to [`MAX_CONNECT_BACKOFF`].
const MIN_CONNECT_BACKOFF: Duration = Duration::from_millis(200);
const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(5);

/// The ACL of the nodes we create: open to all, or closed to all but the sessions that
/// authenticate as the creator does, with read-only access for each identity `read_acl` names.
fn acls_of(settings: &ZkSettings) -> Vec<Acl> {
    match settings.acl {
        AclPolicy::Open => Acls::anyone_all().to_vec(),
        AclPolicy::Creator => {
            Acls::creator_all()
                .iter()
                .cloned()
                .chain(settings.read_acl.iter().map(|reader| {
                    Acl::new(Permission::READ, AuthId::new(&reader.scheme, &reader.id))
                }))
                .collect()
        }
    }
}

/// A failure to talk to ZooKeeper, naming what we tried to do.
#[derive(Debug, thiserror::Error)]
pub enum ZkError {
    #[error(transparent)]
    BadConnectString(#[from] BadConnectString),
    /// Servers accepted connections, but no session was made within `timeout`.
    #[error("no session within {timeout:?}: the servers accepted connections but did not answer")]
    NoSession { timeout: Duration },
    /// No server of the connect string accepted a TCP connection.
    #[error("no zookeeper server of {connect} accepts connections: {causes}")]
    Unreachable { connect: String, causes: String },
    #[error("zookeeper TLS settings for {connect} are not usable: {reason}")]
    Tls { connect: String, reason: String },
    /// The client only says it timed out; a handshake of our own says why.
    #[error(
        "TLS handshake with zookeeper at {host} failed: {reason} (check zookeeper.tls: the CA \
         must have signed the servers' certificates, and the servers must accept this node's)"
    )]
    TlsHandshake { host: String, reason: String },
    #[error("cannot connect to zookeeper at {connect}")]
    Connect {
        connect: String,
        #[source]
        source: zookeeper_client::Error,
    },
    #[error("zookeeper request on {path} failed")]
    Request {
        path: String,
        #[source]
        source: Fault,
    },
}

/// Opens one session. Creates the chroot node if it is missing.
///
/// # Errors
/// No server answered within about the session timeout, or the chroot could not be created.
///
/// # Cancellation safety
/// Dropping the future drops the half-made session, which the server then closes or expires.
pub async fn connect(settings: &ZkSettings) -> Result<Client, ZkError> {
    let (hosts, chroot) = split_connect(&settings.connect)?;
    probe(settings, hosts).await?;
    let client = match open(connector(settings)?, settings, hosts).await {
        Ok(client) => client,
        Err(source) => return Err(diagnose(settings, hosts, source).await),
    };
    let Some(chroot) = chroot else {
        return Ok(client);
    };
    Zk::new(client.clone(), &acls_of(settings), REQUEST_BOUND)
        .ensure_persistent(chroot)
        .await
        .map_err(|source| ZkError::Request {
            path: chroot.to_owned(),
            source,
        })?;
    with_chroot(settings, client, chroot)
}

/// A one-shot client (the CLI, `Steer`, `Delayed`) made no session within its `connect_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach zookeeper at {connect}")]
pub struct Unreachable {
    pub connect: String,
    #[source]
    pub source: ZkError,
}

/// The session of a one-shot client: [`connect`], given up after `timeout` (the config's
/// `connect_timeout`) — a command must answer its operator, not retry like the daemon. Each of
/// its requests is bounded by `timeout` too.
///
/// # Errors
/// [`Unreachable`], naming the connect string, with why: [`connect`]'s error, or
/// [`ZkError::NoSession`] when no session was made in time.
///
/// # Cancellation safety
/// As [`connect`].
pub async fn connect_once(settings: &ZkSettings, timeout: Duration) -> Result<Zk, Unreachable> {
    tokio::time::timeout(timeout, connect(settings))
        .await
        .unwrap_or(Err(ZkError::NoSession { timeout }))
        .map(|client| Zk::new(client, &acls_of(settings), timeout))
        .map_err(|source| Unreachable {
            connect: settings.connect.clone(),
            source,
        })
}

/// How long a server gets to accept a TCP connection in [`probe`].
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Fails at once, naming each server's cause, when no server of `hosts` accepts a TCP
/// connection: the client would only say "timeout", after a whole session timeout. A server that
/// accepts but does not answer (paused, or overloaded) is the client's to time out.
async fn probe(settings: &ZkSettings, hosts: &str) -> Result<(), ZkError> {
    let mut attempts = tokio::task::JoinSet::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        // A scheme prefix (`tcp://`, `tcp+tls://`) is the client's; the socket wants host:port.
        let host = host
            .strip_prefix("tcp+tls://")
            .or_else(|| host.strip_prefix("tcp://"))
            .unwrap_or(host)
            .to_owned();
        attempts.spawn(async move {
            let connect = tokio::net::TcpStream::connect(host.clone());
            match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(err)) => Err(format!("{host}: {err}")),
                Err(_) => Err(format!("{host}: no answer within {PROBE_TIMEOUT:?}")),
            }
        });
    }
    let mut causes = Vec::new();
    while let Some(attempt) = attempts.join_next().await {
        match attempt {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(cause)) => causes.push(cause),
            Err(err) => causes.push(err.to_string()),
        }
    }
    causes.sort();
    Err(ZkError::Unreachable {
        connect: settings.connect.clone(),
        causes: causes.join("; "),
    })
}

/// How one attempt to take a session back ended.
#[derive(Debug)]
pub enum Resumed {
    /// The servers still held it: the same session, its ephemeral nodes still there; its
    /// watches are not (they belonged to the old client), so whoever needs them arms them again.
    Session(Zk),
    /// A server answered that the session has expired.
    Expired,
    /// No server answered in time, or the attempt failed otherwise: try again, or give up.
    NoAnswer(ZkError),
}

/// Tries to take `session` back: the client gives up on a session after about 1.4 × its timeout
/// without an answer and calls it expired, though the servers (all paused, say) may still hold
/// it. Its ephemeral nodes — our lock and member nodes — are then still ours.
pub async fn resume(settings: &ZkSettings, session: Resumable) -> Resumed {
    let session = session.0;
    let (hosts, chroot) = match split_connect(&settings.connect) {
        Ok(parts) => parts,
        Err(err) => return Resumed::NoAnswer(err.into()),
    };
    let connector = match connector(settings) {
        Ok(connector) => connector,
        Err(err) => return Resumed::NoAnswer(err),
    };
    let client = match open(connector.with_session(session), settings, hosts).await {
        Ok(client) => client,
        Err(zookeeper_client::Error::SessionExpired) => return Resumed::Expired,
        Err(source) => return Resumed::NoAnswer(connect_err(settings, source)),
    };
    // The chroot node exists: the session being resumed made or found it.
    let doorway = |client| Zk::new(client, &acls_of(settings), REQUEST_BOUND);
    let Some(chroot) = chroot else {
        return Resumed::Session(doorway(client));
    };
    match with_chroot(settings, client, chroot) {
        Ok(client) => Resumed::Session(doorway(client)),
        Err(err) => Resumed::NoAnswer(err),
    }
}

fn connector(settings: &ZkSettings) -> Result<zookeeper_client::Connector, ZkError> {
    let mut connector = Client::connector().with_session_timeout(settings.session_timeout);
    if let Some(auth) = &settings.auth {
        connector = connector.with_auth("digest", auth.expose().as_bytes());
    }
    if let Some(tls) = &settings.tls {
        let options = tls::options(tls).map_err(|reason| ZkError::Tls {
            connect: settings.connect.clone(),
            reason,
        })?;
        connector = connector.with_tls(options);
    }
    if let Some(sasl) = &settings.sasl {
        connector = connector.with_sasl(zookeeper_client::SaslOptions::digest_md5(
            sasl.username.clone(),
            sasl.password.expose().to_owned(),
        ));
    }
    Ok(connector)
}

/// Connects in plain text, or over TLS to every server the connect string does not mark
/// `tcp://` when TLS is configured.
async fn open(
    connector: zookeeper_client::Connector,
    settings: &ZkSettings,
    hosts: &str,
) -> Result<Client, zookeeper_client::Error> {
    if settings.tls.is_some() {
        connector.secure_connect(hosts).await
    } else {
        connector.connect(hosts).await
    }
}

/// A failed connect, said as precisely as possible: with TLS configured, a handshake of our own
/// with the first TLS server names what the client only reports as a timeout.
async fn diagnose(settings: &ZkSettings, hosts: &str, source: zookeeper_client::Error) -> ZkError {
    let tls_host = hosts
        .split(',')
        .map(str::trim)
        .find(|host| !host.starts_with("tcp://"))
        .map(|host| host.strip_prefix("tcp+tls://").unwrap_or(host).to_owned());
    if let (Some(tls), Some(host)) = (settings.tls.clone(), tls_host) {
        let handshake = tokio::task::spawn_blocking(move || {
            tls::handshake_error(&tls, &host).map(|reason| (host, reason))
        });
        if let Ok(Some((host, reason))) = handshake.await {
            return ZkError::TlsHandshake { host, reason };
        }
    }
    connect_err(settings, source)
}

fn connect_err(settings: &ZkSettings, source: zookeeper_client::Error) -> ZkError {
    ZkError::Connect {
        connect: settings.connect.clone(),
        source,
    }
}

fn with_chroot(settings: &ZkSettings, client: Client, chroot: &str) -> Result<Client, ZkError> {
    client.chroot(chroot).map_err(|_| {
        ZkError::BadConnectString(BadConnectString {
            connect: settings.connect.clone(),
            reason: "chroot is not a valid znode path",
        })
    })
}

/// Connects, retrying with a doubling backoff until a session is up or `shutdown` is cancelled
/// (`None`). Each failure is logged, so an unreachable ensemble at start is visible.
///
/// # Cancellation safety
/// Safe: nothing is half-done when it returns early.
pub async fn connect_until_up(settings: &ZkSettings, shutdown: &CancellationToken) -> Option<Zk> {
    let mut backoff = MIN_CONNECT_BACKOFF;
    loop {
        let attempt = tokio::select! {
            () = shutdown.cancelled() => return None,
            attempt = connect(settings) => attempt,
        };
        match attempt {
            Ok(client) => return Some(Zk::new(client, &acls_of(settings), REQUEST_BOUND)),
            Err(err) => {
                tracing::warn!(error = %crate::report::error_chain(&err), retry_in = ?backoff, "zookeeper connect failed");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_CONNECT_BACKOFF);
    }
}

/// Whether the servers accept `addWatch` (persistent recursive watches, ZooKeeper 3.6+): `false`
/// only when they answer that they do not implement it. Any other failure is the watches' own to
/// report and retry; the probe's watch is removed again at once.
pub async fn serves_recursive_watches(zk: &Zk, path: &str) -> bool {
    let probe = zk
        .client()
        .watch(path, zookeeper_client::AddWatchMode::PersistentRecursive)
        .await;
    !matches!(probe, Err(zookeeper_client::Error::Unimplemented))
}
