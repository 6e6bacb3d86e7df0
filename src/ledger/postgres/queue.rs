//! The delayed queue's statements: a submission's life in the PostgreSQL store.
//!
//! A submission is in exactly one of `zkcron_pending`, `zkcron_open` and `zkcron_ended`, and
//! each move between them is one statement (a `DELETE … RETURNING` feeding an `INSERT`), so it
//! is never in two and never in none; its id is in `zkcron_ids` from its submit until it is
//! forgotten. The claims, which move pending rows to the open runs, are `claims`'.
//!
//! Owns: submit (one or a batch), end, cancel and find, each one prepared statement (a submit
//! is one round trip; a day's first row makes its partition first).
//! Must not: claim, or build records other than a claim's (for an open run that has written
//! none) and a cancel's, which the ZooKeeper store builds the same way.

use tokio_postgres::Statement;
use tokio_postgres::types::ToSql;

use super::error::StoreError;
use super::handle::{Live, PgStore};
use super::partitions::{self, Partitioned};
use super::runs::{ClaimedBy, written_or_claim};
use super::statements::Statements;
use crate::delayed::submission::{Stored, Submission, SubmissionId, Submitted, Tombstone};
use crate::ids::FencingToken;
use crate::run::RunRecord;

/// Attempts at a statement whose day partition was missing (made between attempts; a second
/// miss means another node dropped it in between, which only a past day's can be).
const PARTITION_ATTEMPTS: usize = 3;

/// How an end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The run's row moved to the ended table with its final record.
    Recorded,
    /// No open run of that id holds that token: it ended already, or a newer owner took it
    /// over. Nothing was written.
    NotOurs,
}

/// Where a submission is, as one read saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    Pending(Submission),
    /// Claimed; `record` is its claim's until the run writes its own.
    Open {
        submission: Submission,
        record: Box<RunRecord>,
    },
    Ended {
        submission: Submission,
        record: Box<RunRecord>,
    },
    /// Its record was pruned; the id is remembered until the tombstone's time.
    Remembered(Tombstone),
}

/// A found row, before it is read.
struct SubmissionRow {
    place: String,
    submission: Vec<u8>,
    record: Option<Vec<u8>>,
    token: Option<i64>,
    node: Option<String>,
    ip: Option<String>,
    at_ms: Option<i64>,
}

impl PgStore {
    /// Submits `submission` under `id`: one round trip (two on a day's first submission, which
    /// makes the day's partition). The same request under the same id again is a no-op.
    ///
    /// # Errors
    /// `Conflict` when `id` holds a different request; `Corrupt` when the stored one cannot be
    /// read; `Unreachable` or `Query` when the database did not take it (nothing is
    /// half-written: it is one statement).
    pub async fn submit(
        &self,
        id: &SubmissionId,
        submission: &Submission,
    ) -> Result<Submitted, StoreError> {
        let data = submission.to_bytes();
        let params: [&(dyn ToSql + Sync); 5] = [
            &self.lock_group,
            &id.as_str(),
            &submission.job.as_str(),
            &submission.due_unix_ms,
            &data,
        ];
        let rows = self
            .in_day(
                Partitioned::Pending,
                submission.due_unix_ms,
                "a submit",
                |statements| &statements.submit,
                &params,
            )
            .await?;
        if !rows.is_empty() {
            return Ok(Submitted::Created);
        }
        let same = match self.find(id).await? {
            Some(
                Where::Pending(stored)
                | Where::Open {
                    submission: stored, ..
                }
                | Where::Ended {
                    submission: stored, ..
                },
            ) => stored.same_request(submission),
            Some(Where::Remembered(tombstone)) => tombstone.same_request(submission),
            // Remembered without a tombstone: an id it generated itself, being pruned.
            None => false,
        };
        if same {
            Ok(Submitted::AlreadyThere)
        } else {
            Err(StoreError::Conflict { id: id.clone() })
        }
    }

    /// Submits many, one statement per 4 MiB of payload: each statement remembers
    /// its ids and adds their pending rows, all or nothing. An id that is taken (an idempotent
    /// resubmit, or a conflict), or that comes twice in the batch, is told apart as
    /// [`PgStore::submit`] does. Results are in the batch's order.
    pub async fn submit_batch(
        &self,
        batch: &[(SubmissionId, Submission)],
    ) -> Vec<Result<Submitted, StoreError>> {
        let mut results = Vec::with_capacity(batch.len());
        for chunk in chunks(batch) {
            results.extend(self.submit_chunk(chunk).await);
        }
        results
    }

    async fn submit_chunk(
        &self,
        chunk: &[(SubmissionId, Submission)],
    ) -> Vec<Result<Submitted, StoreError>> {
        let mut seen = std::collections::HashSet::with_capacity(chunk.len());
        // A second occurrence of an id in one statement would add a second pending row: it is
        // sent after the statement, one by one, and compared then.
        let first: Vec<bool> = chunk.iter().map(|(id, _)| seen.insert(id)).collect();
        let sent: Vec<&(SubmissionId, Submission)> = chunk
            .iter()
            .zip(&first)
            .filter_map(|(item, first)| first.then_some(item))
            .collect();
        let ids: Vec<&str> = sent.iter().map(|(id, _)| id.as_str()).collect();
        let jobs: Vec<&str> = sent.iter().map(|(_, s)| s.job.as_str()).collect();
        let dues: Vec<i64> = sent.iter().map(|(_, s)| s.due_unix_ms).collect();
        let data: Vec<Vec<u8>> = sent.iter().map(|(_, s)| s.to_bytes()).collect();
        let created = match self.insert_many(&ids, &jobs, &dues, &data).await {
            Ok(created) => created,
            Err(error) => {
                // One statement: nothing of it was written; each result says why.
                let text = crate::report::error_chain(&error);
                return chunk
                    .iter()
                    .map(|_| Err(StoreError::Batch(text.clone())))
                    .collect();
            }
        };
        let mut results = Vec::with_capacity(chunk.len());
        for ((id, submission), first) in chunk.iter().zip(first) {
            if first && created.contains(id.as_str()) {
                results.push(Ok(Submitted::Created));
            } else {
                results.push(self.submit(id, submission).await);
            }
        }
        results
    }

    /// The batch statement: the ids whose rows it created.
    async fn insert_many(
        &self,
        ids: &[&str],
        jobs: &[&str],
        dues: &[i64],
        data: &[Vec<u8>],
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        let params: [&(dyn ToSql + Sync); 5] = [&self.lock_group, &ids, &jobs, &dues, &data];
        let live = self.live().await?;
        let rows = self
            .with_partition(
                &live,
                Partitioned::Pending,
                dues,
                "a batch of submits",
                || live.client.query(&live.statements.submit_many, &params),
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Ends the open run of `id` that this node claimed with `token`: its row moves to the
    /// ended runs with `record` as its final record, ended at `ended_unix_ms`.
    ///
    /// # Errors
    /// `Unreachable` or `Query` when the database did not answer.
    pub async fn end(
        &self,
        id: &SubmissionId,
        token: FencingToken,
        record: &RunRecord,
        ended_unix_ms: i64,
    ) -> Result<Ended, StoreError> {
        self.end_leaving(id, token, record, ended_unix_ms, &[])
            .await
    }

    /// [`PgStore::end`], keeping `marks` — the chain marks (ZooKeeper path, data) the end
    /// leaves for the jobs after it — in the same statement, until
    /// [`PgStore::marks_made`] says they are made there.
    ///
    /// # Errors
    /// As [`PgStore::end`].
    pub async fn end_leaving(
        &self,
        id: &SubmissionId,
        token: FencingToken,
        record: &RunRecord,
        ended_unix_ms: i64,
        marks: &[(String, Vec<u8>)],
    ) -> Result<Ended, StoreError> {
        let data = record.to_bytes();
        let paths: Vec<&str> = marks.iter().map(|(path, _)| path.as_str()).collect();
        let kept: Vec<&[u8]> = marks.iter().map(|(_, mark)| mark.as_slice()).collect();
        let params: [&(dyn ToSql + Sync); 7] = [
            &self.lock_group,
            &id.as_str(),
            &i64::from(token.0),
            &ended_unix_ms,
            &data,
            &paths,
            &kept,
        ];
        let rows = self
            .in_day(
                Partitioned::Ended,
                ended_unix_ms,
                "a run's end",
                |statements| &statements.end,
                &params,
            )
            .await?;
        Ok(if rows.is_empty() {
            Ended::NotOurs
        } else {
            Ended::Recorded
        })
    }

    /// The chain marks at `paths` are made in ZooKeeper: no longer kept.
    ///
    /// # Errors
    /// `TimedOut`, `Unreachable` or `Query`.
    pub async fn marks_made(&self, paths: &[&str]) -> Result<(), StoreError> {
        let live = self.live().await?;
        self.bounded(
            "chain marks made",
            live.client
                .execute(&live.statements.marks_made, &[&self.lock_group, &paths]),
        )
        .await
        .map(drop)
    }

    /// Up to `limit` chain marks (ZooKeeper path, data), oldest first, kept for ends at or
    /// before `ended_by_unix_ms`: their owner may have died before it made them.
    ///
    /// # Errors
    /// `TimedOut`, `Unreachable` or `Query`.
    pub async fn marks_left(
        &self,
        ended_by_unix_ms: i64,
        limit: i64,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let live = self.side().await?;
        let rows = self
            .bounded(
                "chain marks left",
                live.client.query(
                    &live.statements.marks_left,
                    &[&self.lock_group, &ended_by_unix_ms, &limit],
                ),
            )
            .await?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// Cancels pending submission `id` at `now_unix_ms`: it moves to the ended runs as
    /// `cancelled`, so no claim can take it afterwards (and a claim that came first wins).
    ///
    /// # Errors
    /// `NotFound`; `Conflict`-free: a submission claimed or ended already is returned as
    /// `Ok(Err(where))` with where it is; `Unreachable` or `Query`.
    pub async fn cancel(
        &self,
        id: &SubmissionId,
        now_unix_ms: i64,
    ) -> Result<Result<Submission, Where>, StoreError> {
        let submission = match self.find(id).await? {
            None => return Err(StoreError::NotFound { id: id.clone() }),
            Some(Where::Pending(submission)) => submission,
            Some(elsewhere) => return Ok(Err(elsewhere)),
        };
        let record = RunRecord::cancelled_before_start(&submission, id, now_unix_ms).to_bytes();
        let params: [&(dyn ToSql + Sync); 5] = [
            &self.lock_group,
            &id.as_str(),
            &submission.due_unix_ms,
            &now_unix_ms,
            &record,
        ];
        let rows = self
            .in_day(
                Partitioned::Ended,
                now_unix_ms,
                "a cancel",
                |statements| &statements.cancel,
                &params,
            )
            .await?;
        if !rows.is_empty() {
            return Ok(Ok(submission));
        }
        // Claimed (or cancelled) between the read and the cancel: say where it went.
        match self.find(id).await? {
            Some(elsewhere) => Ok(Err(elsewhere)),
            None => Err(StoreError::NotFound { id: id.clone() }),
        }
    }

    /// Moves pending submission `id`, due at `from_unix_ms`, to `moved`'s due time: one
    /// statement, which a claim or a cancel of the row waits for or wins. Whether it moved: not
    /// when the row was no longer pending at `from_unix_ms`.
    ///
    /// # Errors
    /// `Unreachable` or `Query`.
    pub async fn reschedule(
        &self,
        id: &SubmissionId,
        from_unix_ms: i64,
        moved: &Submission,
    ) -> Result<bool, StoreError> {
        let data = moved.to_bytes();
        let params: [&(dyn ToSql + Sync); 5] = [
            &self.lock_group,
            &id.as_str(),
            &from_unix_ms,
            &moved.due_unix_ms,
            &data,
        ];
        let rows = self
            .in_day(
                Partitioned::Pending,
                moved.due_unix_ms,
                "a reschedule",
                |statements| &statements.reschedule,
                &params,
            )
            .await?;
        Ok(!rows.is_empty())
    }

    /// Where submission `id` is; none when the store does not remember it.
    ///
    /// # Errors
    /// `Corrupt` when its row cannot be read; `Unreachable` or `Query`.
    pub async fn find(&self, id: &SubmissionId) -> Result<Option<Where>, StoreError> {
        let live = self.live().await?;
        let rows = self
            .bounded(
                "finding a submission",
                live.client
                    .query(&live.statements.find, &[&self.lock_group, &id.as_str()]),
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let found = SubmissionRow {
            place: row.get(0),
            submission: row.get(1),
            record: row.get(2),
            token: row.get(3),
            node: row.get(4),
            ip: row.get(5),
            at_ms: row.get(6),
        };
        found.read(id).map(Some)
    }
}

impl SubmissionRow {
    fn read(self, id: &SubmissionId) -> Result<Where, StoreError> {
        let corrupt = |table: &'static str| {
            let id = id.as_str().to_owned();
            move |source| StoreError::Corrupt { table, id, source }
        };
        if self.place == "remembered" {
            return match Stored::parse(&self.submission).map_err(corrupt("zkcron_ids"))? {
                Stored::Tombstone(tombstone) => Ok(Where::Remembered(tombstone)),
                Stored::Request(_) => Err(StoreError::Corrupt {
                    table: "zkcron_ids",
                    id: id.as_str().to_owned(),
                    source: crate::delayed::submission::FormatError::PartTombstone,
                }),
            };
        }
        let table = match self.place.as_str() {
            "pending" => "zkcron_pending",
            "open" => "zkcron_open",
            _ => "zkcron_ended",
        };
        let submission = Submission::parse(&self.submission).map_err(corrupt(table))?;
        if self.place == "pending" {
            return Ok(Where::Pending(submission));
        }
        let claimed = ClaimedBy {
            node: self.node.as_deref().unwrap_or(""),
            ip: self.ip.as_deref().unwrap_or(""),
            token: FencingToken(
                self.token
                    .and_then(|token| i32::try_from(token).ok())
                    .unwrap_or(0),
            ),
            at_unix_ms: self.at_ms.unwrap_or(0),
        };
        let record = written_or_claim(table, id, self.record.as_deref(), &submission, &claimed);
        Ok(if self.place == "open" {
            Where::Open {
                submission,
                record: Box::new(record),
            }
        } else {
            Where::Ended {
                submission,
                record: Box::new(record),
            }
        })
    }
}

/// A batch statement's payloads at most: well under what a statement may carry, and small
/// enough that one batch's failure costs little.
const BATCH_BYTES: usize = 4 << 20;

/// `batch` in runs of at most [`BATCH_BYTES`] of stored submissions (at least one each).
fn chunks(batch: &[(SubmissionId, Submission)]) -> Vec<&[(SubmissionId, Submission)]> {
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < batch.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < batch.len() {
            let more = batch[end].1.payload.len() + 256;
            if end > start && bytes + more > BATCH_BYTES {
                break;
            }
            bytes += more;
            end += 1;
        }
        chunks.push(&batch[start..end]);
        start = end;
    }
    chunks
}

impl PgStore {
    /// One statement (chosen from the prepared ones) with `params`, on the live connection,
    /// the day partition of `table` that `at_ms` falls in made first when it is missing.
    async fn in_day(
        &self,
        table: Partitioned,
        at_ms: i64,
        what: &'static str,
        statement: fn(&Statements) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let live = self.live().await?;
        let chosen = statement(&live.statements);
        self.with_partition(&live, table, &[at_ms], what, || {
            live.client.query(chosen, params)
        })
        .await
    }

    /// Runs `statement` within the request bound; when a row found no day partition, makes
    /// the partitions of the days of `instants` and runs it again.
    async fn with_partition<F, Fut>(
        &self,
        live: &Live,
        table: Partitioned,
        instants: &[i64],
        what: &'static str,
        mut statement: F,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>>,
    {
        let mut attempt = 1;
        loop {
            match self.bounded_raw(what, statement()).await? {
                Err(error)
                    if partitions::is_missing_partition(&error) && attempt < PARTITION_ATTEMPTS =>
                {
                    attempt += 1;
                    let mut days: Vec<i64> =
                        instants.iter().map(|at| partitions::day_of(*at)).collect();
                    days.sort_unstable();
                    days.dedup();
                    for day in days {
                        let made =
                            partitions::ensure(&live.client, table, day * partitions::DAY_MS);
                        self.bounded_raw(what, made).await??;
                    }
                }
                done => return done.map_err(StoreError::query(what)),
            }
        }
    }
}
