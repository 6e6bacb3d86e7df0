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
use crate::ledger::submission_state::{JobsRead, Rescheduled, SubmissionError, SubmissionState};

/// [`PgStore::submit`], answered as `ledger::submissions::submit` answers.
///
/// # Errors
/// `Conflict` when `id` holds a different request; `Store` when the store failed.
pub(crate) async fn submit(
    store: &PgStore,
    id: &SubmissionId,
    submission: &Submission,
) -> Result<Submitted, SubmissionError> {
    store.submit(id, submission).await.map_err(answered)
}

/// [`PgStore::submit_batch`], answered as `ledger::submissions::submit_batch` answers.
pub(crate) async fn submit_batch(
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
pub(crate) async fn cancel(
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
pub(crate) async fn show(
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
pub(crate) async fn read_pending(
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
pub(crate) async fn pending_between(
    store: &PgStore,
    after_unix_ms: i64,
    through_unix_ms: i64,
    limit: i64,
    jobs: &JobsRead,
) -> Result<Vec<(SubmissionId, Submission)>, SubmissionError> {
    store
        .pending_between(after_unix_ms, through_unix_ms, limit, jobs)
        .await
        .map_err(answered)
}

/// [`PgStore::open_runs`] of `job`: each record with its row's version and its payload, the
/// fence raised to `token` first (once a token: a new owner lists every job).
///
/// # Errors
/// `Store` when the store failed.
pub(crate) async fn open_runs_of(
    store: &PgStore,
    job: &crate::ids::JobName,
    token: Option<crate::ids::FencingToken>,
) -> Result<Vec<(crate::run::RunRecord, i32, Vec<u8>)>, SubmissionError> {
    // A previous owner's writes still on their way (its connection outlives it) are refused
    // from here on: what is read below is all it wrote.
    if let Some(token) = token {
        store.raise_fence_once(token).await.map_err(answered)?;
    }
    Ok(store
        .open_runs(Some(job))
        .await
        .map_err(answered)?
        .into_iter()
        .map(|run| (run.record, run.version, run.submission.payload))
        .collect())
}

/// `job`'s runs in the store, newest first: its open runs, then its ended ones, `limit` in all.
///
/// # Errors
/// The store's.
pub(crate) async fn history_of(
    store: &PgStore,
    job: &crate::ids::JobName,
    limit: usize,
) -> Result<Vec<crate::run::RunRecord>, StoreError> {
    let mut records: Vec<crate::run::RunRecord> = store
        .open_runs(Some(job))
        .await?
        .into_iter()
        .map(|run| run.record)
        .collect();
    records.sort_by_key(|record| std::cmp::Reverse(record.scheduled_unix_ms));
    let ended = i64::try_from(limit.saturating_sub(records.len())).unwrap_or(i64::MAX);
    if ended > 0 {
        records.extend(store.history(job, ended).await?);
    }
    records.truncate(limit);
    Ok(records)
}

/// Ids freed in one forget statement at most, and statements per sweep.
const FORGET_BATCH: i64 = 10_000;
const FORGET_ROUNDS: usize = 10;

/// The owner's sweep of the store: the remembered ids whose time has come freed (a batch at a
/// time, a few batches a sweep), then the empty day partitions of past days dropped, with
/// their dead tuples. How many ids it freed.
///
/// # Errors
/// `Store` when the store failed; the next sweep goes on.
pub(crate) async fn sweep(store: &PgStore, now_unix_ms: i64) -> Result<usize, SubmissionError> {
    let mut freed = 0;
    for _ in 0..FORGET_ROUNDS {
        let round = store
            .forget(now_unix_ms, FORGET_BATCH)
            .await
            .map_err(answered)?;
        freed += usize::try_from(round).unwrap_or(usize::MAX);
        if i64::try_from(round).unwrap_or(i64::MAX) < FORGET_BATCH {
            break;
        }
    }
    for dropped in store.drop_empty_days(now_unix_ms).await.map_err(answered)? {
        tracing::info!(
            partition = dropped,
            "an empty past day of the delayed store dropped"
        );
    }
    Ok(freed)
}

/// How many submissions are pending, counted up to `cap`, and whether that is all of them.
///
/// # Errors
/// `Store` when the store failed.
pub(crate) async fn count_pending(
    store: &PgStore,
    cap: usize,
) -> Result<(usize, bool), SubmissionError> {
    let cap = i64::try_from(cap).unwrap_or(i64::MAX);
    let (count, complete) = store.count_pending(cap).await.map_err(answered)?;
    Ok((usize::try_from(count).unwrap_or(usize::MAX), complete))
}

/// [`PgStore::listen`], its failure as the use cases name it.
///
/// # Errors
/// `Store` when no listening connection could be made.
pub(crate) async fn listen(
    store: &PgStore,
) -> Result<tokio::sync::mpsc::Receiver<Submit>, SubmissionError> {
    store.listen().await.map_err(answered)
}

/// Moves pending submission `id` to `due_unix_ms`, as `ledger::submissions::reschedule`
/// answers: the same move again changes nothing.
///
/// # Errors
/// `NotFound`; `NotReschedulable` with where it is once it was claimed or cancelled; `Store`.
pub(crate) async fn reschedule(
    store: &PgStore,
    id: &SubmissionId,
    due_unix_ms: i64,
) -> Result<Rescheduled, SubmissionError> {
    // A claim or a cancel between the read and the move: read again, and say where it went.
    for _ in 0..3 {
        let submission = match store.find(id).await.map_err(answered)? {
            None => return Err(SubmissionError::NotFound { id: id.clone() }),
            Some(Where::Pending(submission)) => submission,
            Some(elsewhere) => {
                return Err(SubmissionError::NotReschedulable {
                    id: id.clone(),
                    status: status_of(&elsewhere),
                });
            }
        };
        let moved = Submission {
            due_unix_ms,
            ..submission.clone()
        };
        if submission.due_unix_ms == due_unix_ms {
            return Ok(Rescheduled::AlreadyThere(moved));
        }
        let from = submission.due_unix_ms;
        if store.reschedule(id, from, &moved).await.map_err(answered)? {
            return Ok(Rescheduled::Moved(moved));
        }
    }
    Err(SubmissionError::NotReschedulable {
        id: id.clone(),
        status: "moved by others as this moved it".to_owned(),
    })
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
