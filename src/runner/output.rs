//! Job output into tracing: one event per line, tagged with job and run id, bounded per line;
//! into the run's [`OutputTail`], the part its record keeps; and into the store of whole
//! outputs on this host (`crate::output_store`), when it keeps them.
//!
//! Owns: splitting a job's stdout/stderr into lines, logging them and handing them on.
//! Must not: wait for the job or decide how long to read (the runner bounds the drain).

use std::io;
use std::sync::Mutex;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};
use tracing::{info, warn};

use crate::ids::JobName;
use crate::output_store::{RunOutput, Stream};
use crate::run::OutputTail;

/// Longest output line logged as one event; the rest of the line is dropped (and marked).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Where a run's output lines go besides the log: shared by its stdout and stderr, so their
/// lines keep the order they came in.
#[derive(Debug)]
pub(super) struct Lines {
    /// What the run's record keeps.
    pub(super) tail: OutputTail,
    /// What this host keeps of it all.
    pub(super) whole: RunOutput,
}

/// Logs one output stream line by line until EOF or a read error, each line also handed to
/// `lines`.
pub(super) async fn log_output<R: AsyncRead + Unpin>(
    stream: Option<R>,
    which: Stream,
    job: &JobName,
    run_id: &str,
    lines: &Mutex<Lines>,
) {
    let Some(stream) = stream else { return };
    let name = which.name();
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        match read_line_bounded(&mut reader, &mut line).await {
            Ok(None) => return,
            Ok(Some(truncated)) => {
                let text = String::from_utf8_lossy(&line);
                if let Ok(mut lines) = lines.lock() {
                    lines.tail.push_line(&text);
                    lines.whole.line(which, &text);
                    if truncated {
                        let note = format!("the line above was cut at {MAX_LINE_BYTES} bytes");
                        lines.whole.note(&note);
                    }
                    // All the job has printed so far is read: out to the file for a follower.
                    if reader.buffer().is_empty() {
                        lines.whole.flush();
                    }
                }
                if truncated {
                    info!(job = %job, run_id, stream = name, line = %text, truncated, "job output");
                } else {
                    info!(job = %job, run_id, stream = name, line = %text, "job output");
                }
            }
            Err(err) => {
                warn!(job = %job, run_id, stream = name, error = %err, "cannot read job output");
                return;
            }
        }
    }
}

/// Reads one line into `line` (without `\n` or `\r\n`), keeping at most [`MAX_LINE_BYTES`] and
/// skipping the rest of a longer line. `Some(truncated)` for a line, `None` at EOF.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> io::Result<Option<bool>> {
    line.clear();
    let mut truncated = false;
    let mut read_any = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // EOF; a last line without `\n` still counts.
            return Ok(read_any.then_some(truncated));
        }
        read_any = true;
        let newline = available.iter().position(|&b| b == b'\n');
        let (content, used) = match newline {
            Some(at) => (&available[..at], at + 1),
            None => (available, available.len()),
        };
        let room = MAX_LINE_BYTES - line.len();
        if content.len() > room {
            truncated = true;
        }
        line.extend_from_slice(&content[..content.len().min(room)]);
        reader.consume(used);
        if newline.is_some() {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(truncated));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8]) -> Vec<(String, bool)> {
        let mut reader = BufReader::with_capacity(16, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        while let Some(truncated) = read_line_bounded(&mut reader, &mut line).await.unwrap() {
            out.push((String::from_utf8_lossy(&line).into_owned(), truncated));
        }
        out
    }

    #[tokio::test]
    async fn lines_are_split_bounded_and_resynchronised() {
        let mut input = b"one\r\ntwo\n\n".to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_LINE_BYTES + 10));
        input.extend(b"\nlast");
        let got = lines(&input).await;
        assert_eq!(got.len(), 5, "one, two, empty, long, last: {got:?}");
        assert_eq!(got[0], ("one".into(), false), "\\r\\n is stripped");
        assert_eq!(got[1], ("two".into(), false));
        assert_eq!(got[2], (String::new(), false), "an empty line is a line");
        assert_eq!(got[3].0.len(), MAX_LINE_BYTES, "long line cut at the bound");
        assert!(got[3].1, "long line marked truncated");
        assert_eq!(
            got[4],
            ("last".into(), false),
            "unterminated last line kept"
        );
    }

    #[tokio::test]
    async fn exactly_max_bytes_is_not_truncated() {
        let mut input = vec![b'b'; MAX_LINE_BYTES];
        input.push(b'\n');
        let got = lines(&input).await;
        assert_eq!(got.len(), 1);
        assert!(!got[0].1, "a line of exactly the bound loses nothing");
    }
}
