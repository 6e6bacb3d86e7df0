//! Delayed submissions in ZooKeeper (docs/DELAYED.md): the submit and cancel multi-ops, and
//! reading the id index and the due buckets.
//!
//! Owns: every raw ZooKeeper call on `<root>/<lock>/delayed`. A submission is pending exactly
//! while its marker `due/<day>/<second>/<shard>/<id>` exists; leaving that state is one multi-op
//! that deletes the marker and creates the submission's run record (a claim, or a cancel), so a
//! submission is never in two states at once.
//! Where the ledger keeps the delayed queue in PostgreSQL, submit, submit a batch, cancel and show
//! are answered from there (`ledger::postgres::submissions`), the same operations for callers.
//! Must not: decide when a submission fires (the fire machine) or check it against the schedule
//! (the caller's job).

use super::Ledger;
use super::parents::{absent, parents_of};
use super::postgres::submissions as in_postgres;
use crate::delayed::submission::{DueBucket, Stored, Submission, SubmissionId};
use crate::layout::DelayedPaths;
use crate::layout::LedgerPaths;
use crate::run::RunRecord;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, MultiFault};

pub use super::submission_state::{
    JobsRead, Rescheduled, SubmissionError, SubmissionState, Submitted,
};

/// Tries a multi this many times when a parent it needs was missing (the owner removes empty
/// past buckets, so a bucket can vanish between making it and using it).
const PARENT_ATTEMPTS: usize = 3;

/// Submits `submission` under `id` in one multi-op: create the submission node in the id index
/// and its pending marker in its due bucket. The same request under the same id again is a no-op
/// ([`Submitted::AlreadyThere`]).
///
/// # Errors
/// `Conflict` when `id` holds a different request; `Corrupt` when it holds foreign data; `Zk`
/// when a request failed (nothing is half-written: the multi is all or nothing).
pub async fn submit(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
    submission: &Submission,
) -> Result<Submitted, SubmissionError> {
    if let Some(store) = client.delayed_store() {
        return in_postgres::submit(store, id, submission).await;
    }
    let node = paths.submission(id);
    let marker = paths.marker_of(id, submission);
    let data = submission.to_bytes();
    for _ in 0..PARENT_ATTEMPTS {
        let mut multi = client.zk().multi(WriteKind::Submit);
        multi
            .add_create(&node, &data, Mode::Persistent)
            .and_then(|()| multi.add_create(&marker, &[], Mode::Persistent))
            .map_err(|source| zk(&node, source))?;
        match multi.commit().await {
            Ok(_) => return Ok(Submitted::Created),
            Err(MultiFault::Op {
                index: 0,
                fault: Fault::NodeExists,
            }) => {
                let (stored, _) = read_stored(client, paths, id)
                    .await?
                    .ok_or_else(|| SubmissionError::NotFound { id: id.clone() })?;
                return if stored.same_request(submission) {
                    Ok(Submitted::AlreadyThere)
                } else {
                    Err(SubmissionError::Conflict { id: id.clone() })
                };
            }
            Err(MultiFault::Op {
                fault: Fault::NoNode,
                ..
            }) => {
                let bucket = DueBucket::of(submission.due_unix_ms);
                for parent in [
                    paths.id_shard(id.shard()),
                    paths.due_shard(bucket, id.shard()),
                ] {
                    client
                        .zk()
                        .ensure_persistent(&parent)
                        .await
                        .map_err(|source| zk(&parent, source))?;
                }
            }
            Err(MultiFault::Op {
                index,
                fault: source,
            }) => {
                let path = if index == 0 { &node } else { &marker };
                return Err(zk(path, source));
            }
            Err(MultiFault::Request(source) | MultiFault::Fenced(source)) => {
                return Err(zk(&node, source));
            }
        }
    }
    Err(zk(&marker, Fault::NoNode))
}

/// A batch's znode data at most, well under ZooKeeper's default `jute.maxbuffer` (1 MiB) for one
/// multi-op request.
const BATCH_BYTES: usize = 512 * 1024;
/// Per create in a multi-op, besides its path and data: the op's header, the lengths, the
/// flags and an ACL (a digest ACL's id is the longest, under 100 bytes), counted generously.
const BYTES_PER_CREATE: usize = 200;
/// The submission node's fields besides the payload (job, due and submit instants), at most.
const SUBMISSION_FIELDS: usize = 200;

/// What `submission` under `id` adds to a multi-op at most: its two creates and up to three
/// parents' (a new second, its shard, and an id shard; paths no longer than the marker's). The
/// few parents above those (`ids`, `due`, a day) fit in what this overcounts.
fn request_bytes(paths: &DelayedPaths, id: &SubmissionId, submission: &Submission) -> usize {
    let marker = paths.marker_of(id, submission).len();
    let node = paths.submission(id).len();
    submission.payload.len() + SUBMISSION_FIELDS + node + 4 * marker + 5 * BYTES_PER_CREATE
}

/// Parents (`ids/<shard>`, `due/<day>/<second>/<shard>` and their ancestors) known to exist, or
/// being made by a multi-op already sent on this session, so a submitter makes each once; one
/// per session is enough.
#[derive(Debug, Default)]
pub struct KnownParents(std::sync::Mutex<std::collections::HashSet<String>>);

impl KnownParents {
    /// Those of `wanted` not known, now counted as known: the caller makes them in the multi-op
    /// it sends next, before any later request of the session (one session is answered in
    /// order), and forgets them if it fails.
    fn take_missing(&self, wanted: Vec<String>) -> Vec<String> {
        let Ok(mut known) = self.0.lock() else {
            return wanted;
        };
        wanted
            .into_iter()
            .filter(|p| known.insert(p.clone()))
            .collect()
    }

    fn add(&self, made: impl IntoIterator<Item = String>) {
        if let Ok(mut known) = self.0.lock() {
            known.extend(made);
        }
    }

    /// Those of `wanted` not known (yet to be read).
    fn unknown(&self, wanted: Vec<String>) -> Vec<String> {
        let Ok(known) = self.0.lock() else {
            return wanted;
        };
        wanted.into_iter().filter(|p| !known.contains(p)).collect()
    }

    /// A multi found a parent missing or made none it was to make: forget them all.
    fn forget(&self) {
        if let Ok(mut known) = self.0.lock() {
            known.clear();
        }
    }
}

/// Submits many in one multi-op per `BATCH_BYTES` — one transaction for all of them, with the
/// parents they need (`ids/<shard>`, `due/<day>/<second>/<shard>`, …) that do not exist yet made
/// in the same transaction. Whether a parent this session does not know exists is read on
/// `reader`, a session of its own: on the writing session a read would wait behind its writes
/// (ZooKeeper answers a session in order), and a create per parent cost a transaction each, more
/// than the submissions. When a parent appeared meanwhile (another submitter made it), the
/// batch's parents are made on their own and the batch sent again; when any id of a batch is
/// taken (an idempotent resubmit, or a conflict) or a parent vanished, that batch goes one by
/// one through [`submit`], which tells the cases apart. Results are in the batch's order.
pub async fn submit_batch(
    client: &Ledger,
    reader: &Ledger,
    paths: &DelayedPaths,
    batch: &[(SubmissionId, Submission)],
    known: &KnownParents,
) -> Vec<Result<Submitted, SubmissionError>> {
    if let Some(store) = client.delayed_store() {
        return in_postgres::submit_batch(store, batch).await;
    }
    let mut results = Vec::with_capacity(batch.len());
    let mut start = 0;
    while start < batch.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < batch.len() {
            let (id, submission) = &batch[end];
            let more = request_bytes(paths, id, submission);
            if end > start && bytes + more > BATCH_BYTES {
                break;
            }
            bytes += more;
            end += 1;
        }
        let chunk = &batch[start..end];
        results.extend(submit_chunk(client, reader, paths, chunk, known).await);
        start = end;
    }
    results
}

/// One multi-op's worth of [`submit_batch`].
async fn submit_chunk(
    client: &Ledger,
    reader: &Ledger,
    paths: &DelayedPaths,
    chunk: &[(SubmissionId, Submission)],
    known: &KnownParents,
) -> Vec<Result<Submitted, SubmissionError>> {
    let unknown = known.unknown(parents_of(paths, chunk));
    let absent = absent(reader, &unknown).await;
    known.add(unknown.into_iter().filter(|p| !absent.contains(p)));
    let mut wanted = absent;
    for _ in 0..2 {
        // No await between taking the parents and sending the multi: a later multi of this
        // session that counts on them is answered after this one. Those another batch of this
        // session took meanwhile are made by its multi, sent before this one.
        let parents = known.take_missing(std::mem::take(&mut wanted));
        let mut multi = client.zk().multi(WriteKind::Submit);
        let built = parents
            .iter()
            .try_for_each(|parent| multi.add_create(parent, &[], Mode::Persistent))
            .and_then(|()| {
                chunk.iter().try_for_each(|(id, submission)| {
                    multi.add_create(
                        &paths.submission(id),
                        &submission.to_bytes(),
                        Mode::Persistent,
                    )?;
                    multi.add_create(&paths.marker_of(id, submission), &[], Mode::Persistent)
                })
            });
        let committed = match built {
            Ok(()) => multi.commit().await,
            Err(source) => Err(MultiFault::Request(source)),
        };
        match committed {
            Ok(_) => return chunk.iter().map(|_| Ok(Submitted::Created)).collect(),
            Err(MultiFault::Op {
                index,
                fault: Fault::NodeExists,
            }) if index < parents.len() => {
                // Another submitter made a parent: make them on their own, then send again.
                make_parents(client, &parents, known).await;
            }
            Err(MultiFault::Request(source)) if chunk.len() == 1 => {
                known.forget();
                return vec![Err(zk(&paths.submission(&chunk[0].0), source))];
            }
            Err(err) => {
                if matches!(err, MultiFault::Request(Fault::ConnectionLoss)) {
                    let bytes: usize = chunk
                        .iter()
                        .map(|(id, submission)| request_bytes(paths, id, submission))
                        .sum();
                    tracing::warn!(
                        submissions = chunk.len(),
                        bytes,
                        "a batch of submissions went unanswered: the connection was lost under \
                         it; sending them one by one. If the ZooKeeper servers' jute.maxbuffer is \
                         below its size, set it back to 1 MiB, ZooKeeper's default"
                    );
                }
                known.forget();
                break;
            }
        }
    }
    let mut results = Vec::with_capacity(chunk.len());
    for (id, submission) in chunk {
        results.push(submit(client, paths, id, submission).await);
    }
    results
}

/// Creates `parents` (ancestors first), requests out at once; remembers those that exist now.
async fn make_parents(client: &Ledger, parents: &[String], known: &KnownParents) {
    // Parents before children: one session answers in order, so all can be out at once.
    let creates: Vec<_> = parents
        .iter()
        .map(|path| {
            client
                .zk()
                .create(WriteKind::Parents, path, &[], Mode::Persistent)
        })
        .collect();
    let mut made = Vec::new();
    for (path, create) in parents.iter().zip(creates) {
        match create.await {
            Ok(_) | Err(Fault::NodeExists) => made.push(path.clone()),
            Err(err) => tracing::debug!(path, error = %err, "parent not made; the submit makes it"),
        }
    }
    known.add(made);
}

/// Reads the request of submission `id` and its node's version; `None` when there is no such
/// request (never submitted, or finished and only remembered by a tombstone).
///
/// # Errors
/// `Corrupt` for data not in the documented format; `Zk` when the read failed.
pub async fn read(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
) -> Result<Option<(Submission, i32)>, SubmissionError> {
    if let Some(store) = client.delayed_store() {
        return Ok(in_postgres::read_pending(store, id).await?.map(|s| (s, 0)));
    }
    Ok(match read_stored(client, paths, id).await? {
        Some((Stored::Request(submission), version)) => Some((submission, version)),
        Some((Stored::Tombstone(_), _)) | None => None,
    })
}

/// The pending submissions of `jobs` due after `after_unix_ms` and by `through_unix_ms`, oldest
/// first, at most `limit`, where the delayed queue is kept in PostgreSQL (none where it is not: the
/// due buckets in ZooKeeper are read by name, [`super::due`]).
///
/// # Errors
/// `Store` when the store failed.
pub async fn pending_in_store(
    client: &Ledger,
    after_unix_ms: i64,
    through_unix_ms: i64,
    limit: i64,
    jobs: &JobsRead,
) -> Result<Vec<(SubmissionId, Submission)>, SubmissionError> {
    match client.delayed_store() {
        Some(store) => {
            in_postgres::pending_between(store, after_unix_ms, through_unix_ms, limit, jobs).await
        }
        None => Ok(Vec::new()),
    }
}

/// The open runs of `job` kept in the PostgreSQL store — claimed, running, or promising a retry
/// — with their versions and payloads, for a new owner's catch-up, read once the store's fence
/// is raised to `token` (the owner's), so that no write of a previous owner lands after them; none where the queue is kept
/// in ZooKeeper (its records are read there).
///
/// # Errors
/// `Store` when the store failed.
pub async fn open_runs_in_store(
    client: &Ledger,
    job: &crate::ids::JobName,
    token: Option<crate::ids::FencingToken>,
) -> Result<Vec<(RunRecord, i32, Vec<u8>)>, SubmissionError> {
    match client.delayed_store() {
        Some(store) => in_postgres::open_runs_of(store, job, token).await,
        None => Ok(Vec::new()),
    }
}

/// Where the delayed queue is kept in PostgreSQL: a wake-up for each submit to this lock group
/// (see [`super::postgres::Submit`]); the receiver closes when the listening connection ends. `None`
/// where the queue is kept in ZooKeeper (its due buckets are watched instead).
///
/// # Errors
/// `Store` when no listening connection could be made.
pub async fn listen_in_store(
    client: &Ledger,
) -> Option<Result<tokio::sync::mpsc::Receiver<super::postgres::Submit>, SubmissionError>> {
    Some(in_postgres::listen(client.delayed_store()?).await)
}

/// Reads what id `id`'s node holds, a request or a tombstone, and the node's version.
///
/// # Errors
/// As [`read`].
pub async fn read_stored(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
) -> Result<Option<(Stored, i32)>, SubmissionError> {
    Ok(read_stored_data(client, paths, id)
        .await?
        .map(|(stored, version, _)| (stored, version)))
}

/// [`read_stored`] with the bytes as stored, for a rewrite that keeps what it does not know.
async fn read_stored_data(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
) -> Result<Option<(Stored, i32, Vec<u8>)>, SubmissionError> {
    let path = paths.submission(id);
    match client.zk().get_data(&path).await {
        Ok((data, stat)) => match Stored::parse(&data) {
            Ok(stored) => Ok(Some((stored, stat.version, data))),
            Err(source) => Err(SubmissionError::Corrupt { path, source }),
        },
        Err(Fault::NoNode) => Ok(None),
        Err(source) => Err(zk(&path, source)),
    }
}

/// Reads submission `id` and where it is in its life; `None` when there is no such submission
/// (or it was forgotten). A remembered one comes without its payload.
///
/// # Errors
/// As [`read`].
pub async fn show(
    client: &Ledger,
    paths: &DelayedPaths,
    ledger: &LedgerPaths,
    id: &SubmissionId,
) -> Result<Option<(Submission, SubmissionState)>, SubmissionError> {
    if let Some(store) = client.delayed_store() {
        return in_postgres::show(store, id).await;
    }
    let submission = match read_stored(client, paths, id).await? {
        None => return Ok(None),
        Some((Stored::Request(submission), _)) => submission,
        Some((Stored::Tombstone(tombstone), _)) => {
            let submission = tombstone.request_without_payload();
            return Ok(Some((submission, SubmissionState::Remembered(tombstone))));
        }
    };
    // The marker first: leaving `pending` creates the record in the same multi, so a marker
    // found gone means the record is there to read.
    if marked_pending(client, paths, id, &submission).await? {
        return Ok(Some((submission, SubmissionState::Pending)));
    }
    let record = ledger.submission_record(&submission.job, submission.due_unix_ms, id);
    let state = match super::read_record(client, &record).await {
        Some(record) => SubmissionState::Recorded(Box::new(record)),
        // Pruned between the two reads: the node is a tombstone now.
        None => match read_stored(client, paths, id).await? {
            Some((Stored::Tombstone(tombstone), _)) => SubmissionState::Remembered(tombstone),
            _ => SubmissionState::Pruned,
        },
    };
    Ok(Some((submission, state)))
}

/// Whether `submission`'s pending marker is in ZooKeeper's due tree.
///
/// # Errors
/// `Zk` when the read failed.
pub(super) async fn marked_pending(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
    submission: &Submission,
) -> Result<bool, SubmissionError> {
    let marker = paths.marker_of(id, submission);
    let stat = client.zk().check_stat(&marker).await;
    Ok(stat.map_err(|source| zk(&marker, source))?.is_some())
}

/// Cancels pending submission `id`: one multi-op deletes its marker and creates its record as
/// `cancelled`, so it cannot be claimed afterwards (and a claim that came first wins).
///
/// # Errors
/// `NotFound`; `NotPending` once it was claimed (or cancelled before); `Corrupt`; `Zk`.
pub async fn cancel(
    client: &Ledger,
    paths: &DelayedPaths,
    ledger: &LedgerPaths,
    id: &SubmissionId,
    now_unix_ms: i64,
) -> Result<Submission, SubmissionError> {
    if let Some(store) = client.delayed_store() {
        return in_postgres::cancel(store, id, now_unix_ms).await;
    }
    let submission = match read_stored(client, paths, id).await? {
        None => return Err(SubmissionError::NotFound { id: id.clone() }),
        Some((Stored::Request(submission), _)) => submission,
        Some((Stored::Tombstone(_), _)) => {
            return Err(SubmissionError::NotPending {
                id: id.clone(),
                status: "finished (its record was pruned)".to_owned(),
            });
        }
    };
    let marker = paths.marker_of(id, &submission);
    let path = ledger.submission_record(&submission.job, submission.due_unix_ms, id);
    let record = RunRecord::cancelled_before_start(&submission, id, now_unix_ms);
    for _ in 0..PARENT_ATTEMPTS {
        let mut multi = client.zk().multi(WriteKind::Submit);
        multi
            .add_delete(&marker, None)
            .and_then(|()| multi.add_create(&path, &record.to_bytes(), Mode::Persistent))
            .map_err(|source| zk(&marker, source))?;
        match multi.commit().await {
            Ok(_) => return Ok(submission),
            Err(MultiFault::Op {
                index: 0,
                fault: Fault::NoNode,
            }) => {
                let status = match show(client, paths, ledger, id).await? {
                    Some((_, SubmissionState::Recorded(record)))
                        if record.retry_at_unix_ms.is_some() && record.status.is_final() =>
                    {
                        if cancel_retry(client, ledger, &record).await? {
                            return Ok(submission);
                        }
                        continue;
                    }
                    Some((_, SubmissionState::Recorded(record))) => {
                        record.status.as_str().to_owned()
                    }
                    Some((_, SubmissionState::Pending)) => continue,
                    Some((_, SubmissionState::Remembered(_) | SubmissionState::Pruned)) | None => {
                        "finished (its record was pruned)".to_owned()
                    }
                };
                return Err(SubmissionError::NotPending {
                    id: id.clone(),
                    status,
                });
            }
            Err(MultiFault::Op {
                index: 1,
                fault: Fault::NoNode,
            }) => {
                let parent = ledger.job_runs(&submission.job);
                client
                    .zk()
                    .ensure_persistent(&parent)
                    .await
                    .map_err(|source| zk(&parent, source))?;
            }
            Err(MultiFault::Op {
                index: 1,
                fault: Fault::NodeExists,
            }) => {
                return Err(SubmissionError::NotPending {
                    id: id.clone(),
                    status: "recorded already".to_owned(),
                });
            }
            Err(MultiFault::Op { fault: source, .. })
            | Err(MultiFault::Request(source) | MultiFault::Fenced(source)) => {
                return Err(zk(&marker, source));
            }
        }
    }
    Err(zk(&path, Fault::NoNode))
}

/// Moves pending submission `id` to `due_unix_ms` in one multi-op: its node takes the new due
/// time (at the version read), its pending marker leaves the old bucket for the new one. A claim
/// that came first wins (the marker is gone: `NotReschedulable`), and a claim of the old due time
/// that comes after finds no marker to take. The same move again is a no-op.
///
/// # Errors
/// `NotFound`; `NotReschedulable` once it was claimed or cancelled; `Corrupt`; `Zk`.
pub async fn reschedule(
    client: &Ledger,
    paths: &DelayedPaths,
    ledger: &LedgerPaths,
    id: &SubmissionId,
    due_unix_ms: i64,
) -> Result<Rescheduled, SubmissionError> {
    if let Some(store) = client.delayed_store() {
        return in_postgres::reschedule(store, id, due_unix_ms).await;
    }
    for _ in 0..PARENT_ATTEMPTS {
        let (submission, version, data) = match read_stored_data(client, paths, id).await? {
            None => return Err(SubmissionError::NotFound { id: id.clone() }),
            Some((Stored::Request(submission), version, data)) => (submission, version, data),
            Some((Stored::Tombstone(_), _, _)) => {
                return Err(SubmissionError::NotReschedulable {
                    id: id.clone(),
                    status: "finished (its record was pruned)".to_owned(),
                });
            }
        };
        let old_marker = paths.marker_of(id, &submission);
        let moved = Submission {
            due_unix_ms,
            ..submission.clone()
        };
        let new_marker = paths.marker_of(id, &moved);
        if old_marker == new_marker {
            // Due then already: still pending, or claimed meanwhile.
            return match client.zk().check_stat(&old_marker).await {
                Ok(Some(_)) => Ok(Rescheduled::AlreadyThere(moved)),
                Ok(None) => Err(not_pending(client, paths, ledger, id).await?),
                Err(source) => Err(zk(&old_marker, source)),
            };
        }
        let node = paths.submission(id);
        // From the stored bytes: what a newer zkcron added to the header stays.
        let moved_data =
            crate::delayed::submission::moved(&data, due_unix_ms).map_err(|source| {
                SubmissionError::Corrupt {
                    path: node.clone(),
                    source,
                }
            })?;
        let mut multi = client.zk().multi(WriteKind::Submit);
        multi
            .add_set_data(&node, &moved_data, Some(version))
            .and_then(|()| multi.add_delete(&old_marker, None))
            .and_then(|()| multi.add_create(&new_marker, &[], Mode::Persistent))
            .map_err(|source| zk(&node, source))?;
        match multi.commit().await {
            Ok(_) => return Ok(Rescheduled::Moved(moved)),
            // Changed meanwhile (another reschedule): read it again.
            Err(MultiFault::Op {
                index: 0,
                fault: Fault::BadVersion,
            }) => {}
            Err(MultiFault::Op {
                index: 1,
                fault: Fault::NoNode,
            }) => return Err(not_pending(client, paths, ledger, id).await?),
            Err(MultiFault::Op {
                index: 2,
                fault: Fault::NoNode,
            }) => {
                let parent = paths.due_shard(DueBucket::of(due_unix_ms), id.shard());
                client
                    .zk()
                    .ensure_persistent(&parent)
                    .await
                    .map_err(|source| zk(&parent, source))?;
            }
            Err(MultiFault::Op { fault: source, .. })
            | Err(MultiFault::Request(source) | MultiFault::Fenced(source)) => {
                return Err(zk(&node, source));
            }
        }
    }
    Err(zk(&paths.submission(id), Fault::BadVersion))
}

/// Why submission `id`, whose marker is gone, can no longer be changed.
async fn not_pending(
    client: &Ledger,
    paths: &DelayedPaths,
    ledger: &LedgerPaths,
    id: &SubmissionId,
) -> Result<SubmissionError, SubmissionError> {
    let status = match show(client, paths, ledger, id).await? {
        Some((_, SubmissionState::Recorded(record))) => record.status.as_str().to_owned(),
        Some((_, SubmissionState::Pending)) => "claimed".to_owned(),
        Some((_, SubmissionState::Remembered(_) | SubmissionState::Pruned)) | None => {
            "finished (its record was pruned)".to_owned()
        }
    };
    Ok(SubmissionError::NotReschedulable {
        id: id.clone(),
        status,
    })
}

/// Cancels the retry a failed run of a submission promises: its record is rewritten without the
/// promise (at the version read, so a retry claimed meanwhile wins) and its open marker goes, in
/// one multi-op. `false` when the record changed meanwhile (look again).
///
/// # Errors
/// The request failed.
async fn cancel_retry(
    client: &Ledger,
    ledger: &LedgerPaths,
    seen: &RunRecord,
) -> Result<bool, SubmissionError> {
    let path = seen.path(ledger);
    let (mut record, version) = match super::read_to_act(client, &path)
        .await
        .map_err(|source| zk(&path, source))?
    {
        super::StoredRecord::Record(record, version) => (*record, version),
        super::StoredRecord::Newer => return Err(SubmissionError::NewerRecord { path }),
        super::StoredRecord::Absent => return Ok(false),
    };
    if record.retry_at_unix_ms.is_none() || !record.status.is_final() {
        return Ok(false);
    }
    record.retry_at_unix_ms = None;
    let cancelled = format!("attempt {} cancelled before it started", record.attempt + 1);
    record.error = Some(match record.error.take() {
        Some(error) => format!("{error}; {cancelled}"),
        None => cancelled,
    });
    match super::rewrite_record(client, ledger, &record, version, true).await {
        Ok(_) => Ok(true),
        Err(super::UpdateError::Conflict { .. }) => Ok(false),
        Err(super::UpdateError::Zk { path, source }) => Err(zk(&path, source)),
        // Not from a ZooKeeper rewrite; named as it came.
        Err(super::UpdateError::Store { path, source }) => Err(zk(
            &path,
            Fault::Other(crate::report::error_chain(&*source)),
        )),
        Err(err @ super::UpdateError::NotOwner) => Err(zk(
            &ledger.delayed.due,
            Fault::Other(crate::report::error_chain(&err)),
        )),
    }
}

pub(super) async fn children(client: &Ledger, path: &str) -> Result<Vec<String>, SubmissionError> {
    client
        .zk()
        .children_if_there(path)
        .await
        .map_err(|source| zk(path, source))
}

impl SubmissionError {
    /// No answer came for a submission of a batch sent under `path`: it may have been written.
    pub fn unanswered(path: &str) -> Self {
        zk(path, Fault::Other("no answer".into()))
    }
}

pub(super) fn zk(path: &str, source: Fault) -> SubmissionError {
    SubmissionError::Zk {
        path: path.to_owned(),
        source,
    }
}
