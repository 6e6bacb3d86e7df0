//! A TCP proxy in front of one ZooKeeper server, that a test can fault: a host partitioned from
//! ZooKeeper without root (issue "Faster recovery and proof under faults", the chaos suite).
//!
//! Owns: one listening port on 127.0.0.1, the connections accepted on it and their upstream
//! connections, and what passes between them ([`Fault`]).
//! Must not: know ZooKeeper's protocol; it moves bytes or drops them.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What the proxy does to the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Everything passes.
    None,
    /// Requests reach the server, its answers are dropped: the server hears the client (its
    /// session stays alive) while the client hears nothing.
    MuteReplies,
    /// Connections are accepted and kept, nothing passes either way.
    Blackhole,
    /// Open connections are closed and new ones closed at once.
    Cut,
}

/// A running proxy; stops (closing every connection) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    fault: Arc<watch::Sender<Fault>>,
    tasks: JoinSet<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let fault = Arc::new(watch::Sender::new(Fault::None));
        let mut tasks = JoinSet::new();
        tasks.spawn(accept(listener, upstream, Arc::clone(&fault)));
        Ok(Self { addr, fault, tasks })
    }

    /// `127.0.0.1:port`, for a connect string.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Applies `fault` from now on, to open connections too.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, fault: Arc<watch::Sender<Fault>>) {
    // Connections live in this set, so aborting the accept task closes them all.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if *fault.borrow() == Fault::Cut {
                    drop(client);
                    continue;
                }
                connections.spawn(relay(client, upstream, fault.subscribe()));
            }
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Moves bytes between `client` and `upstream` as the fault allows, until either side closes
/// or the proxy cuts.
async fn relay(client: TcpStream, upstream: SocketAddr, fault: watch::Receiver<Fault>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let requests = pump(
        client_read,
        server_write,
        fault.clone(),
        Direction::Requests,
    );
    let replies = pump(server_read, client_write, fault, Direction::Replies);
    // Either direction ending (a close, an error, a cut) ends the connection both ways.
    tokio::select! {
        () = requests => {}
        () = replies => {}
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Requests,
    Replies,
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    direction: Direction,
) {
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            changed = fault.changed() => {
                if changed.is_err() || *fault.borrow() == Fault::Cut {
                    return;
                }
                continue;
            }
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let passes = match *fault.borrow() {
            Fault::None => true,
            Fault::MuteReplies => direction == Direction::Requests,
            Fault::Blackhole => false,
            Fault::Cut => return,
        };
        if passes && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
