//! How a run ended, as the runner reports it and the fire machine and metrics read it.
//!
//! Owns: `RunOutcome` and `RunReport`, for a process and for an HTTP target alike.
//! Must not: observe processes (that is `runner`).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The job exited by itself with this code.
    Exited {
        /// The exit code, 0–255.
        code: i32,
    },
    /// The job was killed by a signal nobody in zkcron sent (e.g. it crashed).
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// The job ran past its `timeout` and its process group was stopped.
    TimedOut,
    /// The run was cancelled (on_lost = cancel, daemon shutdown) and its process group was stopped.
    Cancelled,
    /// The run was cancelled before its job started: held for its instant (or not yet given its
    /// go) when the lock moved or the node stopped. Nothing of the job ran (issue 53: recorded
    /// `missed`, with why, not `cancelled`, which says a job was stopped).
    CancelledBeforeStart,
    /// The job could not be started; `error` names the program or directory and the OS error.
    FailedToStart {
        /// What went wrong, with its causes.
        error: String,
    },
    /// The job was started but its exit could not be observed; its process group was killed.
    WaitFailed {
        /// The OS error.
        error: String,
    },
    /// An HTTP target answered: a 2xx is success, any other status a failure.
    Responded {
        /// The status code.
        status: u16,
        /// The start of a failure's response body (at most [`RESPONSE_KEPT`] bytes, as text);
        /// empty for a success.
        body: String,
    },
    /// An HTTP target's request could not be made or was not answered: the reason (connection
    /// refused, TLS, reset, a bad answer), with its causes.
    RequestFailed {
        /// What went wrong.
        error: String,
    },
}

/// How much of a failed delivery's response body is kept in its run record (issue 23).
pub const RESPONSE_KEPT: usize = 1024;

/// How much of a process's output (stdout and stderr, interleaved by line) is kept in its run
/// record: the last bytes. Every kept byte sits in every ZooKeeper server's heap, `history` times
/// per job at most.
pub const OUTPUT_KEPT: usize = 4096;

/// The end of a run's output as it is read: whole lines, in the order they came, of which the
/// last [`OUTPUT_KEPT`] bytes are kept.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OutputTail {
    text: String,
}

impl OutputTail {
    /// Appends one line (without its newline).
    pub fn push_line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
        // Trimmed in batches: a job printing short lines by the million costs one copy per
        // OUTPUT_KEPT bytes, not one per line.
        if self.text.len() > 2 * OUTPUT_KEPT {
            let cut = tail_start(&self.text, OUTPUT_KEPT);
            self.text.drain(..cut);
        }
    }

    /// The last [`OUTPUT_KEPT`] bytes (cut at a character boundary); empty if nothing was printed.
    pub fn into_text(mut self) -> String {
        let cut = tail_start(&self.text, OUTPUT_KEPT);
        self.text.drain(..cut);
        self.text
    }
}

/// Where the last `max` bytes of `text` begin, moved forward to a character boundary.
fn tail_start(text: &str, max: usize) -> usize {
    let mut cut = text.len().saturating_sub(max);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    cut
}

impl RunOutcome {
    /// Whether the job did its work: it exited by itself with code 0.
    pub fn succeeded(&self) -> bool {
        match self {
            RunOutcome::Exited { code } => *code == 0,
            RunOutcome::Responded { status, .. } => (200..300).contains(status),
            _ => false,
        }
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunOutcome::Exited { code } => write!(f, "exited with code {code}"),
            RunOutcome::Signaled { signal } => write!(f, "killed by signal {signal}"),
            RunOutcome::TimedOut => f.write_str("timed out"),
            RunOutcome::Cancelled => f.write_str("cancelled"),
            RunOutcome::CancelledBeforeStart => f.write_str("cancelled before it started"),
            RunOutcome::FailedToStart { error } => write!(f, "failed to start: {error}"),
            RunOutcome::WaitFailed { error } => write!(f, "exit not observable: {error}"),
            RunOutcome::Responded { status, .. } => write!(f, "answered HTTP {status}"),
            RunOutcome::RequestFailed { error } => write!(f, "request failed: {error}"),
        }
    }
}

/// The result of `runner::run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Wall-clock time the run started (for the run record).
    pub started_at: DateTime<Utc>,
    /// From spawning until the job's leader exited, or, for a stopped run, until its group was gone
    /// or SIGKILLed. Output still drained afterwards is not counted. For an HTTP target: from
    /// sending the request to the end of its answer.
    pub duration: Duration,
    /// An HTTP target answered 429 or 503 with `Retry-After`: how long it asked us to wait. A
    /// retry is then due after this (within the job's backoff bounds) instead of the backoff.
    pub retry_after: Option<Duration>,
    /// A process's last output ([`OutputTail`]); empty for an HTTP target, whose failure answer
    /// is in [`RunOutcome::Responded`].
    pub output: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_tail_keeps_the_last_bytes_at_a_character_boundary() {
        let mut tail = OutputTail::default();
        tail.push_line("first");
        for i in 0..10_000 {
            tail.push_line(&format!("line {i} é"));
        }
        let text = tail.into_text();
        assert!(text.len() <= OUTPUT_KEPT, "{} bytes kept", text.len());
        assert!(
            text.len() > OUTPUT_KEPT - 4,
            "only a partial character is dropped"
        );
        assert!(text.ends_with("line 9999 é\n"), "the newest line is last");
        assert!(!text.contains("first"), "the oldest output is gone");
    }

    #[test]
    fn short_output_is_kept_whole_and_no_output_is_empty() {
        let mut tail = OutputTail::default();
        tail.push_line("out");
        tail.push_line("");
        tail.push_line("err");
        assert_eq!(tail.into_text(), "out\n\nerr\n");
        assert_eq!(OutputTail::default().into_text(), "");
    }
}
