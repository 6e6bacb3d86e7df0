//! The asking end of a reload: finds the daemon's socket, asks, and waits for the answer.
//!
//! Owns: finding the running daemons (their sockets, listed by the kernel in `/proc/net/unix`),
//! making sure the socket is the daemon's (its peer pid), and reading the answer.
//! Must not: load the schedule: the daemon reads its own file, so what it refuses is what it
//! would have run.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::answer::{RELOAD_FORMAT, ReloadAnswer};
use super::listener::{ASK, SOCKET_PREFIX, address};

/// Why no answer came.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("no zkcron daemon is running on this host (none listens for reload requests)")]
    NoDaemon,
    #[error(
        "{} zkcron daemons run on this host (pids {}): name one with --pid",
        .0.len(),
        .0.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )]
    Several(Vec<u32>),
    #[error(
        "process {pid} does not answer reload requests: it is not zkcron, or a zkcron older than \
         this one (restart it, or send it SIGHUP and read its log)"
    )]
    NotListening { pid: u32 },
    #[error("the socket of process {pid} is held by process {holder}: not asking it")]
    NotTheDaemon { pid: u32, holder: String },
    #[error("no answer from process {pid} within {}", humantime::format_duration(*.waited))]
    NoAnswer { pid: u32, waited: Duration },
    #[error("process {pid} closed the connection without an answer (stopping?)")]
    Closed { pid: u32 },
    #[error("process {pid} answered in a form this zkcron cannot read: {why}")]
    Unreadable { pid: u32, why: String },
    #[error("cannot ask process {pid}")]
    Io {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot list this host's daemons in /proc/net/unix")]
    List(#[source] std::io::Error),
}

/// Asks the daemon `pid` (or the one daemon of this host) to reload, waiting `wait` at most.
///
/// # Errors
/// No daemon, several, one that does not answer or answers what cannot be read.
pub async fn ask(pid: Option<u32>, wait: Duration) -> Result<ReloadAnswer, ReloadError> {
    let pid = match pid {
        Some(pid) => pid,
        None => only_daemon()?,
    };
    let stream = connect(pid)?;
    match stream.peer_cred() {
        Ok(peer) if peer.pid() == i32::try_from(pid).ok() => {}
        Ok(peer) => {
            return Err(ReloadError::NotTheDaemon {
                pid,
                holder: peer
                    .pid()
                    .map_or("?".to_owned(), |holder| holder.to_string()),
            });
        }
        Err(source) => return Err(ReloadError::Io { pid, source }),
    }
    let exchange = async {
        let (read, mut write) = stream.into_split();
        write
            .write_all(format!("{ASK}\n").as_bytes())
            .await
            .map_err(|source| ReloadError::Io { pid, source })?;
        let mut line = String::new();
        // The answer lists the changes; a schedule of thousands of jobs makes it long, not
        // unbounded.
        BufReader::new(read.take(16 << 20))
            .read_line(&mut line)
            .await
            .map_err(|source| ReloadError::Io { pid, source })?;
        Ok(line)
    };
    let line = tokio::time::timeout(wait, exchange)
        .await
        .map_err(|_| ReloadError::NoAnswer { pid, waited: wait })??;
    if line.is_empty() {
        return Err(ReloadError::Closed { pid });
    }
    let answer: ReloadAnswer =
        serde_json::from_str(&line).map_err(|err| ReloadError::Unreadable {
            pid,
            why: err.to_string(),
        })?;
    if answer.format > RELOAD_FORMAT {
        return Err(ReloadError::Unreadable {
            pid,
            why: format!(
                "format {} (this zkcron reads up to {RELOAD_FORMAT})",
                answer.format
            ),
        });
    }
    Ok(answer)
}

fn connect(pid: u32) -> Result<UnixStream, ReloadError> {
    let io = |source| ReloadError::Io { pid, source };
    let stream = match std::os::unix::net::UnixStream::connect_addr(&address(pid).map_err(io)?) {
        Ok(stream) => stream,
        Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(ReloadError::NotListening { pid });
        }
        Err(err) => return Err(io(err)),
    };
    stream.set_nonblocking(true).map_err(io)?;
    UnixStream::from_std(stream).map_err(io)
}

/// The pid of the one daemon whose socket the kernel lists.
fn only_daemon() -> Result<u32, ReloadError> {
    let table = std::fs::read_to_string("/proc/net/unix").map_err(ReloadError::List)?;
    let mut pids = daemons_listed(&table);
    match pids.len() {
        0 => Err(ReloadError::NoDaemon),
        1 => Ok(pids.remove(0)),
        _ => Err(ReloadError::Several(pids)),
    }
}

/// The pids in the daemons' socket names of a `/proc/net/unix` table (an abstract name shows
/// with a leading `@`), each once, in order.
fn daemons_listed(table: &str) -> Vec<u32> {
    let prefix = format!("@{SOCKET_PREFIX}");
    let mut pids: Vec<u32> = table
        .lines()
        .filter_map(|line| {
            line.split_whitespace()
                .last()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_are_read_from_the_kernels_socket_table() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31337 @zkcron/reload/4242\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 31338 @zkcron/reload/4242\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31339 /run/systemd/notify\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31340 @zkcron/reload/17\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31341 @zkcron/reload/x\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31342\n";
        assert_eq!(daemons_listed(table), [17, 4242]);
    }
}
