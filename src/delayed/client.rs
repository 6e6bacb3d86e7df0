//! The library API for programs that submit delayed work: connect with a schedule file, submit,
//! show and list (`examples/submit.rs`); and the cancels, moves and retries that operators ask
//! through `command`'s door, which records them in the audit trail.
//!
//! Owns: checking a request against the schedule (declared job, payload size, due time within
//! the job's `starting_deadline`) before anything is written, and one ZooKeeper session.
//! Must not: make raw ZooKeeper calls (that is `ledger::submissions`) or fire anything.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::submission::{DueBucket, MAX_PAYLOAD, Submission, SubmissionId};
use crate::config::{Config, JobConfig};
use crate::ids::JobName;
use crate::layout::{DelayedPaths, LedgerPaths};
use crate::ledger::Ledger;
use crate::ledger::submissions;
pub use crate::ledger::submissions::{Rescheduled, SubmissionError, SubmissionState, Submitted};
use crate::run::{RunRecord, RunStatus};

/// How far ahead a submission may be due. It bounds the number of day nodes under `due/`, so
/// that listing them fits one `getChildren` reply (DESIGN.md "ZooKeeper layout").
pub const MAX_AHEAD: Duration = Duration::from_secs(10 * 366 * 86_400);

/// What a program asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitRequest {
    /// A job declared in the schedule file.
    pub job: JobName,
    pub due: DateTime<Utc>,
    /// `Some` makes the submit idempotent: the same request under the same id again is a no-op.
    pub id: Option<SubmissionId>,
    /// Given to the run on stdin; at most [`MAX_PAYLOAD`] bytes.
    pub payload: Vec<u8>,
    /// The submitter's trace context, a W3C `traceparent`: the run's span links to it.
    pub traceparent: Option<String>,
}

/// A submit's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub id: SubmissionId,
    pub outcome: Submitted,
}

/// A pending submission, as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub id: SubmissionId,
    pub submission: Submission,
}

/// Why a request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum DelayedError {
    #[error("job \"{job}\" is not declared in the schedule file; declared: {declared}")]
    UnknownJob { job: JobName, declared: String },
    #[error(
        "job \"{job}\" is a broadcast job: every node runs its ticks, and it cannot be submitted or triggered"
    )]
    Broadcast { job: JobName },
    #[error("the payload has {len} bytes; at most {MAX_PAYLOAD} (64 KiB) are allowed")]
    PayloadTooLarge { len: usize },
    #[error(
        "due {due} is {late:?} in the past, beyond job \"{job}\"'s starting_deadline ({deadline:?}): it would never fire"
    )]
    TooLate {
        job: JobName,
        due: DateTime<Utc>,
        late: Duration,
        deadline: Duration,
    },
    #[error("due {due} is more than ten years ahead")]
    TooFarAhead { due: DateTime<Utc> },
    #[error(
        "traceparent {given:?} is not a W3C trace context: expected 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, ids not all zeros"
    )]
    BadTraceparent { given: String },
    #[error(
        "submission {id} did not fail: it is {status}; only a failed, timed-out or missed one is retried"
    )]
    NotFailed { id: SubmissionId, status: String },
    #[error(transparent)]
    Unreachable(#[from] crate::ledger::Unreachable),
    #[error(transparent)]
    Submission(#[from] SubmissionError),
    #[error(
        "the schedule keeps the delayed queue in ZooKeeper: set [delayed] store = \"postgres\" (docs/CONFIG.md) on every node first"
    )]
    NotInStore,
    #[error(
        "the lock's owner{owner} keeps the delayed queue in ZooKeeper and could claim what moves: switch every node to [delayed] store = \"postgres\" and wait for one of them to own the lock (zkcron status)"
    )]
    OwnerReadsZooKeeper { owner: String },
}

impl DelayedError {
    /// A refusal of the request itself (retrying it cannot help), as opposed to a failure.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            DelayedError::UnknownJob { .. }
                | DelayedError::Broadcast { .. }
                | DelayedError::PayloadTooLarge { .. }
                | DelayedError::TooLate { .. }
                | DelayedError::TooFarAhead { .. }
                | DelayedError::BadTraceparent { .. }
                | DelayedError::NotFailed { .. }
                | DelayedError::NotInStore
                | DelayedError::OwnerReadsZooKeeper { .. }
                | DelayedError::Submission(
                    SubmissionError::Conflict { .. }
                        | SubmissionError::NotFound { .. }
                        | SubmissionError::NotPending { .. }
                        | SubmissionError::NotReschedulable { .. }
                        | SubmissionError::NewerRecord { .. }
                )
        )
    }
}

/// Checks `request` against the job it names, as of `now`, and builds the submission.
///
/// # Errors
/// `UnknownJob`, `Broadcast`, `PayloadTooLarge`, `TooLate` (due before now by more than the job's
/// `starting_deadline`), `TooFarAhead`.
pub fn check_request(
    jobs: &HashMap<JobName, Arc<JobConfig>>,
    request: &SubmitRequest,
    now: DateTime<Utc>,
) -> Result<Submission, DelayedError> {
    let Some(job) = jobs.get(&request.job) else {
        let mut declared: Vec<&str> = jobs.keys().map(JobName::as_str).collect();
        declared.sort_unstable();
        return Err(DelayedError::UnknownJob {
            job: request.job.clone(),
            declared: declared.join(", "),
        });
    };
    if job.broadcast.is_some() {
        return Err(DelayedError::Broadcast {
            job: request.job.clone(),
        });
    }
    if request.payload.len() > MAX_PAYLOAD {
        return Err(DelayedError::PayloadTooLarge {
            len: request.payload.len(),
        });
    }
    let late = (now - request.due).to_std().unwrap_or_default();
    if late > job.starting_deadline {
        return Err(DelayedError::TooLate {
            job: request.job.clone(),
            due: request.due,
            late,
            deadline: job.starting_deadline,
        });
    }
    if (request.due - now).to_std().unwrap_or_default() > MAX_AHEAD {
        return Err(DelayedError::TooFarAhead { due: request.due });
    }
    let traceparent =
        match request.traceparent.as_deref() {
            None => None,
            Some(given) => Some(crate::run::traceparent(given).ok_or_else(|| {
                DelayedError::BadTraceparent {
                    given: given.to_owned(),
                }
            })?),
        };
    Ok(Submission {
        job: request.job.clone(),
        due_unix_ms: request.due.timestamp_millis(),
        submitted_unix_ms: now.timestamp_millis(),
        payload: request.payload.clone(),
        requested_by: None,
        anonymous: request.id.is_none(),
        marker_names_job: false,
        retry_of: None,
        traceparent,
        after: None,
    })
}

/// A submission's final record that says it failed for good: `delayed list --failed` lists it,
/// `delayed retry` submits it again.
pub fn is_dead_letter(record: &RunRecord) -> bool {
    record.submission_id.is_some()
        && matches!(
            record.status,
            RunStatus::Failed | RunStatus::TimedOut | RunStatus::Missed
        )
        && record.retry_at_unix_ms.is_none()
}

/// A session for submitting to one lock group.
#[derive(Debug)]
pub struct Delayed {
    client: Ledger,
    delayed: DelayedPaths,
    ledger: LedgerPaths,
    /// The lock group's paths: who owns it.
    lock: crate::layout::LockPaths,
    jobs: HashMap<JobName, Arc<JobConfig>>,
    known: submissions::KnownParents,
    /// A second session, made at the first `submit_many`, for the reads that find which
    /// parents a batch must make: on `client` they would wait behind its writes. `None` when it
    /// could not be made; `client` reads then.
    reader: tokio::sync::OnceCell<Option<Ledger>>,
    settings: crate::ensemble::ZkSettings,
    connect_timeout: std::time::Duration,
    /// Lock groups are declared: markers name their job (`Submission::marker_names_job`).
    name_markers: bool,
}

/// A session for a one-shot client of `config`'s ensemble (the CLI, `Delayed`, `Steer`),
/// within its `connect_timeout`.
///
/// # Errors
/// `Unreachable` with the address when no session is made in time.
pub async fn session_for(config: &Config) -> Result<Ledger, crate::ledger::Unreachable> {
    Ledger::connect_once_with(
        &config.zookeeper.settings(),
        config.zookeeper.connect_timeout,
        &config.delayed,
        &config.lock.paths().dir,
    )
    .await
}

impl Delayed {
    /// Connects to the ZooKeeper and lock group of `config`, within its `connect_timeout`.
    ///
    /// # Errors
    /// `Unreachable` with the address when no session is made in time.
    pub async fn connect(config: &Config) -> Result<Self, DelayedError> {
        Ok(Self::with_client(session_for(config).await?, config))
    }

    /// Submits over an existing session (the daemon's own, for its HTTP API).
    pub fn with_client(client: Ledger, config: &Config) -> Self {
        let settings = config.zookeeper.settings();
        let ledger = config.lock.group_paths().ledger;
        Self {
            client,
            delayed: ledger.delayed.clone(),
            ledger,
            lock: config.lock.paths(),
            jobs: config
                .jobs
                .iter()
                .map(|job| (job.spec.name.clone(), Arc::clone(job)))
                .collect(),
            known: submissions::KnownParents::default(),
            reader: tokio::sync::OnceCell::new(),
            settings,
            connect_timeout: config.zookeeper.connect_timeout,
            name_markers: config.grouped(),
        }
    }

    /// `request` checked against the schedule, as this schedule's submissions are written.
    fn checked(
        &self,
        request: &SubmitRequest,
        now: chrono::DateTime<Utc>,
    ) -> Result<Submission, DelayedError> {
        Ok(Submission {
            marker_names_job: self.name_markers,
            ..check_request(&self.jobs, request, now)?
        })
    }

    /// The session for [`submissions::submit_batch`]'s reads.
    async fn reader(&self) -> &Ledger {
        let reader = self
            .reader
            .get_or_init(|| async {
                match Ledger::connect_once(&self.settings, self.connect_timeout).await {
                    Ok(reader) => Some(reader),
                    Err(err) => {
                        tracing::debug!(error = %err, "no second session; batches read on the first");
                        None
                    }
                }
            })
            .await;
        reader.as_ref().unwrap_or(&self.client)
    }

    /// Submits a declared job for later; see [`check_request`] for what is refused.
    ///
    /// # Errors
    /// A refusal (nothing written), or a failed request (nothing half-written).
    pub async fn submit(&self, request: SubmitRequest) -> Result<Receipt, DelayedError> {
        let submission = self.checked(&request, Utc::now())?;
        let id = request.id.unwrap_or_else(SubmissionId::generate);
        let outcome = submissions::submit(&self.client, &self.delayed, &id, &submission).await?;
        Ok(Receipt { id, outcome })
    }

    /// Submits many at once: each is checked like [`Delayed::submit`], and the accepted ones
    /// are written a few hundred per multi-op (one ZooKeeper transaction each), which is how one
    /// client submits thousands a second. Results are in the requests' order.
    pub async fn submit_many(
        &self,
        requests: Vec<SubmitRequest>,
    ) -> Vec<Result<Receipt, DelayedError>> {
        let now = Utc::now();
        let mut results: Vec<Option<Result<Receipt, DelayedError>>> = Vec::new();
        let mut batch = Vec::new();
        let mut slots = Vec::new();
        for request in requests {
            match self.checked(&request, now) {
                Ok(submission) => {
                    let id = request.id.unwrap_or_else(SubmissionId::generate);
                    slots.push(results.len());
                    results.push(None);
                    batch.push((id, submission));
                }
                Err(refused) => results.push(Some(Err(refused))),
            }
        }
        let reader = self.reader().await;
        let written =
            submissions::submit_batch(&self.client, reader, &self.delayed, &batch, &self.known)
                .await;
        for ((slot, (id, _)), outcome) in slots.into_iter().zip(batch).zip(written) {
            results[slot] = Some(
                outcome
                    .map(|outcome| Receipt { id, outcome })
                    .map_err(DelayedError::from),
            );
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(DelayedError::Submission(SubmissionError::unanswered(
                        &self.delayed.dir,
                    )))
                })
            })
            .collect()
    }

    /// Cancels a pending submission; refused once it has started.
    ///
    /// # Errors
    /// `NotFound`, `NotPending` (with its status), or a failed request.
    pub(crate) async fn cancel(&self, id: &SubmissionId) -> Result<Submission, DelayedError> {
        let now = Utc::now().timestamp_millis();
        Ok(submissions::cancel(&self.client, &self.delayed, &self.ledger, id, now).await?)
    }

    /// Moves a pending submission to `due` (checked like a submit's); refused once it was
    /// claimed or cancelled. The same move again changes nothing.
    ///
    /// # Errors
    /// `NotFound`, `NotReschedulable` (with its status), `TooLate`, `TooFarAhead`, or a failed
    /// request.
    pub(crate) async fn reschedule(
        &self,
        id: &SubmissionId,
        due: DateTime<Utc>,
    ) -> Result<Rescheduled, DelayedError> {
        let Some((submission, _)) = submissions::read(&self.client, &self.delayed, id).await?
        else {
            return Err(SubmissionError::NotFound { id: id.clone() }.into());
        };
        check_request(
            &self.jobs,
            &SubmitRequest {
                traceparent: None,
                job: submission.job,
                due,
                id: Some(id.clone()),
                payload: Vec::new(),
            },
            Utc::now(),
        )?;
        Ok(submissions::reschedule(
            &self.client,
            &self.delayed,
            &self.ledger,
            id,
            due.timestamp_millis(),
        )
        .await?)
    }

    /// Submits failed submission `id` again, due at `due`, under `new_id` (generated if
    /// `None`), with its payload; the new one names the old in `retry_of`.
    ///
    /// # Errors
    /// `NotFound`; `NotFailed` unless its final record is `failed`, `timed_out` or `missed`
    /// (and its payload still kept); a refusal as [`Delayed::submit`]'s; a failed request.
    pub(crate) async fn retry(
        &self,
        id: &SubmissionId,
        due: DateTime<Utc>,
        new_id: Option<SubmissionId>,
    ) -> Result<Receipt, DelayedError> {
        let not_failed = |status: &str| DelayedError::NotFailed {
            id: id.clone(),
            status: status.to_owned(),
        };
        let (old, record) = match self.show(id).await? {
            None => return Err(SubmissionError::NotFound { id: id.clone() }.into()),
            Some((old, SubmissionState::Recorded(record))) => (old, record),
            Some((_, SubmissionState::Pending)) => return Err(not_failed("pending")),
            Some((_, SubmissionState::Remembered(_) | SubmissionState::Pruned)) => {
                return Err(not_failed("finished, its record and payload pruned"));
            }
        };
        if !is_dead_letter(&record) {
            return Err(not_failed(record.status.as_str()));
        }
        let request = SubmitRequest {
            traceparent: old.traceparent,
            job: old.job,
            due,
            id: new_id,
            payload: old.payload,
        };
        let submission = Submission {
            retry_of: Some(id.clone()),
            ..self.checked(&request, Utc::now())?
        };
        let new_id = request.id.unwrap_or_else(SubmissionId::generate);
        let outcome =
            submissions::submit(&self.client, &self.delayed, &new_id, &submission).await?;
        Ok(Receipt {
            id: new_id,
            outcome,
        })
    }

    /// Up to `limit` submissions whose run failed for good (`failed`, `timed_out` or `missed`,
    /// no retry promised): the dead letters, newest first, from each job's kept history.
    ///
    /// # Errors
    /// A failed request.
    pub async fn failed(
        &self,
        job: Option<&JobName>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, DelayedError> {
        let mut records = self.recent(job, usize::MAX).await?;
        records.retain(is_dead_letter);
        records.truncate(limit);
        Ok(records)
    }

    /// A submission and where it is in its life; `None` when there is no such id.
    ///
    /// # Errors
    /// A failed request, or foreign data under the id.
    pub async fn show(
        &self,
        id: &SubmissionId,
    ) -> Result<Option<(Submission, SubmissionState)>, DelayedError> {
        Ok(submissions::show(&self.client, &self.delayed, &self.ledger, id).await?)
    }

    /// Moves every submission pending in ZooKeeper's due tree into the delayed queue's
    /// PostgreSQL store (`zkcron delayed migrate --to postgres`), once the lock's owner keeps the
    /// queue there: nothing claims from ZooKeeper's tree then, so none is lost or run twice. The
    /// ids ZooKeeper remembers for their jobs' `dedup_window` go with them.
    ///
    /// # Errors
    /// `NotInStore` when the schedule keeps the queue in ZooKeeper; `OwnerReadsZooKeeper` when
    /// the owner (or nobody) could still claim from ZooKeeper; a failed request (what moved
    /// stays moved; run it again).
    pub async fn migrate(&self) -> Result<crate::ledger::store_move::Moved, DelayedError> {
        if !self.client.delayed_in_postgres() {
            return Err(DelayedError::NotInStore);
        }
        let owner = crate::ledger::inspect::owner(&self.client, &self.lock)
            .await
            .map_err(|err| SubmissionError::Zk {
                path: err.path,
                source: err.source,
            })?;
        let (reads_store, who) = match owner {
            crate::ledger::inspect::Owner::Held {
                info: Some(info), ..
            } => (
                info.delayed_store == Some(crate::lock::node::DelayedStoreKind::Postgres),
                format!(" {}", info.node_id),
            ),
            _ => (false, " (none now)".to_owned()),
        };
        if !reads_store {
            return Err(DelayedError::OwnerReadsZooKeeper { owner: who });
        }
        let mut moved =
            crate::ledger::store_move::move_to_store(&self.client, &self.delayed, usize::MAX)
                .await?;
        let window_of = |job: &JobName| self.jobs.get(job).map(|config| config.dedup_window);
        let now = chrono::Utc::now().timestamp_millis();
        moved.remembered = crate::ledger::store_move::remember_in_store(
            &self.client,
            &self.ledger,
            window_of,
            now,
        )
        .await?;
        Ok(moved)
    }

    /// Up to `limit` pending submissions (of `job`, if given), in due order. Reads bucket by
    /// bucket from the oldest and stops once `limit` are found.
    ///
    /// # Errors
    /// A failed request. Foreign nodes are logged and skipped.
    pub async fn list(
        &self,
        job: Option<&JobName>,
        limit: usize,
    ) -> Result<Vec<Pending>, DelayedError> {
        let (mut pending, _) =
            pending_in_due_order(&self.client, &self.delayed, job, limit).await?;
        pending.truncate(limit);
        Ok(pending)
    }

    /// Up to `limit` of the newest records of submissions (of `job`, if given) — runs and
    /// cancels — newest first, from each job's kept history.
    ///
    /// # Errors
    /// A failed request.
    pub async fn recent(
        &self,
        job: Option<&JobName>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, DelayedError> {
        let mut names: Vec<&JobName> = self
            .jobs
            .keys()
            .filter(|name| job.is_none_or(|job| job == *name))
            .collect();
        names.sort_unstable();
        let mut records = Vec::new();
        for name in names {
            let kept = self.jobs.get(name).map_or(0, |job| job.history);
            let history = crate::ledger::history(&self.client, &self.ledger, name, kept)
                .await
                .map_err(SubmissionError::from)?;
            records.extend(history.into_iter().filter(|r| r.submission_id.is_some()));
        }
        records.sort_by(|a, b| {
            (b.scheduled_unix_ms, &b.submission_id).cmp(&(a.scheduled_unix_ms, &a.submission_id))
        });
        records.truncate(limit);
        Ok(records)
    }

    /// The declared job `name`, for callers that show times in its zone.
    pub fn job(&self, name: &JobName) -> Option<&JobConfig> {
        self.jobs.get(name).map(Arc::as_ref)
    }
}

/// Pending submissions (of `job`, if given) in due order, bucket by bucket from the oldest,
/// until at least `limit` are found; `true` when every bucket was read.
///
/// # Errors
/// A failed request. Foreign nodes are logged and skipped.
pub async fn pending_in_due_order(
    client: &Ledger,
    paths: &DelayedPaths,
    job: Option<&JobName>,
    limit: usize,
) -> Result<(Vec<Pending>, bool), DelayedError> {
    if client.delayed_in_postgres() {
        return pending_in_store(client, job, limit).await;
    }
    let mut pending = Vec::new();
    for day in crate::ledger::due::days(client, paths).await? {
        for bucket in crate::ledger::due::buckets(client, paths, day).await? {
            if pending.len() >= limit {
                return Ok((pending, false));
            }
            read_bucket(client, paths, bucket, job, &mut pending).await?;
        }
    }
    Ok((pending, true))
}

/// [`pending_in_due_order`] where the queue is kept in PostgreSQL: its due index read a page at a
/// time, `job`'s kept; no more than [`STORE_SCAN_ROWS`] rows are read for one answer.
async fn pending_in_store(
    client: &Ledger,
    job: Option<&JobName>,
    limit: usize,
) -> Result<(Vec<Pending>, bool), DelayedError> {
    /// Rows one page of the due index holds.
    const PAGE: usize = 10_000;
    let mut pending = Vec::new();
    let (mut after, mut read) = (i64::MIN, 0);
    let page_rows = i64::try_from(PAGE).unwrap_or(i64::MAX);
    // Every job's rows, `job`'s kept here: a page filtered by the database would read the due
    // index on past a rare job's rows, unbounded by the page.
    let jobs = submissions::JobsRead::all();
    loop {
        let page = submissions::pending_in_store(client, after, i64::MAX, page_rows, &jobs).await?;
        read += page.len();
        let full = page.len() >= PAGE;
        // A full page may end within a millisecond: the next starts before it.
        let last = page.last().map(|(_, s)| s.due_unix_ms).filter(|_| full);
        let one_ms = last.is_some() && page.first().map(|(_, s)| s.due_unix_ms) == last;
        for (id, submission) in page {
            // The last millisecond's rows come whole with the next page.
            if !one_ms && last == Some(submission.due_unix_ms) {
                break;
            }
            if job.is_none_or(|job| *job == submission.job) {
                if pending.len() >= limit {
                    return Ok((pending, false));
                }
                pending.push(Pending { id, submission });
            }
        }
        match last {
            None => return Ok((pending, true)),
            Some(_) if read >= STORE_SCAN_ROWS => return Ok((pending, false)),
            // A page of one millisecond: on past it.
            Some(last) if one_ms => after = last,
            Some(last) => after = last - 1,
        }
    }
}

/// Rows of the store's due index one listing reads at most: `delayed list --job` of a rare job
/// in a queue of millions stops there, and says the list is not complete.
pub const STORE_SCAN_ROWS: usize = 1_000_000;

/// Per job: how many submissions are pending and when the next is due, from the first `limit`
/// in due order (`complete` says whether that was all of them) — for `zkcron status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingSummary {
    pub per_job: HashMap<JobName, (usize, i64)>,
    pub complete: bool,
}

/// Counts the pending submissions per job; see [`PendingSummary`].
///
/// # Errors
/// A failed request.
pub async fn pending_summary(
    client: &Ledger,
    paths: &DelayedPaths,
    limit: usize,
) -> Result<PendingSummary, DelayedError> {
    let (pending, complete) = pending_in_due_order(client, paths, None, limit).await?;
    let mut per_job: HashMap<JobName, (usize, i64)> = HashMap::new();
    for p in pending {
        let entry = per_job
            .entry(p.submission.job)
            .or_insert((0, p.submission.due_unix_ms));
        entry.0 += 1;
        entry.1 = entry.1.min(p.submission.due_unix_ms);
    }
    Ok(PendingSummary { per_job, complete })
}

async fn read_bucket(
    client: &Ledger,
    paths: &DelayedPaths,
    bucket: DueBucket,
    job: Option<&JobName>,
    pending: &mut Vec<Pending>,
) -> Result<(), DelayedError> {
    let mut found = Vec::new();
    let markers = crate::ledger::due::pending_in(client, paths, bucket).await?;
    // A marker that names another job needs no read.
    let wanted = markers
        .into_iter()
        .filter(|(_, named)| job.is_none_or(|job| named.as_ref().is_none_or(|n| n == job)));
    for (id, _) in wanted {
        match submissions::read(client, paths, &id).await {
            Ok(Some((submission, _))) if job.is_none_or(|job| &submission.job == job) => {
                found.push(Pending { id, submission });
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(id = %id, error = %crate::report::error_chain(&err), "pending submission unreadable; skipped")
            }
        }
    }
    found.sort_by(|a, b| (a.submission.due_unix_ms, &a.id).cmp(&(b.submission.due_unix_ms, &b.id)));
    pending.extend(found);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    fn jobs() -> HashMap<JobName, Arc<JobConfig>> {
        let text = "[zookeeper]\nconnect = \"zk:2181\"\n[lock]\nname = \"g\"\n\
                    [[job]]\nname = \"close-order\"\nshell = \"cat\"\nstarting_deadline = \"1m\"\n\
                    [[job]]\nname = \"rotate\"\nshell = \"true\"\nschedule = \"0 3 * * *\"\nbroadcast = true\n";
        let config = config::parse(std::path::Path::new("t.toml"), text, &|_| None).expect("valid");
        config
            .jobs
            .iter()
            .map(|job| (job.spec.name.clone(), Arc::clone(job)))
            .collect()
    }

    fn request(due: DateTime<Utc>, payload: usize) -> SubmitRequest {
        SubmitRequest {
            traceparent: None,
            job: JobName::new("close-order"),
            due,
            id: None,
            payload: vec![b'x'; payload],
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).expect("in range")
    }

    #[test]
    fn a_request_is_checked_against_its_job_before_anything_is_written() {
        let jobs = jobs();
        let ok = check_request(&jobs, &request(now(), MAX_PAYLOAD), now()).expect("accepted");
        assert_eq!(
            (ok.due_unix_ms, ok.submitted_unix_ms, ok.payload.len()),
            (1_700_000_000_000, 1_700_000_000_000, MAX_PAYLOAD)
        );
        let chosen = SubmitRequest {
            traceparent: None,
            id: SubmissionId::parse("order-42").ok(),
            ..request(now(), 0)
        };
        assert_eq!(
            (
                ok.anonymous,
                check_request(&jobs, &chosen, now())
                    .map(|s| s.anonymous)
                    .ok()
            ),
            (true, Some(false)),
            "only a generated id is anonymous"
        );
        let unknown = SubmitRequest {
            traceparent: None,
            job: JobName::new("nope"),
            ..request(now(), 0)
        };
        let err = check_request(&jobs, &unknown, now()).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "job \"nope\" is not declared in the schedule file; declared: close-order, rotate"
        );
        let broadcast = SubmitRequest {
            traceparent: None,
            job: JobName::new("rotate"),
            ..request(now(), 0)
        };
        let refused = check_request(&jobs, &broadcast, now()).expect_err("a broadcast");
        assert!(matches!(refused, DelayedError::Broadcast { .. }) && refused.is_refusal());
        assert!(matches!(
            check_request(&jobs, &request(now(), MAX_PAYLOAD + 1), now()),
            Err(DelayedError::PayloadTooLarge { len }) if len == MAX_PAYLOAD + 1
        ));
        assert!(err.is_refusal());
    }

    #[test]
    fn a_due_time_in_the_past_is_accepted_within_the_starting_deadline_only() {
        let jobs = jobs();
        let within = now() - chrono::Duration::seconds(60);
        assert!(check_request(&jobs, &request(within, 0), now()).is_ok());
        let beyond = now() - chrono::Duration::seconds(61);
        assert!(matches!(
            check_request(&jobs, &request(beyond, 0), now()),
            Err(DelayedError::TooLate { late, deadline, .. })
                if late == Duration::from_secs(61) && deadline == Duration::from_secs(60)
        ));
        let far = now() + chrono::Duration::days(3700);
        assert!(matches!(
            check_request(&jobs, &request(far, 0), now()),
            Err(DelayedError::TooFarAhead { .. })
        ));
    }
}
