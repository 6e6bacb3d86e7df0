//! A TCP proxy in front of one ZooKeeper server, that a test can fault: a host partitioned from
//! ZooKeeper without root (issue "Faster recovery and proof under faults", the chaos suite).
//!
//! Owns: one listening port on 127.0.0.1, the connections accepted on it and their upstream
//! connections, and what passes between them, when ([`Fault`]).
//! Must not: know ZooKeeper's protocol; it moves bytes or drops them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What the proxy does to the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Everything passes.
    None,
    /// Requests reach the server, its answers are dropped: the server hears the client (its
    /// session stays alive) while the client hears nothing.
    MuteReplies,
    /// The client's requests are dropped, the server's answers and notifications pass: the
    /// client hears the server while the server does not hear it (its session expires).
    MuteRequests,
    /// Connections are accepted and kept, nothing passes either way.
    Blackhole,
    /// Open connections are closed and new ones closed at once.
    Cut,
    /// Every byte passes, `ms` late, in order, both ways: a slow or distant network.
    Delay { ms: u64 },
    /// One direction is held: its bytes wait, in order, and pass when the fault is lifted (a
    /// stalled link, a full send buffer); the other passes.
    Stall(Direction),
}

impl Fault {
    /// Whether bytes going `direction` are kept (now or later) rather than dropped.
    fn keeps(self, direction: Direction) -> bool {
        match self {
            Fault::None | Fault::Delay { .. } | Fault::Stall(_) => true,
            Fault::MuteReplies => direction == Direction::Requests,
            Fault::MuteRequests => direction == Direction::Replies,
            Fault::Blackhole | Fault::Cut => false,
        }
    }

    /// How late the bytes read now go out.
    fn delay(self) -> Duration {
        match self {
            Fault::Delay { ms } => Duration::from_millis(ms),
            _ => Duration::ZERO,
        }
    }

    /// Whether bytes going `direction` wait before going out.
    fn holds(self, direction: Direction) -> bool {
        self == Fault::Stall(direction)
    }
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

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server.
    Requests,
    /// From the server to the client.
    Replies,
}

/// Bytes read, and when they may go out.
type Chunk = (Instant, Vec<u8>);

/// Moves `direction`'s bytes from `from` to `to` as the fault allows: read at once (so a
/// delay is a latency, not a throughput limit), written when due.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    to: tokio::net::tcp::OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    direction: Direction,
) {
    let (chunks, due) = mpsc::unbounded_channel::<Chunk>();
    let writing = write_out(to, due, fault.clone(), direction);
    let reading = async {
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
            let now = *fault.borrow();
            if now == Fault::Cut {
                return;
            }
            if now.keeps(direction)
                && chunks
                    .send((Instant::now() + now.delay(), buf[..n].to_vec()))
                    .is_err()
            {
                return;
            }
        }
    };
    tokio::select! {
        () = reading => {}
        () = writing => {}
    }
}

/// Writes each chunk at its instant, holding it while `direction` is stalled.
async fn write_out(
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut due: mpsc::UnboundedReceiver<Chunk>,
    mut fault: watch::Receiver<Fault>,
    direction: Direction,
) {
    while let Some((at, bytes)) = due.recv().await {
        tokio::time::sleep_until(at).await;
        loop {
            let now = *fault.borrow_and_update();
            if now == Fault::Cut {
                return;
            }
            if !now.holds(direction) {
                break;
            }
            if fault.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&bytes).await.is_err() {
            return;
        }
    }
}
