//! Pruning a job's old run records, and what stays of a pruned submission: a tombstone in the
//! id index, listed for forgetting in the minute its `dedup_window` ends (docs/DELAYED.md
//! "Idempotent ids").
//!
//! Owns: which records go (beyond the newest `keep`; never a run still open or a retry still
//! promised) and, for each submission's record, whether its request is deleted (its window has
//! passed) or turned into a tombstone, in the same multi-op as the record's delete.
//! Must not: decide when to prune (the fire machine) or sweep the forget lists (`forget`).

use super::Ledger;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::error::ClaimError;
use super::records::record_names;
use crate::delayed::submission::{self, ForgetBucket, FormatError, Stored, SubmissionId};
use crate::ids::JobName;
use crate::layout::{Keep, LedgerPaths, RecordName};
use crate::run::RecordError;
use crate::run::RunRecord;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, MultiFault, Stat};

/// Deleted at most per call, so that pruning a long backlog never floods the ensemble.
pub const PRUNE_BATCH: usize = 1000;
/// Records deleted per multi-op: one transaction in ZooKeeper's log for all of them.
const PRUNE_MULTI: usize = 50;

/// How long a pruned submission's id stays remembered, and the clock to count it with.
#[derive(Debug, Clone, Copy)]
pub struct Remember {
    pub now_unix_ms: i64,
    /// The job's `dedup_window`: counted from the run's end.
    pub window: Duration,
}

/// What happens to one pruned record's request.
enum RequestFate {
    /// A tick's record, or a submission whose request is already gone or a tombstone.
    None,
    /// The window has passed: the id is free.
    Delete(String),
    /// Written over with its tombstone (at the version read), and listed in `bucket`.
    Tombstone {
        path: String,
        version: i32,
        data: Vec<u8>,
        id: SubmissionId,
        bucket: ForgetBucket,
    },
}

/// One record to prune: its path, the version read (submissions'), and its request's fate.
struct Doomed {
    record: String,
    version: Option<i32>,
    request: RequestFate,
}

/// Deletes `job`'s oldest records beyond what `keep` keeps, at most [`PRUNE_BATCH`] per call,
/// `PRUNE_MULTI` per transaction. A submission's record takes its request along: deleted when
/// the run ended more than `remember.window` ago, otherwise made a tombstone that answers a
/// resubmit of its id until then. A submission's run still open, or whose record promises a
/// retry, is never pruned (its next owner needs the record). Foreign child names are left alone
/// (and logged by `history`). Returns how many records were deleted.
///
/// # Errors
/// Listing failed; a record that vanished or changed meanwhile is not an error (the next prune
/// looks again).
pub async fn prune(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
    keep: Keep,
    remember: Remember,
) -> Result<usize, ClaimError> {
    let in_store = match (client.delayed_store(), keep) {
        // The delayed store keeps its submissions' runs apart: `keep` of them there too.
        (Some(store), Keep::Records(kept)) => {
            let kept = i64::try_from(kept).unwrap_or(i64::MAX);
            let batch = i64::try_from(PRUNE_BATCH).unwrap_or(i64::MAX);
            let pruned = store.prune_history(job, kept, remember, batch).await;
            let pruned = pruned.map_err(|source| ClaimError::Store {
                path: format!("postgres:{}", store.lock_group()),
                source: std::sync::Arc::new(source),
            })?;
            usize::try_from(pruned.records).unwrap_or(usize::MAX)
        }
        _ => 0,
    };
    let names = record_names(client, paths, job).await?;
    let excess = keep.excess(&names);
    if excess == 0 {
        return Ok(in_store);
    }
    let oldest: Vec<RecordName> = names.into_iter().take(excess.min(PRUNE_BATCH)).collect();
    let mut made = HashSet::new();
    let mut deleted = 0;
    // Read and deleted a multi-op's worth at a time: the session's requests are served in order,
    // and a thousand reads sent at once made every claim sent after them wait for them all (the
    // default HTTP path's p99 at 1000 due/s, docs/BENCHMARKS.md).
    for slice in oldest.chunks(PRUNE_MULTI) {
        let group = &doomed(client, paths, job, slice, remember).await?;
        if group.is_empty() {
            continue;
        }
        make_forget_buckets(client, paths, group, &mut made).await?;
        if commit(client, paths, group).await.is_ok() {
            deleted += group.len();
            continue;
        }
        // Something in the group changed or is gone: one record at a time.
        for one in group {
            match commit(client, paths, std::slice::from_ref(one)).await {
                Ok(()) => deleted += 1,
                Err(err) => {
                    tracing::debug!(path = one.record, error = %err, "record not pruned; the next prune looks again")
                }
            }
        }
    }
    Ok(deleted + in_store)
}

/// Reads what pruning `oldest` needs: each submission's record (to keep open runs and promised
/// retries, and for its end) and its request (for the tombstone), all requests out at once.
async fn doomed(
    client: &Ledger,
    paths: &LedgerPaths,
    job: &JobName,
    oldest: &[RecordName],
    remember: Remember,
) -> Result<Vec<Doomed>, ClaimError> {
    let path_of = |name: &RecordName| format!("{}/{}", paths.job_runs(job), name.node_name());
    let reads: Vec<_> = oldest
        .iter()
        .map(|name| {
            name.submission.as_ref().map(|id| {
                let record = client.zk().get_data(&path_of(name));
                let request = client.zk().get_data(&paths.delayed.submission(id));
                async move { (record.await, request.await) }
            })
        })
        .collect();
    let mut doomed = Vec::new();
    for (name, read) in oldest.iter().zip(reads) {
        let record = path_of(name);
        let (Some(read), Some(id)) = (read, &name.submission) else {
            doomed.push(Doomed {
                record,
                version: None,
                request: RequestFate::None,
            });
            continue;
        };
        let (record_read, request_read) = read.await;
        let (data, stat) = match record_read {
            Ok(read) => read,
            Err(Fault::NoNode) => continue,
            Err(source) => {
                return Err(ClaimError::Zk {
                    path: record,
                    source,
                });
            }
        };
        let run = match RunRecord::parse(&data) {
            Ok(run) => Some(run),
            // Its run may still be open for the zkcron that wrote it: kept.
            Err(RecordError::Newer { format, .. }) => {
                crate::formats::newer_found("run record", format, &record);
                continue;
            }
            Err(RecordError::Unreadable(_)) => None,
        };
        let Some(run) = run else {
            tracing::warn!(path = record, "unreadable run record; pruned as it is");
            doomed.push(Doomed {
                record,
                version: Some(stat.version),
                request: RequestFate::None,
            });
            continue;
        };
        if !run.status.is_final() || run.retry_at_unix_ms.is_some() {
            continue;
        }
        let request = request_fate(paths, id, &run, request_read, remember);
        doomed.push(Doomed {
            record,
            version: Some(stat.version),
            request,
        });
    }
    Ok(doomed)
}

/// Whether a finished submission's request is deleted or becomes a tombstone.
fn request_fate(
    paths: &LedgerPaths,
    id: &SubmissionId,
    run: &RunRecord,
    read: Result<(Vec<u8>, Stat), Fault>,
    remember: Remember,
) -> RequestFate {
    let path = paths.delayed.submission(id);
    if matches!(read, Err(Fault::NoNode)) {
        // Gone already: the record goes alone (a delete of it would fail the multi-op forever).
        return RequestFate::None;
    }
    let ended = run.finished_unix_ms.unwrap_or(run.claimed_unix_ms);
    let window_ms = i64::try_from(remember.window.as_millis()).unwrap_or(i64::MAX);
    let until = ended.saturating_add(window_ms);
    if until <= remember.now_unix_ms {
        return RequestFate::Delete(path);
    }
    let (data, version) = match read {
        Ok((data, stat)) => (data, stat.version),
        Err(err) => {
            tracing::debug!(path, error = %err, "submission not read; its id is freed with its record");
            return RequestFate::Delete(path);
        }
    };
    match Stored::parse(&data) {
        // A generated id: nobody can send it again.
        Ok(Stored::Request(submission)) if submission.anonymous => RequestFate::Delete(path),
        // From the stored bytes, not the parsed request: what a newer zkcron added stays.
        Ok(Stored::Request(_)) => match submission::tombstone_of(&data, until) {
            Ok(data) => RequestFate::Tombstone {
                data,
                path,
                version,
                id: id.clone(),
                bucket: ForgetBucket::of(until),
            },
            Err(err) => {
                tracing::warn!(path, error = %err, "unreadable submission; its id is freed with its record");
                RequestFate::Delete(path)
            }
        },
        Ok(Stored::Tombstone(_)) => RequestFate::None,
        // A newer zkcron's submission: left for it, never taken for garbage.
        Err(FormatError::Version(format)) => {
            crate::formats::newer_found("submission", format, &path);
            RequestFate::None
        }
        Err(err) => {
            tracing::warn!(path, error = %err, "unreadable submission; its id is freed with its record");
            RequestFate::Delete(path)
        }
    }
}

/// Makes the forget buckets `group` lists its ids in (each once per prune).
async fn make_forget_buckets(
    client: &Ledger,
    paths: &LedgerPaths,
    group: &[Doomed],
    made: &mut HashSet<ForgetBucket>,
) -> Result<(), ClaimError> {
    for doomed in group {
        if let RequestFate::Tombstone { bucket, .. } = &doomed.request {
            if made.insert(*bucket) {
                let path = paths.delayed.forget_minute(*bucket);
                client
                    .zk()
                    .ensure_persistent(&path)
                    .await
                    .map_err(ClaimError::on(&path))?;
            }
        }
    }
    Ok(())
}

/// One multi-op for `group`: each record's delete with its request's delete or tombstone, and
/// one forget list per bucket naming the group's tombstones in it.
async fn commit(client: &Ledger, paths: &LedgerPaths, group: &[Doomed]) -> Result<(), MultiFault> {
    let mut lists: BTreeMap<ForgetBucket, Vec<&str>> = BTreeMap::new();
    let mut multi = client.zk().multi(WriteKind::Prune);
    for doomed in group {
        let built = multi
            .add_delete(&doomed.record, doomed.version)
            .and_then(|()| match &doomed.request {
                RequestFate::None => Ok(()),
                RequestFate::Delete(path) => multi.add_delete(path, None),
                RequestFate::Tombstone {
                    path,
                    version,
                    data,
                    id,
                    bucket,
                } => {
                    lists.entry(*bucket).or_default().push(id.as_str());
                    multi.add_set_data(path, data, Some(*version))
                }
            });
        built.map_err(MultiFault::Request)?;
    }
    for (bucket, ids) in lists {
        multi
            .add_create(
                &paths.delayed.forget_list(bucket),
                ids.join("\n").as_bytes(),
                Mode::PersistentSequential,
            )
            .map_err(MultiFault::Request)?;
    }
    multi.commit().await.map(|_| ())
}
