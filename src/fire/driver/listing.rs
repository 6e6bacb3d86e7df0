//! The fire driver's listings of run records for catch-up, a bounded number at a time.
//!
//! A node that starts being able to fire lists every job's records. One task per job made the
//! daemon's memory peak with ten thousand jobs at startup, and its RSS stays at that peak
//! ever after (the allocator keeps what was freed).
//! Owns: the listings waiting their turn and the ones out, and what one listing reads
//! (`list_records`: the ticks, the newest records, promised retries, open submissions, the
//! guard and the live members).
//! Must not: decide what to list (the machine does).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::delayed::submission::{Stored, SubmissionId};
use crate::fire::machine::{CatchUpInput, Input, JobRecords, RESOLVE_WINDOW};
use crate::ids::{FencingToken, JobName};
use crate::layout::LedgerPaths;
use crate::layout::LockPaths;
use crate::ledger::Ledger;
use crate::ledger::inspect;
use crate::ledger::{self, StoredRecord};
use crate::report::error_chain;

use super::session::{READ_WINDOW, bounded};

/// Listings out at once: enough to keep a session's pipeline full.
const IN_FLIGHT: usize = 32;

/// Takes listing requests; each answer goes to the machine as `CatchUpInput::Listed`.
pub(super) struct Lister {
    requests: mpsc::UnboundedSender<Request>,
}

impl Lister {
    /// Starts the listing task; it ends when the `Lister` is dropped and its listings are done.
    pub fn start(
        paths: LedgerPaths,
        group: LockPaths,
        answers: mpsc::UnboundedSender<Input>,
    ) -> Self {
        let (requests, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(queue, paths, group, answers));
        Self { requests }
    }

    /// Lists `job`'s records on `client`'s session, in turn, as the owner holding `token`.
    pub fn list(&self, client: Ledger, job: JobName, token: Option<FencingToken>) {
        // The task outlives every sender; a send fails only if it panicked.
        let _ = self.requests.send((client, job, token));
    }
}

/// A listing asked for: the session, the job, the owner's token.
type Request = (Ledger, JobName, Option<FencingToken>);

async fn run(
    mut requests: mpsc::UnboundedReceiver<Request>,
    paths: LedgerPaths,
    group: LockPaths,
    answers: mpsc::UnboundedSender<Input>,
) {
    let mut waiting: VecDeque<Request> = VecDeque::new();
    let mut out = JoinSet::new();
    let mut open = true;
    loop {
        while out.len() < IN_FLIGHT {
            let Some((client, job, token)) = waiting.pop_front() else {
                // Ten thousand requests at startup leave 2.2 MB of queue behind (issue 10).
                if waiting.capacity() > IN_FLIGHT {
                    waiting = VecDeque::new();
                }
                break;
            };
            let (paths, group, answers) = (paths.clone(), group.clone(), answers.clone());
            out.spawn(async move {
                let listed = list_records(&client, &paths, &group, &job, token);
                let listed = bounded(job.as_str(), listed);
                let result = listed
                    .await
                    .unwrap_or_else(|| Err("no answer in time".into()));
                let _ = answers.send(Input::CatchUp(CatchUpInput::Listed { job, result }));
            });
        }
        tokio::select! {
            request = requests.recv(), if open => match request {
                Some(request) => waiting.push_back(request),
                None => open = false,
            },
            Some(_) = out.join_next() => {}
            else => return,
        }
    }
}

/// What catch-up needs to know of one job, read in one go.
async fn list_records(
    client: &Ledger,
    paths: &LedgerPaths,
    group: &LockPaths,
    job: &JobName,
    token: Option<FencingToken>,
) -> Result<JobRecords, String> {
    let names = ledger::record_names(client, paths, job)
        .await
        .map_err(|err| error_chain(&err))?;
    let (mut ticks, mut submissions) = (Vec::new(), Vec::new());
    for name in names {
        match name.submission {
            None => ticks.push(name.scheduled_unix_ms),
            Some(id) => submissions.push((name.scheduled_unix_ms, id)),
        }
    }
    let mut newest = Vec::new();
    let mut unreadable = Vec::new();
    for &tick in ticks.iter().rev().take(RESOLVE_WINDOW) {
        let read = read_to_act(client, &paths.record(job, tick)).await?;
        match read {
            StoredRecord::Record(record, version) => newest.push((*record, version)),
            // A newer zkcron's run of that tick: it stands as a tick recorded, and is left to
            // that zkcron to resolve.
            StoredRecord::Newer => {}
            StoredRecord::Absent => unreadable.push(tick),
        }
    }
    // Gone, or not ours (logged by the read): it must not stand as the job's latest tick, or a
    // foreign node named `12` makes catch-up record a gap since 1970.
    ticks.retain(|tick| !unreadable.contains(tick));
    promised_retries(client, paths, job, &mut newest).await?;
    // A submission's run is open while its marker is (format 1) or its record says so (format
    // 2): all of them, not only the newest.
    let mut payloads = HashMap::new();
    for (record, version, payload) in open_submissions(client, paths, job, submissions).await? {
        if let (Some(id), Some(payload)) = (&record.submission_id, payload) {
            payloads.insert(id.clone(), payload);
        }
        newest.push((record, version));
    }
    // Where the queue is kept in PostgreSQL, its open runs are read there.
    let in_store = ledger::submissions::open_runs_in_store(client, job, token)
        .await
        .map_err(|err| error_chain(&err))?;
    for (record, version, payload) in in_store {
        if let Some(id) = &record.submission_id {
            payloads.insert(id.clone(), Arc::new(payload));
        }
        newest.push((record, version));
    }
    let guard_holder = ledger::guard_holder(client, paths, job).await;
    let live_members = inspect::member_ids(client, group)
        .await
        .map_err(|err| error_chain(&err))?;
    Ok(JobRecords {
        ticks,
        newest,
        guard_holder,
        live_members,
        payloads,
    })
}

/// Adds to `newest` the records of `job`'s ticks marked as promising a retry that are not among
/// them yet, however old; removes the markers of ticks that promise nothing any more.
async fn promised_retries(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
    newest: &mut Vec<(crate::run::RunRecord, i32)>,
) -> Result<(), String> {
    for tick in ledger::promised_retries(client, paths, job)
        .await
        .map_err(|err| error_chain(&err))?
    {
        let known = newest
            .iter()
            .find(|(record, _)| record.submission_id.is_none() && record.scheduled_unix_ms == tick);
        let read = match known {
            Some(known) => Some(known.clone()),
            None => match read_to_act(client, &paths.record(job, tick)).await? {
                StoredRecord::Record(record, version) => Some((*record, version)),
                // Its promise is a newer zkcron's to keep: the marker stays for it.
                StoredRecord::Newer => continue,
                StoredRecord::Absent => None,
            },
        };
        match read {
            Some((record, version))
                if record.status.is_final() && record.retry_at_unix_ms.is_some() =>
            {
                if known.is_none() {
                    newest.push((record, version));
                }
            }
            // Still running (its retry claimed), or its promise kept or given up: a stale hint,
            // unless the run is not final yet — its final record may promise again.
            Some((record, _)) if !record.status.is_final() => {}
            _ => ledger::forget_retry(client, paths, job, tick).await,
        }
    }
    Ok(())
}

/// [`ledger::read_to_act`], a failed read as catch-up reports it.
async fn read_to_act(client: &Ledger, path: &str) -> Result<StoredRecord, String> {
    ledger::read_to_act(client, path)
        .await
        .map_err(|source| error_chain(&ledger::RequestFailed::on(path)(source)))
}

/// A format 2 run still open: not final, or promising a retry.
fn kept_open_by_record(record: &crate::run::RunRecord) -> bool {
    record.open_by_record && (!record.status.is_final() || record.retry_at_unix_ms.is_some())
}

type OpenSubmission = (crate::run::RunRecord, i32, Option<Arc<Vec<u8>>>);

/// The records of `job`'s open submission runs, with their versions and payloads: those with an
/// `open/` marker (format 1), and among `recorded` (every submission record of the job) those
/// whose record keeps them open (format 2). A fleet moving between the formats has both.
async fn open_submissions(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
    recorded: Vec<(i64, SubmissionId)>,
) -> Result<Vec<OpenSubmission>, String> {
    let marked = ledger::due::open_runs(client, &paths.delayed, job)
        .await
        .map_err(|err| error_chain(&err))?;
    let mut wanted: BTreeMap<(i64, SubmissionId), bool> = BTreeMap::new();
    wanted.extend(recorded.into_iter().map(|run| (run, false)));
    wanted.extend(marked.into_iter().map(|run| (run, true)));
    let wanted: Vec<((i64, SubmissionId), bool)> = wanted.into_iter().collect();
    // Thousands may be open after a lost lock: read a window at a time, all of a window out
    // at once, so catch-up takes round trips by the window and the session's queue (which the
    // lock's liveness checks wait in) stays short.
    let mut open = Vec::new();
    for window in wanted.chunks(READ_WINDOW) {
        let mut reads = JoinSet::new();
        for (index, ((due, id), marked)) in window.iter().cloned().enumerate() {
            let (client, paths, job) = (client.clone(), paths.clone(), job.clone());
            reads.spawn(async move {
                let path = paths.submission_record(&job, due, &id);
                let record = ledger::read_versioned(&client, &path)
                    .await
                    .filter(|(record, _)| marked || kept_open_by_record(record));
                if record.is_none() {
                    return (index, None);
                }
                // Its request in ZooKeeper's own node, where the run is open, whichever store
                // keeps the queue now.
                let stored = ledger::submissions::read_stored(&client, &paths.delayed, &id).await;
                let payload = match stored {
                    Ok(Some((Stored::Request(submission), _))) => {
                        Some(Arc::new(submission.payload))
                    }
                    Ok(_) => None,
                    Err(err) => {
                        tracing::warn!(error = %error_chain(&err), "open submission's payload unreadable");
                        None
                    }
                };
                (index, record.map(|(record, version)| (record, version, payload)))
            });
        }
        let mut read: Vec<Option<OpenSubmission>> = window.iter().map(|_| None).collect();
        while let Some(joined) = reads.join_next().await {
            match joined {
                Ok((index, found)) => read[index] = found,
                Err(err) => return Err(format!("reading open submission runs: {err}")),
            }
        }
        open.extend(read.into_iter().flatten());
    }
    Ok(open)
}
