//! Reading run records back: one record, a job's history, its ticks, the names under its
//! `runs/<job>`, and who holds its `running/<job>` guard.
//!
//! Owns: the reads, with foreign names and unreadable records logged by path and skipped.
//! Must not: write.

use super::{Ledger, RequestFailed};
use std::collections::HashSet;

use super::error::ClaimError;
use crate::ids::JobName;
use crate::layout::{LedgerPaths, RecordName};
use crate::run::{RecordError, RunRecord};
use crate::zk::Fault;

/// Reads a record to show it (who holds a claimed tick, `delayed show`, `history`): one of a
/// newer format as far as it reads.
pub async fn read_record(client: &Ledger, path: &str) -> Option<RunRecord> {
    let (data, _) = client.zk().get_data(path).await.ok()?;
    RunRecord::parse_to_show(&data)
        .inspect_err(|err| tracing::warn!(path, error = %err, "unreadable run record"))
        .ok()
}

/// A stored run record read to act on (resume, rewrite, prune).
#[derive(Debug)]
pub enum StoredRecord {
    /// Ours to act on, with its znode version.
    Record(Box<RunRecord>, i32),
    /// Written by a newer zkcron in a format we do not know: it exists, and is left as it is
    /// (said by `formats::newer_found`).
    Newer,
    /// Gone, or not a run record (logged with its path).
    Absent,
}

/// Reads the record at `path` to act on it: [`StoredRecord`].
///
/// # Errors
/// The read failed for another reason than the node being absent.
pub async fn read_to_act(client: &Ledger, path: &str) -> Result<StoredRecord, Fault> {
    let (data, stat) = match client.zk().get_data(path).await {
        Ok(read) => read,
        Err(Fault::NoNode) => return Ok(StoredRecord::Absent),
        Err(source) => return Err(source),
    };
    Ok(match RunRecord::parse(&data) {
        Ok(record) => StoredRecord::Record(Box::new(record), stat.version),
        Err(RecordError::Newer { format, .. }) => {
            crate::formats::newer_found("run record", format, path);
            StoredRecord::Newer
        }
        Err(err) => {
            tracing::warn!(path, error = %err, "unreadable run record; skipped");
            StoredRecord::Absent
        }
    })
}

/// The newest `limit` records of `job` (ticks and submissions), newest first. Foreign child
/// names and unreadable records are logged with their path and skipped.
///
/// # Errors
/// Listing the job's records failed (a missing job means no records, not an error).
pub async fn history(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
    limit: usize,
) -> Result<Vec<RunRecord>, ClaimError> {
    let mut names = record_names(client, paths, job).await?;
    names.reverse();
    let mut records = Vec::new();
    for name in names {
        if records.len() == limit {
            break;
        }
        let path = format!("{}/{}", paths.job_runs(job), name.node_name());
        if let Some(record) = read_record(client, &path).await {
            records.push(record);
        }
    }
    if let Some(store) = client.delayed_store() {
        // The submissions' runs kept in PostgreSQL, among the ticks' by their instants.
        let kept = super::postgres::submissions::history_of(store, job, limit).await;
        let kept = kept.map_err(|source| ClaimError::Store {
            path: format!("postgres:{}", store.lock_group()),
            source: std::sync::Arc::new(source),
        })?;
        records.extend(kept);
        records.sort_by_key(|record| std::cmp::Reverse(record.scheduled_unix_ms));
        records.truncate(limit);
    }
    Ok(records)
}

/// The names of all `job`'s records, ticks and submissions, oldest first (foreign names skipped).
///
/// # Errors
/// Listing failed; a job without records has none.
pub async fn record_names(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
) -> Result<Vec<RecordName>, ClaimError> {
    let parent = paths.job_runs(job);
    let children = client
        .zk()
        .children_if_there(&parent)
        .await
        .map_err(ClaimError::on(&parent))?;
    // Said at debug, not warn: the owner lists a job's records after every run.
    let quiet = true;
    Ok(parsed_sorted(
        &parent,
        &children,
        "run record name",
        quiet,
        RecordName::parse,
    ))
}

/// A stored record with its znode version; `None` when absent or unreadable (logged).
pub async fn read_versioned(client: &Ledger, path: &str) -> Option<(RunRecord, i32)> {
    read_versioned_checked(client, path).await.ok().flatten()
}

/// Like [`read_versioned`], telling a failed request (`Err`) from a record that is gone or is
/// not ours to act on (`Ok(None)`, logged).
///
/// # Errors
/// The read failed for another reason than the node being absent.
pub async fn read_versioned_checked(
    client: &Ledger,
    path: &str,
) -> Result<Option<(RunRecord, i32)>, RequestFailed> {
    let read = read_to_act(client, path)
        .await
        .map_err(|source| RequestFailed {
            path: path.to_owned(),
            source,
        })?;
    Ok(match read {
        StoredRecord::Record(record, version) => Some((*record, version)),
        StoredRecord::Newer | StoredRecord::Absent => None,
    })
}

/// The run id written into `job`'s `running/<job>` guard, if a guard exists.
pub async fn guard_holder(client: &Ledger, paths: &LedgerPaths, job: &JobName) -> Option<String> {
    let (data, _) = client.zk().get_data(&paths.running(job)).await.ok()?;
    Some(String::from_utf8_lossy(&data).into_owned())
}

/// The jobs whose `running/<job>` guard is held: a run is alive somewhere.
pub async fn running_jobs(client: &Ledger, paths: &LedgerPaths) -> HashSet<JobName> {
    client
        .zk()
        .list_children(&paths.running)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(JobName::new)
        .collect()
}

/// The jobs with a `runs/<job>` node under `runs`, for a reader of the whole ledger (the
/// console's index).
///
/// # Errors
/// The listing failed; no `runs` node means no jobs.
pub async fn jobs_with_records(client: &Ledger, runs: &str) -> Result<Vec<JobName>, Fault> {
    let jobs = client.zk().children_if_there(runs).await?;
    Ok(jobs.into_iter().map(JobName::new).collect())
}

/// The records of `jobs` under `runs`, as (job, name, path): every listing sent at once (the
/// client sends a request when it is made), so a batch costs one round trip. A listing that
/// fails counts as empty; foreign names are left out.
pub async fn record_names_of(
    client: &Ledger,
    runs: &str,
    jobs: &[JobName],
) -> Vec<(JobName, Option<RecordName>, String)> {
    let listings: Vec<_> = jobs
        .iter()
        .map(|job| client.zk().list_children(&format!("{runs}/{job}")))
        .collect();
    let mut wanted = Vec::new();
    for (job, listing) in jobs.iter().zip(listings) {
        for child in listing.await.unwrap_or_default() {
            if let Some(name) = RecordName::parse(&child) {
                let path = format!("{runs}/{job}/{child}");
                wanted.push((job.clone(), Some(name), path));
            }
        }
    }
    wanted
}

/// Reads the records at the given paths, `in_flight` at a time; `None` where the node is gone,
/// not to be read (no name), or unreadable (logged with its path).
pub async fn read_many(
    client: &Ledger,
    wanted: Vec<(JobName, Option<RecordName>, String)>,
    in_flight: usize,
) -> Vec<(JobName, Option<RecordName>, Option<RunRecord>)> {
    read_many_stamped(client, wanted, in_flight)
        .await
        .into_iter()
        .map(|(job, name, _, read)| (job, name, read.map(|(record, _)| record)))
        .collect()
}

/// Like [`read_many`], with each path and the change each record was read at: the zxid of its
/// latest write and that write's time by the servers' clock (the event stream's cursor).
pub async fn read_many_stamped(
    client: &Ledger,
    wanted: Vec<(JobName, Option<RecordName>, String)>,
    in_flight: usize,
) -> Vec<(
    JobName,
    Option<RecordName>,
    String,
    Option<(RunRecord, Stamp)>,
)> {
    let mut read = Vec::with_capacity(wanted.len());
    let mut wanted = wanted.into_iter().peekable();
    while wanted.peek().is_some() {
        let chunk: Vec<_> = wanted.by_ref().take(in_flight.max(1)).collect();
        let pending: Vec<_> = chunk
            .iter()
            .map(|(_, name, path)| name.as_ref().map(|_| client.zk().get_data(path)))
            .collect();
        for ((job, name, path), answer) in chunk.into_iter().zip(pending) {
            let record = match answer {
                Some(answer) => match answer.await {
                    Ok((data, stat)) => RunRecord::parse_to_show(&data)
                        .inspect_err(|err| {
                            tracing::warn!(path, error = %err, "unreadable run record");
                        })
                        .ok()
                        .map(|record| (record, Stamp::written(&stat))),
                    Err(_) => None,
                },
                None => None,
            };
            read.push((job, name, path, record));
        }
    }
    read
}

/// The change a read saw: its zxid, and when it was made by the servers' clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub zxid: i64,
    pub at_unix_ms: i64,
    /// The node's version: how many times it was written after its creation.
    pub version: i32,
}

impl Stamp {
    /// The node's latest write.
    pub(super) fn written(stat: &crate::zk::Stat) -> Self {
        Self {
            zxid: stat.mzxid,
            at_unix_ms: stat.mtime,
            version: stat.version,
        }
    }
}

/// The `names` under `parent` that `parse` reads, in order. A foreign name (an operator's node,
/// garbage) is logged with its path and skipped, at debug when `quiet` (a listing made so often
/// that a warning would repeat).
pub(super) fn parsed_sorted<T: Ord>(
    parent: &str,
    names: &[String],
    what: &str,
    quiet: bool,
    parse: impl Fn(&str) -> Option<T>,
) -> Vec<T> {
    let mut parsed: Vec<T> = names
        .iter()
        .filter_map(|name| {
            let read = parse(name);
            if read.is_none() {
                let path = format!("{parent}/{name}");
                if quiet {
                    tracing::debug!(path, "not a {what}; skipped");
                } else {
                    tracing::warn!(path, "not a {what}; skipped");
                }
            }
            read
        })
        .collect();
    parsed.sort_unstable();
    parsed
}
