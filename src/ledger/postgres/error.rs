//! Why the PostgreSQL store did not do what was asked: one typed reason per failure, with what
//! a person needs to act on it.
//!
//! Owns: `StoreError`.
//! Must not: decide what a caller does about it.

use crate::delayed::submission::{FormatError, SubmissionId};
use crate::ids::FencingToken;

/// Why the store did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the PostgreSQL connection string is not valid")]
    Dsn(#[source] tokio_postgres::Error),
    /// A run that is no submission's reached the store (the ledger routes only submissions'
    /// runs here): nothing was written.
    #[error("a run of job {job} without a submission id reached the delayed store")]
    NotASubmission { job: String },
    #[error("[delayed] tls: {0}")]
    Tls(String),
    #[error("cannot reach PostgreSQL")]
    Unreachable(#[source] tokio_postgres::Error),
    #[error("PostgreSQL refused {what}")]
    Query {
        what: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("PostgreSQL did not answer {what} within {after:?}; the connection was given up")]
    TimedOut {
        what: &'static str,
        after: std::time::Duration,
    },
    #[error("migrating the delayed queue's schema failed")]
    Migration(#[source] refinery::Error),
    #[error(
        "the database's delayed queue schema is at version {found}, newer than this zkcron knows \
         ({known}): a newer zkcron migrated it; run that version"
    )]
    NewerSchema { found: i64, known: i64 },
    #[error(
        "fenced: lock group {lock_group} has fencing token {current} in the store, and this node \
         holds {ours}; a newer owner took the lock"
    )]
    Fenced {
        lock_group: String,
        ours: FencingToken,
        current: i64,
    },
    #[error("unreadable submission {id} in table {table}")]
    Corrupt {
        table: &'static str,
        id: String,
        #[source]
        source: FormatError,
    },
    #[error(
        "submission {id} already exists with a different job, due time or payload; it was left as it is"
    )]
    Conflict { id: SubmissionId },
    /// A batch statement failed: nothing of it was written.
    #[error("the batch was not written: {0}")]
    Batch(String),
    #[error("the PostgreSQL listening connection ended before its LISTEN was answered")]
    ListenEnded,
    /// A claim queued for the store got no answer: its session's queue ended first (the session
    /// was given up). It may have been applied; a next owner resolves the run if it was.
    #[error("the claim's queue ended before the claim was answered")]
    Unanswered,
    #[error("submission {id} is not in the store")]
    NotFound { id: SubmissionId },
    #[error("PostgreSQL answered {what} with {found:?}, which is not what it should be")]
    Unreadable { what: &'static str, found: String },
}

impl StoreError {
    pub(super) fn query(what: &'static str) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
        move |source| StoreError::Query { what, source }
    }
}
