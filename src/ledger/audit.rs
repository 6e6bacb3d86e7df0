//! The ledger's audit use cases: writing an operator action's entry, reading the trail, pruning
//! it by day.
//!
//! An entry is one sequential znode `audit/<day>/e-<seq>` (`layout::AuditPaths`); a day's
//! bucket goes whole once it is older than `[audit] keep`, its entries deleted in multi-ops of
//! [`PRUNE_BATCH`], never one request per entry.
//!
//! Owns: every ZooKeeper request on `audit/`.
//! Must not: decide what an entry says or when one is written (`command` does).

use super::Ledger;
use std::time::Duration;

use crate::audit::AuditEntry;
use crate::layout::AuditPaths;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode};

/// Deletes of one prune's multi-op.
pub const PRUNE_BATCH: usize = 500;

const MS_PER_DAY: i64 = 24 * 3600 * 1000;

/// Why the trail could not be read or pruned.
#[derive(Debug, thiserror::Error)]
#[error("zookeeper request on {path} failed")]
pub struct AuditError {
    path: String,
    #[source]
    source: Fault,
}

fn failed(path: &str) -> impl FnOnce(Fault) -> AuditError + '_ {
    move |source| AuditError {
        path: path.to_owned(),
        source,
    }
}

/// Where a session writes the trail: its ZooKeeper session and the trail's paths.
#[derive(Debug)]
pub struct Trail {
    client: Ledger,
    paths: AuditPaths,
}

impl Trail {
    /// The trail of `config`'s lock group, written on `client`.
    pub fn new(client: Ledger, config: &crate::config::Config) -> Self {
        Self {
            client,
            paths: AuditPaths::new(&config.lock.paths()),
        }
    }

    /// Records `entry` (see [`record`]).
    pub async fn record(&self, entry: &AuditEntry) {
        record(&self.client, &self.paths, entry).await;
    }
}

/// Records `entry`: one create, its day's bucket made first when it is the day's first entry.
/// The action is done whatever happens here: a failure is logged, not returned.
pub async fn record(client: &Ledger, paths: &AuditPaths, entry: &AuditEntry) {
    let day = entry.at_unix_ms.div_euclid(MS_PER_DAY);
    // A plain struct of strings and numbers always serialises.
    let data = serde_json::to_vec(entry).unwrap_or_default();
    for _ in 0..2 {
        match client
            .zk()
            .create(
                WriteKind::Control,
                &paths.entry(day),
                &data,
                Mode::PersistentSequential,
            )
            .await
        {
            Ok(_) => return,
            Err(Fault::NoNode) => {
                let bucket = paths.day(day);
                if let Err(err) = client.zk().ensure_persistent(&bucket).await {
                    tracing::warn!(path = bucket, error = %crate::report::error_chain(&err), action = entry.action, "audit entry not recorded");
                    return;
                }
            }
            Err(err) => {
                tracing::warn!(path = paths.dir, error = %err, action = entry.action, by = entry.by, "audit entry not recorded");
                return;
            }
        }
    }
    // Made and gone again before the create: a prune of that day raced it.
    tracing::warn!(
        path = paths.day(day),
        action = entry.action,
        by = entry.by,
        "audit entry not recorded: its day's bucket went as it was made"
    );
}

/// The entries at or after `since_unix_ms`, oldest first. Foreign data is logged and skipped.
///
/// # Errors
/// A listing or read failed.
pub async fn read(
    client: &Ledger,
    paths: &AuditPaths,
    since_unix_ms: i64,
) -> Result<Vec<AuditEntry>, AuditError> {
    let first_day = since_unix_ms.div_euclid(MS_PER_DAY);
    let mut entries = Vec::new();
    for day in days(client, paths).await? {
        if day < first_day {
            continue;
        }
        let bucket = paths.day(day);
        let names = entries_of(client, &bucket).await?;
        // All reads of the day out at once: a request is sent when it is made.
        let reads: Vec<_> = names
            .iter()
            .map(|name| {
                let path = format!("{bucket}/{name}");
                let read = client.zk().get_data(&path);
                (path, read)
            })
            .collect();
        for (path, read) in reads {
            match read.await {
                Ok((data, _)) => match serde_json::from_slice::<AuditEntry>(&data) {
                    Ok(entry) if entry.at_unix_ms >= since_unix_ms => entries.push(entry),
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(path, error = %err, "unreadable audit entry; skipped")
                    }
                },
                Err(Fault::NoNode) => {}
                Err(source) => return Err(failed(&path)(source)),
            }
        }
    }
    entries.sort_by_key(|entry| entry.at_unix_ms);
    Ok(entries)
}

/// Deletes every day's bucket that ended more than `keep` before `now_unix_ms`, in multi-ops of
/// [`PRUNE_BATCH`] deletes; returns how many entries went.
///
/// # Errors
/// A listing or delete failed; what was deleted stays deleted.
pub async fn prune(
    client: &Ledger,
    paths: &AuditPaths,
    keep: Duration,
    now_unix_ms: i64,
) -> Result<usize, AuditError> {
    let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
    let mut pruned = 0;
    for day in days(client, paths).await? {
        let day_ends = (day + 1).saturating_mul(MS_PER_DAY);
        if day_ends.saturating_add(keep_ms) > now_unix_ms {
            continue;
        }
        let bucket = paths.day(day);
        let names = entries_of(client, &bucket).await?;
        for batch in names.chunks(PRUNE_BATCH) {
            let mut multi = client.zk().multi(WriteKind::Prune);
            for name in batch {
                multi
                    .add_delete(&format!("{bucket}/{name}"), None)
                    .map_err(failed(&bucket))?;
            }
            match multi.commit().await {
                Ok(_) => pruned += batch.len(),
                // One gone meanwhile (another owner's prune): the next sweep finishes the day.
                Err(err) => {
                    tracing::debug!(path = bucket, error = %err, "audit entries not pruned; the next sweep tries again");
                    return Ok(pruned);
                }
            }
        }
        match client.zk().delete(WriteKind::Prune, &bucket, None).await {
            Ok(()) | Err(Fault::NoNode | Fault::NotEmpty) => {}
            Err(source) => return Err(failed(&bucket)(source)),
        }
    }
    Ok(pruned)
}

/// The entries' names in a day's `bucket`; none when it is gone.
async fn entries_of(client: &Ledger, bucket: &str) -> Result<Vec<String>, AuditError> {
    match client.zk().list_children(bucket).await {
        Ok(names) => Ok(names),
        Err(Fault::NoNode) => Ok(Vec::new()),
        Err(source) => Err(failed(bucket)(source)),
    }
}

/// The days that have a bucket, oldest first (foreign names skipped).
async fn days(client: &Ledger, paths: &AuditPaths) -> Result<Vec<i64>, AuditError> {
    let names = match client.zk().list_children(&paths.dir).await {
        Ok(names) => names,
        Err(Fault::NoNode) => return Ok(Vec::new()),
        Err(source) => return Err(failed(&paths.dir)(source)),
    };
    let mut days: Vec<i64> = names.iter().filter_map(|name| name.parse().ok()).collect();
    days.sort_unstable();
    Ok(days)
}
