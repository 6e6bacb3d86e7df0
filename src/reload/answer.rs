//! A reload request and its answer, as the daemon's reloader and the socket pass them.
//!
//! Owns: the answer's JSON document (`format`, the file, the outcome) that `zkcron reload
//! --json` prints as it came.
//! Must not: do I/O.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::changes::Changes;

/// The version of the answer document; a reader refuses a newer one.
pub const RELOAD_FORMAT: u32 = 1;

/// One request to re-read the schedule: from `zkcron reload` (which waits for the answer) or a
/// SIGHUP (which does not).
#[derive(Debug)]
pub struct ReloadRequest {
    pub answer: Option<oneshot::Sender<ReloadAnswer>>,
}

impl ReloadRequest {
    /// A SIGHUP's: the outcome goes to the log alone.
    pub fn unanswered() -> Self {
        Self { answer: None }
    }
}

/// What came of a reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadAnswer {
    pub format: u32,
    /// The schedule file the daemon read (its drop-ins beside it).
    pub path: PathBuf,
    #[serde(flatten)]
    pub outcome: ReloadOutcome,
}

/// Applied, with what changed, or refused, with why: the running schedule is then the one before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ReloadOutcome {
    Applied {
        /// The new schedule's fingerprint, as `zkcron status` shows it for every member.
        schedule: String,
        loaded_unix_ms: i64,
        changes: Changes,
    },
    Refused {
        /// Every problem, as `zkcron check` tells it.
        error: String,
    },
}
