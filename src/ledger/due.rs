//! The due queue as the ledger stores it: the days and seconds (`delayed/due/<day>/<second>/
//! <shard>/<id>`) with pending markers, counting and reading them, removing a past bucket once
//! empty; and the submission runs claimed and not yet finished (`open/<job>`).
//!
//! Owns: those reads and removals, with foreign names logged by path and skipped.
//! Must not: claim or decide anything (the fire machine does, through the ledger's claims).

use super::Ledger;
use super::records::parsed_sorted;
use super::submissions::{SubmissionError, children, zk};
use crate::delayed::submission::{DueBucket, Shard, SubmissionId};
use crate::ids::JobName;
use crate::layout::DelayedPaths;
use crate::tally::WriteKind;
use crate::zk::Fault;

/// The days that have buckets, oldest first (foreign names logged and skipped).
///
/// # Errors
/// The listing failed; no `due` node means no days.
pub async fn days(client: &Ledger, paths: &DelayedPaths) -> Result<Vec<i64>, SubmissionError> {
    let mut days: Vec<i64> = children(client, &paths.due)
        .await?
        .iter()
        .filter_map(|name| {
            let day = DueBucket::parse(name, "0").map(|bucket| bucket.day);
            if day.is_none() {
                tracing::warn!(
                    path = format!("{}/{name}", paths.due),
                    "not a day bucket; skipped"
                );
            }
            day
        })
        .collect();
    days.sort_unstable();
    Ok(days)
}

/// The buckets of `day`, oldest first (foreign names logged and skipped).
///
/// # Errors
/// The listing failed; a missing day has no buckets.
pub async fn buckets(
    client: &Ledger,
    paths: &DelayedPaths,
    day: i64,
) -> Result<Vec<DueBucket>, SubmissionError> {
    let parent = paths.due_day(day);
    let names = children(client, &parent).await?;
    let day_name = day.to_string();
    let bucket = |name: &str| DueBucket::parse(&day_name, name);
    Ok(parsed_sorted(&parent, &names, "due bucket", false, bucket))
}

/// Pending rows counted in the PostgreSQL store per due bucket the caller would read.
const STORE_ROWS_PER_BUCKET: usize = 200;

/// How many submissions are pending, counted bucket by bucket from the oldest: per bucket its
/// descendants less its shard nodes (two requests, not a read of every marker). Stops after
/// `max_buckets`; `false` then: the count is a lower bound.
///
/// # Errors
/// A failed request.
pub async fn count_pending(
    client: &Ledger,
    paths: &DelayedPaths,
    max_buckets: usize,
) -> Result<(usize, bool), SubmissionError> {
    if let Some(store) = client.delayed_store() {
        // A bucket holds a few submissions: counted up to as many rows.
        let cap = max_buckets.saturating_mul(STORE_ROWS_PER_BUCKET);
        return super::postgres::submissions::count_pending(store, cap).await;
    }
    let mut counted = 0;
    let mut buckets_read = 0;
    for day in days(client, paths).await? {
        for bucket in buckets(client, paths, day).await? {
            if buckets_read == max_buckets {
                return Ok((counted, false));
            }
            buckets_read += 1;
            let path = paths.due_bucket(bucket);
            let (below, shards) = tokio::join!(
                client.zk().count_descendants(&path),
                client.zk().get_children(&path)
            );
            match (below, shards) {
                (Ok(below), Ok((_, stat))) => {
                    let shards = usize::try_from(stat.num_children).unwrap_or(0);
                    counted += below.saturating_sub(shards);
                }
                // Removed meanwhile (empty, past).
                (Err(Fault::NoNode), _) | (_, Err(Fault::NoNode)) => {}
                (Err(source), _) | (_, Err(source)) => return Err(zk(&path, source)),
            }
        }
    }
    Ok((counted, true))
}

/// The ids pending in `bucket`, with the job where the marker names it, shard by shard: one
/// `getChildren` per shard, each bounded by the shard split (DESIGN.md "ZooKeeper layout").
///
/// # Errors
/// A listing failed; a missing bucket holds nothing.
pub async fn pending_in(
    client: &Ledger,
    paths: &DelayedPaths,
    bucket: DueBucket,
) -> Result<Vec<(SubmissionId, Option<JobName>)>, SubmissionError> {
    let shard_names = children(client, &paths.due_bucket(bucket)).await?;
    pending_in_shards(client, paths, bucket, shard_names).await
}

/// The shard names of each of `buckets`, `None` for a bucket that does not exist: every
/// listing is sent before the first answer is awaited, so a minute of seconds costs one round
/// trip.
///
/// # Errors
/// A listing failed.
pub async fn shards_of_each(
    client: &Ledger,
    paths: &DelayedPaths,
    buckets: &[DueBucket],
) -> Result<Vec<Option<Vec<String>>>, SubmissionError> {
    let bucket_paths: Vec<String> = buckets.iter().map(|b| paths.due_bucket(*b)).collect();
    let listings: Vec<_> = bucket_paths
        .iter()
        .map(|path| client.zk().list_children(path))
        .collect();
    let mut shards = Vec::with_capacity(listings.len());
    for (path, listing) in bucket_paths.iter().zip(listings) {
        match listing.await {
            Ok(names) => shards.push(Some(names)),
            Err(Fault::NoNode) => shards.push(None),
            Err(source) => return Err(zk(path, source)),
        }
    }
    Ok(shards)
}

/// The ids pending in the shards `shard_names` of `bucket` (as [`pending_in`], its listing
/// done).
///
/// # Errors
/// A listing failed.
pub async fn pending_in_shards(
    client: &Ledger,
    paths: &DelayedPaths,
    bucket: DueBucket,
    shard_names: Vec<String>,
) -> Result<Vec<(SubmissionId, Option<JobName>)>, SubmissionError> {
    let parent = paths.due_bucket(bucket);
    let mut shards = Vec::new();
    for name in shard_names {
        match Shard::parse(&name) {
            Some(shard) => shards.push((shard, paths.due_shard(bucket, shard))),
            None => tracing::warn!(path = format!("{parent}/{name}"), "not a shard; skipped"),
        }
    }
    // Every shard's listing is sent before the first answer is awaited: up to 256 requests in
    // one round trip, not 256 round trips queued behind the session's writes.
    let listings: Vec<_> = shards
        .iter()
        .map(|(_, shard_path)| client.zk().list_children(shard_path))
        .collect();
    let mut ids = Vec::new();
    for ((shard, shard_path), listing) in shards.iter().zip(listings) {
        let names = match listing.await {
            Ok(names) => names,
            Err(Fault::NoNode) => Vec::new(),
            Err(source) => return Err(zk(shard_path, source)),
        };
        for name in names {
            match crate::layout::parse_marker_name(&name) {
                Some((id, job)) if id.shard() == *shard => ids.push((id, job)),
                Some(_) => {
                    tracing::warn!(
                        path = format!("{shard_path}/{name}"),
                        "submission in the wrong shard; skipped"
                    )
                }
                None => {
                    tracing::warn!(
                        path = format!("{shard_path}/{name}"),
                        "not a pending marker (<id> or <id>~<job>); skipped"
                    )
                }
            }
        }
    }
    Ok(ids)
}

/// `job`'s submission runs claimed and not yet finished (`open/<job>`), as (due, id), in
/// order; foreign names are logged with their path and skipped.
///
/// # Errors
/// The listing failed; a job with none open has none.
pub async fn open_runs(
    client: &Ledger,
    paths: &DelayedPaths,
    job: &JobName,
) -> Result<Vec<(i64, SubmissionId)>, SubmissionError> {
    let parent = paths.open_of(job);
    let names = children(client, &parent).await?;
    let open = |name: &str| {
        let name = crate::layout::RecordName::parse(name)?;
        Some((name.scheduled_unix_ms, name.submission?))
    };
    Ok(parsed_sorted(
        &parent,
        &names,
        "open submission run",
        false,
        open,
    ))
}

/// Removes an empty past bucket: its empty shards, then itself. A node that is not empty (a
/// submission kept for a job that is away, or one submitted a moment ago) stays.
pub async fn remove_bucket(client: &Ledger, paths: &DelayedPaths, bucket: DueBucket) {
    let parent = paths.due_bucket(bucket);
    let Ok(shards) = client.zk().list_children(&parent).await else {
        return;
    };
    for shard in shards {
        let _ = client
            .zk()
            .delete(WriteKind::Due, &format!("{parent}/{shard}"), None)
            .await;
    }
    let _ = client.zk().delete(WriteKind::Due, &parent, None).await;
}

/// Removes a past day once none of its buckets is left; a day that still holds one stays.
pub async fn remove_day(client: &Ledger, paths: &DelayedPaths, day: i64) {
    let _ = client
        .zk()
        .delete(WriteKind::Due, &paths.due_day(day), None)
        .await;
}
