//! The submissions' use cases on the PostgreSQL store: what `ledger::submissions` does when the
//! ledger keeps the delayed queue there, answered in the same terms as from ZooKeeper.
//!
//! Owns: turning the store's answers into the use cases' (`Submitted`, `SubmissionState`,
//! `SubmissionError`).
//! Must not: check a submission against the schedule (the caller does) or reach ZooKeeper.

use super::error::StoreError;
use super::handle::PgStore;
use super::listen::Submit;
use super::queue::Where;
use crate::delayed::submission::{Submission, SubmissionId, Submitted};
use crate::ledger::submission_state::{SubmissionError, SubmissionState};

/// [`PgStore::submit`], answered as `ledger::submissions::submit` answers.
///
/// # Errors
/// `Conflict` when `id` holds a different request; `Store` when the store failed.
pub(in crate::ledger) async fn submit(
    store: &PgStore,
    id: &SubmissionId,
    submission: &Submission,
) -> Result<Submitted, SubmissionError> {
    store.submit(id, submission).await.map_err(answered)
}

/// [`PgStore::submit_batch`], answered as `ledger::submissions::submit_batch` answers.
pub(in crate::ledger) async fn submit_batch(
    store: &PgStore,
    batch: &[(SubmissionId, Submission)],
) -> Vec<Result<Submitted, SubmissionError>> {
    store
        .submit_batch(batch)
        .await
        .into_iter()
        .map(|result| result.map_err(answered))
        .collect()
}

/// [`PgStore::cancel`], answered as `ledger::submissions::cancel` answers.
///
/// # Errors
/// `NotFound`; `NotPending` with where it is once it was claimed (or cancelled before);
/// `Store` when the store failed.
pub(in crate::ledger) async fn cancel(
    store: &PgStore,
    id: &SubmissionId,
    now_unix_ms: i64,
) -> Result<Submission, SubmissionError> {
    match store.cancel(id, now_unix_ms).await.map_err(answered)? {
        Ok(submission) => Ok(submission),
        Err(elsewhere) => Err(SubmissionError::NotPending {
            id: id.clone(),
            status: status_of(&elsewhere),
        }),
    }
}

/// [`PgStore::find`], answered as `ledger::submissions::show` answers: the submission (without
/// its payload once only its tombstone is left) and where it is.
///
/// # Errors
/// `Store` when the store failed or the submission cannot be read.
pub(in crate::ledger) async fn show(
    store: &PgStore,
    id: &SubmissionId,
) -> Result<Option<(Submission, SubmissionState)>, SubmissionError> {
    Ok(match store.find(id).await.map_err(answered)? {
        None => None,
        Some(Where::Pending(submission)) => Some((submission, SubmissionState::Pending)),
        Some(Where::Open { submission, record } | Where::Ended { submission, record }) => {
            Some((submission, SubmissionState::Recorded(record)))
        }
        Some(Where::Remembered(tombstone)) => {
            let submission = tombstone.request_without_payload();
            Some((submission, SubmissionState::Remembered(tombstone)))
        }
    })
}

/// Pending submission `id`, as `ledger::submissions::read` answers: `None` once it was claimed,
/// cancelled or never made.
///
/// # Errors
/// `Store` when the store failed or the submission cannot be read.
pub(in crate::ledger) async fn read_pending(
    store: &PgStore,
    id: &SubmissionId,
) -> Result<Option<Submission>, SubmissionError> {
    Ok(match store.find(id).await.map_err(answered)? {
        Some(Where::Pending(submission)) => Some(submission),
        _ => None,
    })
}

/// [`PgStore::pending_between`], its failure as the use cases name it.
///
/// # Errors
/// `Store` when the store failed.
pub(in crate::ledger) async fn pending_between(
    store: &PgStore,
    after_unix_ms: i64,
    through_unix_ms: i64,
    limit: i64,
) -> Result<Vec<(SubmissionId, Submission)>, SubmissionError> {
    store
        .pending_between(after_unix_ms, through_unix_ms, limit)
        .await
        .map_err(answered)
}

/// [`PgStore::open_runs`] of `job`: each record with its row's version and its payload.
///
/// # Errors
/// `Store` when the store failed.
pub(in crate::ledger) async fn open_runs_of(
    store: &PgStore,
    job: &crate::ids::JobName,
) -> Result<Vec<(crate::run::RunRecord, i32, Vec<u8>)>, SubmissionError> {
    Ok(store
        .open_runs()
        .await
        .map_err(answered)?
        .into_iter()
        .filter(|run| run.record.job == *job)
        .map(|run| (run.record, run.version, run.submission.payload))
        .collect())
}

/// [`PgStore::listen`], its failure as the use cases name it.
///
/// # Errors
/// `Store` when no listening connection could be made.
pub(in crate::ledger) async fn listen(
    store: &PgStore,
) -> Result<tokio::sync::mpsc::Receiver<Submit>, SubmissionError> {
    store.listen().await.map_err(answered)
}

/// The store's refusals as the use cases name them; its failures as they are.
fn answered(error: StoreError) -> SubmissionError {
    match error {
        StoreError::Conflict { id } => SubmissionError::Conflict { id },
        StoreError::NotFound { id } => SubmissionError::NotFound { id },
        other => SubmissionError::Store(other),
    }
}

/// What a cancel refused says of where the submission is.
fn status_of(elsewhere: &Where) -> String {
    match elsewhere {
        Where::Pending(_) => "pending".to_owned(),
        Where::Open { record, .. } | Where::Ended { record, .. } => {
            record.status.as_str().to_owned()
        }
        Where::Remembered(_) => "finished (its record was pruned)".to_owned(),
    }
}
