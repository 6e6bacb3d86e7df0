//! How a run ended, as the runner reports it and the fire machine and metrics read it.
//!
//! Owns: `RunOutcome` and `RunReport`.
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
}

impl RunOutcome {
    /// Whether the job did its work: it exited by itself with code 0.
    pub fn succeeded(&self) -> bool {
        matches!(self, RunOutcome::Exited { code: 0 })
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunOutcome::Exited { code } => write!(f, "exited with code {code}"),
            RunOutcome::Signaled { signal } => write!(f, "killed by signal {signal}"),
            RunOutcome::TimedOut => f.write_str("timed out"),
            RunOutcome::Cancelled => f.write_str("cancelled"),
            RunOutcome::FailedToStart { error } => write!(f, "failed to start: {error}"),
            RunOutcome::WaitFailed { error } => write!(f, "exit not observable: {error}"),
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
    /// or SIGKILLed. Output still drained afterwards is not counted.
    pub duration: Duration,
}
