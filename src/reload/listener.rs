//! The daemon's end of `zkcron reload`: a Unix socket in Linux's abstract namespace named after
//! the daemon's pid (`@zkcron/reload/<pid>`: no file to create, clean up or give permissions;
//! gone with the process), which turns each connection into a reload request and writes back its
//! answer as one JSON line.
//!
//! Owns: the socket, who may ask (root, or the daemon's own user: the kernel's peer
//! credentials), and the one-line exchange.
//! Must not: reload anything itself: it hands the request to the daemon's reloader.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::answer::ReloadRequest;

/// What a client writes: one line.
pub(super) const ASK: &str = "reload";

/// How long a client has to send its line: a connection that says nothing is dropped.
const ASK_BOUND: Duration = Duration::from_secs(5);

/// Every daemon's socket name starts so, its pid after it.
pub(super) const SOCKET_PREFIX: &str = "zkcron/reload/";

/// The socket's name for the daemon with `pid`, without the abstract namespace's leading NUL.
pub fn socket_name(pid: u32) -> String {
    format!("{SOCKET_PREFIX}{pid}")
}

/// The socket's address for the daemon with `pid`.
///
/// # Errors
/// Never for this short name; the OS's type can refuse a name over 107 bytes.
pub(super) fn address(pid: u32) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(socket_name(pid).as_bytes())
}

/// Listens for reload requests until `shutdown`, passing each to `requests`.
///
/// # Errors
/// The socket could not be bound (another process holds the name: nothing else can reload this
/// daemon but SIGHUP then, which the caller logs).
pub fn listen(
    requests: mpsc::UnboundedSender<ReloadRequest>,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let bound = std::os::unix::net::UnixListener::bind_addr(&address(std::process::id())?)?;
    bound.set_nonblocking(true)?;
    let listener = UnixListener::from_std(bound)?;
    Ok(tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, requests.clone()));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "reload socket: cannot accept a connection");
                    // A persistent error (out of descriptors) must not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }))
}

/// One client: checked, asked, answered.
async fn answer(stream: UnixStream, requests: mpsc::UnboundedSender<ReloadRequest>) {
    let me = nix::unistd::geteuid().as_raw();
    match stream.peer_cred() {
        Ok(peer) if peer.uid() == 0 || peer.uid() == me => {}
        Ok(peer) => {
            tracing::warn!(
                uid = peer.uid(),
                pid = ?peer.pid(),
                "reload refused: only root or the daemon's own user may ask"
            );
            return;
        }
        Err(err) => {
            tracing::warn!(error = %err, "reload socket: cannot read the client's credentials");
            return;
        }
    }
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(64));
    match tokio::time::timeout(ASK_BOUND, reader.read_line(&mut line)).await {
        Ok(Ok(_)) if line.trim() == ASK => {}
        _ => return,
    }
    let (tx, rx) = oneshot::channel();
    if requests.send(ReloadRequest { answer: Some(tx) }).is_err() {
        return;
    }
    let Ok(answer) = rx.await else {
        return;
    };
    let mut document = serde_json::to_vec(&answer).unwrap_or_default();
    document.push(b'\n');
    // The client may have given up; the log has the outcome all the same.
    let _ = write.write_all(&document).await;
}
