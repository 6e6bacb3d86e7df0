//! Reading a run's kept output as a stream of whole lines, and following it while the run
//! still writes it.
//!
//! Owns: when a reader has seen all there is, and what it says when the writer stopped unseen.
//! Must not: write a run's file.

use std::io;
use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::names::{OURS, is_end, stamped};

/// How often a follower looks for more lines of a run still going: a local file read, so a
/// person watching sees a line within this.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// How a read of a run's output ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowEnd {
    /// All of it, to its end line.
    Ended,
    /// All there is, but the run has not ended (read without following), or the daemon that
    /// wrote it stopped before its end (a line of ours says so).
    Unended,
    /// The node is stopping.
    Stopped,
}

/// Writes `path`'s lines to `out`, whole lines only; with `live` (whether a run still writes
/// the file), follows it: waits for more while it is live, until its end line. Stops when
/// `stop` is cancelled.
pub(super) async fn follow<W: AsyncWrite + Unpin>(
    path: &Path,
    live: Option<impl Fn() -> bool>,
    out: &mut W,
    stop: &CancellationToken,
) -> io::Result<FollowEnd> {
    let follow = live.is_some();
    let mut file = tokio::fs::File::open(path).await?;
    let mut chunk = vec![0_u8; 64 * 1024];
    let mut partial = Vec::new();
    let mut ended = false;
    // Set once the writer was seen done: one more read takes what it wrote last.
    let mut last_look = false;
    loop {
        let read = file.read(&mut chunk).await?;
        if read > 0 {
            partial.extend_from_slice(&chunk[..read]);
            if let Some(end) = partial.iter().rposition(|&b| b == b'\n') {
                let whole: Vec<u8> = partial.drain(..=end).collect();
                let last = whole[..whole.len() - 1]
                    .rsplit(|&b| b == b'\n')
                    .next()
                    .unwrap_or_default();
                ended = is_end(&String::from_utf8_lossy(last));
                out.write_all(&whole).await?;
            }
            continue;
        }
        if ended {
            out.flush().await?;
            return Ok(FollowEnd::Ended);
        }
        if !follow || last_look {
            out.write_all(&partial).await?;
            if follow {
                let note =
                    "the output ends here: the daemon that wrote it stopped before the run ended";
                out.write_all(stamped(Utc::now(), OURS, note).as_bytes())
                    .await?;
            }
            out.flush().await?;
            return Ok(FollowEnd::Unended);
        }
        out.flush().await?;
        if !live.as_ref().is_some_and(|live| live()) {
            last_look = true;
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(FollowEnd::Stopped),
            () = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
    }
}
