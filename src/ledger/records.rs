//! Reading run records back: one record, a job's history, its ticks, the names under its
//! `runs/<job>`, and who holds its `running/<job>` guard.
//!
//! Owns: the reads, with foreign names and unreadable records logged by path and skipped.
//! Must not: write.

use std::collections::HashSet;

use zookeeper_client::{Client, Error as ZkErr};

use super::error::ClaimError;
use crate::ids::JobName;
use crate::layout::{LedgerPaths, RecordName};
use crate::run::RunRecord;

/// Reads who holds a claimed tick, for the log line of a node whose claim lost.
pub async fn read_record(client: &Client, path: &str) -> Option<RunRecord> {
    let (data, _) = client.get_data(path).await.ok()?;
    RunRecord::parse(&data)
        .inspect_err(|err| tracing::warn!(path, error = %err, "unreadable run record"))
        .ok()
}

/// The newest `limit` records of `job` (ticks and submissions), newest first. Foreign child
/// names and unreadable records are logged with their path and skipped.
///
/// # Errors
/// Listing the job's records failed (a missing job means no records, not an error).
pub async fn history(
    client: &Client,
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
    Ok(records)
}

/// The scheduled instants of `job`'s tick records (not its submissions'), oldest first.
///
/// # Errors
/// Listing failed; a job without records has none.
pub async fn ticks(
    client: &Client,
    paths: &LedgerPaths,
    job: &JobName,
) -> Result<Vec<i64>, ClaimError> {
    Ok(record_names(client, paths, job)
        .await?
        .into_iter()
        .filter(|name| name.submission.is_none())
        .map(|name| name.scheduled_unix_ms)
        .collect())
}

/// The names of all `job`'s records, ticks and submissions, oldest first (foreign names skipped).
///
/// # Errors
/// Listing failed; a job without records has none.
pub async fn record_names(
    client: &Client,
    paths: &LedgerPaths,
    job: &JobName,
) -> Result<Vec<RecordName>, ClaimError> {
    let parent = paths.job_runs(job);
    let children = match client.list_children(&parent).await {
        Ok(children) => children,
        Err(ZkErr::NoNode) => Vec::new(),
        Err(source) => {
            return Err(ClaimError::Zk {
                path: parent,
                source,
            });
        }
    };
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
pub async fn read_versioned(client: &Client, path: &str) -> Option<(RunRecord, i32)> {
    read_versioned_checked(client, path).await.ok().flatten()
}

/// Like [`read_versioned`], telling a failed request (`Err`) from a record that is gone or is
/// not ours (`Ok(None)`, logged).
///
/// # Errors
/// The read failed for another reason than the node being absent.
pub async fn read_versioned_checked(
    client: &Client,
    path: &str,
) -> Result<Option<(RunRecord, i32)>, crate::zk::ZkError> {
    let (data, stat) = match client.get_data(path).await {
        Ok(read) => read,
        Err(ZkErr::NoNode) => return Ok(None),
        Err(source) => {
            return Err(crate::zk::ZkError::Request {
                path: path.to_owned(),
                source,
            });
        }
    };
    let record = RunRecord::parse(&data)
        .inspect_err(|err| tracing::warn!(path, error = %err, "unreadable run record; skipped"))
        .ok();
    Ok(record.map(|record| (record, stat.version)))
}

/// The run id written into `job`'s `running/<job>` guard, if a guard exists.
pub async fn guard_holder(client: &Client, paths: &LedgerPaths, job: &JobName) -> Option<String> {
    let (data, _) = client.get_data(&paths.running(job)).await.ok()?;
    Some(String::from_utf8_lossy(&data).into_owned())
}

/// The jobs whose `running/<job>` guard is held: a run is alive somewhere.
pub async fn running_jobs(client: &Client, paths: &LedgerPaths) -> HashSet<JobName> {
    client
        .list_children(&paths.running)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(JobName::new)
        .collect()
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
