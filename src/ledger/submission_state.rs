//! What a submission's use cases answer, whichever store keeps the delayed queue: why a request
//! did not do what was asked, and where a submission is in its life.
//!
//! Owns: `SubmissionError`, `SubmissionState`, `JobsRead` (and `Submitted`, the submission
//! format's).
//! Must not: make a request.

pub use crate::delayed::submission::Submitted;
use crate::delayed::submission::{FormatError, Submission, SubmissionId, Tombstone};
use crate::run::RunRecord;
use crate::zk::Fault;

/// Whose pending submissions a read of the queue returns: a lock group's owner reads its own
/// jobs' (issue 19), as the fire machine's `Wanted` says; a client reads every job's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobsRead {
    /// These jobs' (a named group's).
    Only(Vec<String>),
    /// Every job's but these (the default group's: every job but the named groups').
    AllBut(Vec<String>),
}

impl JobsRead {
    /// Every job's.
    pub fn all() -> Self {
        Self::AllBut(Vec::new())
    }
}

/// Why a submission request did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SubmissionError {
    #[error(
        "submission {id} already exists with a different job, due time or payload; it was left as it is"
    )]
    Conflict { id: SubmissionId },
    #[error("no submission {id}")]
    NotFound { id: SubmissionId },
    #[error("submission {id} can no longer be cancelled: it is {status}")]
    NotPending { id: SubmissionId, status: String },
    #[error("submission {id} can no longer be rescheduled: it is {status}")]
    NotReschedulable { id: SubmissionId, status: String },
    #[error("its run record at {path} was written by a newer zkcron; change it with that version")]
    NewerRecord { path: String },
    #[error("unreadable submission at {path}")]
    Corrupt {
        path: String,
        #[source]
        source: FormatError,
    },
    #[error(transparent)]
    Records(#[from] super::ClaimError),
    #[error(transparent)]
    Store(#[from] super::postgres::StoreError),
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: Fault,
    },
}

/// Where a submission is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmissionState {
    /// Waiting for its due time.
    Pending,
    /// Claimed, run, or cancelled: its record says which.
    Recorded(Box<RunRecord>),
    /// Finished, its record pruned with the job's history; the id is remembered (a resubmit is
    /// a no-op) until the tombstone's time.
    Remembered(Tombstone),
    /// Neither pending nor recorded: its record was pruned without a tombstone (its
    /// `dedup_window` had passed, or an older zkcron pruned it).
    Pruned,
}

/// What a reschedule did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rescheduled {
    /// Moved: the submission as it is now.
    Moved(Submission),
    /// It was due then already (a reschedule sent again): nothing changed.
    AlreadyThere(Submission),
}
