//! What the store keeps, and for how long: a job's ended runs beyond its `history`, the ids
//! remembered past their runs, the day partitions nothing is left in.
//!
//! The rules are the ZooKeeper store's (`ledger::prune`, `ledger::forget`). A pruned run's id
//! stays remembered as a tombstone in `zkcron_ids` until its end plus the job's `dedup_window`
//! (a generated id, or one past its window, is freed at once); the forget sweep frees it then.
//! All of it runs in batches, off the claim path: rows pruned by `history` are deleted from an
//! ended day's partition, and the partition itself goes, dead tuples and all, once nothing is
//! left in it. A past day's pending partition goes the same way once every row was claimed.
//!
//! Owns: those statements and choosing what each pruned id becomes.
//! Must not: decide when to prune (the fire machine does) or touch a pending or open row.

use tokio_postgres::types::ToSql;

use super::error::StoreError;
use super::handle::PgStore;
use super::partitions::{self, Partitioned};
use crate::delayed::submission::{self, FormatError, Stored};
use crate::ids::JobName;
use crate::ledger::Remember;

/// What one prune did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Ended runs deleted.
    pub records: u64,
    /// Of their ids, kept as tombstones.
    pub remembered: u64,
    /// Of their ids, freed at once.
    pub freed: u64,
}

impl PgStore {
    /// Deletes `job`'s ended runs beyond the newest `keep`, at most `batch` in one statement; each one's id becomes a tombstone until its end plus `remember.window`, or is
    /// freed when that has passed or the id was generated. Call it again while it prunes a whole
    /// batch.
    ///
    /// # Errors
    /// `TimedOut`, `Unreachable` or `Query` (nothing of the batch was written: one statement).
    pub async fn prune_history(
        &self,
        job: &JobName,
        keep: i64,
        remember: Remember,
        batch: i64,
    ) -> Result<Pruned, StoreError> {
        let live = self.side().await?;
        let doomed = self
            .bounded(
                "reading a job's runs beyond its history",
                live.client.query(
                    &live.statements.beyond_history,
                    &[&self.lock_group, &job.as_str(), &keep, &batch],
                ),
            )
            .await?;
        let window_ms = i64::try_from(remember.window.as_millis()).unwrap_or(i64::MAX);
        let mut gone: Vec<String> = Vec::with_capacity(doomed.len());
        let (mut kept, mut tombstones, mut untils) = (Vec::new(), Vec::new(), Vec::new());
        for row in &doomed {
            let id: String = row.get(0);
            let ended: i64 = row.get(1);
            let data: Vec<u8> = row.get(2);
            let until = ended.saturating_add(window_ms);
            match self.fate(&id, &data) {
                Fate::Leave => continue,
                Fate::Remember if until > remember.now_unix_ms => {
                    match submission::tombstone_of(&data, until) {
                        Ok(tombstone) => {
                            kept.push(id.clone());
                            tombstones.push(tombstone);
                            untils.push(until);
                        }
                        Err(error) => {
                            tracing::warn!(lock_group = %self.lock_group, %id, %error, "unreadable submission; its id is freed with its record");
                        }
                    }
                }
                Fate::Remember | Fate::Free => {}
            }
            gone.push(id);
        }
        let params: [&(dyn ToSql + Sync); 5] =
            [&self.lock_group, &gone, &kept, &tombstones, &untils];
        let row = self
            .bounded(
                "pruning a job's runs",
                live.client.query_one(&live.statements.prune, &params),
            )
            .await?;
        let records: i64 = row.get(0);
        let remembered: i64 = row.get(1);
        let freed: i64 = row.get(2);
        Ok(Pruned {
            records: u64::try_from(records).unwrap_or(0),
            remembered: u64::try_from(remembered).unwrap_or(0),
            freed: u64::try_from(freed).unwrap_or(0),
        })
    }

    /// Frees up to `batch` remembered ids whose tombstone's time has come by `now_unix_ms`: a
    /// submit of one of them is new again. How many it freed.
    ///
    /// # Errors
    /// `TimedOut`, `Unreachable` or `Query`.
    pub async fn forget(&self, now_unix_ms: i64, batch: i64) -> Result<u64, StoreError> {
        let live = self.side().await?;
        let freed = self
            .bounded(
                "freeing remembered ids",
                live.client.execute(
                    &live.statements.forget,
                    &[&self.lock_group, &now_unix_ms, &batch],
                ),
            )
            .await?;
        Ok(freed)
    }

    /// Remembers each of `tombstones` — an id, its tombstone (`delayed::submission::Tombstone`'s
    /// bytes) and when it may be forgotten — unless the queue knows the id already (submitted
    /// to it since: the queue's own is kept), so a resubmit within the window is told as
    /// [`PgStore::submit`] tells one of a pruned id's. How many it added.
    ///
    /// # Errors
    /// `TimedOut`, `Unreachable` or `Query` (none was added: one statement).
    pub async fn remember(&self, tombstones: &[(String, Vec<u8>, i64)]) -> Result<u64, StoreError> {
        let ids: Vec<&str> = tombstones.iter().map(|(id, ..)| id.as_str()).collect();
        let data: Vec<&[u8]> = tombstones
            .iter()
            .map(|(_, data, _)| data.as_slice())
            .collect();
        let until: Vec<i64> = tombstones.iter().map(|(.., until)| *until).collect();
        let params: [&(dyn ToSql + Sync); 4] = [&self.lock_group, &ids, &data, &until];
        let live = self.side().await?;
        let added = self
            .bounded(
                "remembering ids",
                live.client.execute(&live.statements.remember, &params),
            )
            .await?;
        Ok(added)
    }

    /// Drops the day partitions of both tables that ended before `before_unix_ms`'s day and
    /// hold no row (of any lock group): their dead tuples go with them. Their names.
    ///
    /// # Errors
    /// `TimedOut`, `Unreachable` or `Query`.
    pub async fn drop_empty_days(&self, before_unix_ms: i64) -> Result<Vec<String>, StoreError> {
        let live = self.side().await?;
        let before_day = partitions::day_of(before_unix_ms);
        let mut dropped = Vec::new();
        for table in [Partitioned::Pending, Partitioned::Ended] {
            let days = self
                .bounded(
                    "listing day partitions",
                    partitions::days(&live.client, table),
                )
                .await?;
            for day in days.into_iter().filter(|day| *day < before_day) {
                let made = partitions::drop_if_empty(&live.client, table, day);
                if let Some(name) = self.bounded_raw("dropping a day partition", made).await?? {
                    dropped.push(name);
                }
            }
        }
        Ok(dropped)
    }

    /// What a pruned run's id becomes, by its stored submission.
    fn fate(&self, id: &str, data: &[u8]) -> Fate {
        match Stored::parse(data) {
            // A generated id: nobody can send it again.
            Ok(Stored::Request(request)) if request.anonymous => Fate::Free,
            Ok(_) => Fate::Remember,
            // A newer zkcron's submission: left for it, never taken for garbage.
            Err(FormatError::Version(format)) => {
                crate::formats::newer_found("submission", format, &format!("zkcron_ended {id}"));
                Fate::Leave
            }
            Err(error) => {
                tracing::warn!(lock_group = %self.lock_group, %id, %error, "unreadable submission; its id is freed with its record");
                Fate::Free
            }
        }
    }
}

/// What a pruned run's id becomes.
enum Fate {
    /// A tombstone until its end plus `dedup_window` (freed if that has passed).
    Remember,
    /// Freed with its record.
    Free,
    /// Not pruned: a newer zkcron wrote it.
    Leave,
}
