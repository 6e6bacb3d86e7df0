//! The open runs' records through their life, and the ended runs read back: what the fire
//! driver does to a claimed submission's record in ZooKeeper (`ledger::update`, a next owner's
//! rewrite, `ledger::history`), here.
//!
//! A record changes by compare-and-set on its row's `version`, as a znode's data does: a write
//! that finds another version changed nothing, and says so. A next owner takes an open run over
//! (to mark it interrupted, or to let it finish) with its own token, in a statement that checks
//! the fence, so the old owner's later writes and its end find the run no longer theirs.
//!
//! Owns: those statements' parameters and reading their rows back.
//! Must not: decide what a record says (the fire machine does).

use tokio_postgres::types::ToSql;

use super::error::StoreError;
use super::handle::PgStore;
use crate::delayed::submission::{Submission, SubmissionId};
use crate::ids::{FencingToken, JobName, NodeId};
use crate::run::RunRecord;

/// A claimed submission whose run has not ended, as a next owner reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRun {
    pub id: SubmissionId,
    pub submission: Submission,
    /// Its record: the one the run last wrote, or its claim's.
    pub record: RunRecord,
    /// The row's compare-and-set counter.
    pub version: i32,
    /// The token it was claimed (or last taken over) with.
    pub token: FencingToken,
}

/// How a compare-and-set of an open run's record went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Updated {
    /// Written; the row's new version.
    Written(i32),
    /// The row is at another version, or has ended: nothing was written.
    Conflict,
}

impl PgStore {
    /// Writes `record` over open run `id`'s if its row is still at `version`, claimed (or taken
    /// over) with `token`, and the fence still holds `token`: a stale owner's write, or one a
    /// dead owner's connection still carried, is a `Conflict`.
    ///
    /// # Errors
    /// `Unreachable` or `Query` when the database did not answer (it may have written: compare
    /// the record read back with the one sent).
    pub async fn update_open(
        &self,
        id: &SubmissionId,
        record: &RunRecord,
        version: i32,
        token: FencingToken,
    ) -> Result<Updated, StoreError> {
        let data = record.to_bytes();
        let params: [&(dyn ToSql + Sync); 6] = [
            &self.lock_group,
            &id.as_str(),
            &data,
            &version,
            &i64::from(token.0),
            &self.fence_group,
        ];
        let live = self.live().await?;
        let row = self
            .bounded(
                "a run's record",
                live.client.query_opt(&live.statements.update_open, &params),
            )
            .await?;
        Ok(row.map_or(Updated::Conflict, |row| Updated::Written(row.get(0))))
    }

    /// Takes open run `id` over for `node` holding `token`, writing `record` over its record if
    /// its row is still at `version`: from then on it is this node's to end.
    ///
    /// # Errors
    /// `Fenced` when the fence holds another token; `Unreachable` or `Query`.
    pub async fn take_over(
        &self,
        id: &SubmissionId,
        token: FencingToken,
        node: (&NodeId, &str),
        record: &RunRecord,
        version: i32,
    ) -> Result<Updated, StoreError> {
        let data = record.to_bytes();
        let params: [&(dyn ToSql + Sync); 8] = [
            &self.lock_group,
            &id.as_str(),
            &data,
            &version,
            &i64::from(token.0),
            &node.0.as_str(),
            &node.1,
            &self.fence_group,
        ];
        let live = self.live().await?;
        let row = self
            .bounded(
                "taking a run over",
                live.client.query_one(&live.statements.take_over, &params),
            )
            .await?;
        if !row.get::<_, bool>(0) {
            return self.fenced(token).await;
        }
        Ok(row
            .get::<_, Option<i32>>(1)
            .map_or(Updated::Conflict, Updated::Written))
    }

    /// Every open run of `job` (of every job: `None`), oldest due first: what a new owner
    /// resumes or marks interrupted. At most `max_running` a job, so read whole. A row that
    /// cannot be read is logged with its id and left as it is.
    ///
    /// # Errors
    /// `Unreachable` or `Query`.
    pub async fn open_runs(&self, job: Option<&JobName>) -> Result<Vec<OpenRun>, StoreError> {
        let live = self.live().await?;
        let job = job.map(JobName::as_str);
        let rows = self
            .bounded(
                "reading the open runs",
                live.client
                    .query(&live.statements.open_runs, &[&self.lock_group, &job]),
            )
            .await?;
        let mut open = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.get(0);
            let token: i64 = row.get(1);
            let data: Vec<u8> = row.get(7);
            let (Ok(parsed), Ok(submission)) = (SubmissionId::parse(&id), Submission::parse(&data))
            else {
                tracing::error!(lock_group = %self.lock_group, %id, "an unreadable open run; left as it is in zkcron_open");
                continue;
            };
            let token = FencingToken(i32::try_from(token).unwrap_or(i32::MAX));
            let written: Option<Vec<u8>> = row.get(5);
            let claimed = ClaimedBy {
                node: row.get(2),
                ip: row.get(3),
                token,
                at_unix_ms: row.get(4),
            };
            let record = written_or_claim(
                "zkcron_open",
                &parsed,
                written.as_deref(),
                &submission,
                &claimed,
            );
            open.push(OpenRun {
                id: parsed,
                submission,
                record,
                version: row.get(6),
                token,
            });
        }
        Ok(open)
    }

    /// The newest `limit` ended runs' records of `job`, newest end first. A record that cannot
    /// be read is logged with its id and skipped.
    ///
    /// # Errors
    /// `Unreachable` or `Query`.
    pub async fn history(&self, job: &JobName, limit: i64) -> Result<Vec<RunRecord>, StoreError> {
        let live = self.side().await?;
        let rows = self
            .bounded(
                "reading a job's history",
                live.client.query(
                    &live.statements.history,
                    &[&self.lock_group, &job.as_str(), &limit],
                ),
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let data: Vec<u8> = row.get(1);
                RunRecord::parse(&data)
                    .map_err(|error| {
                        let id: String = row.get(0);
                        tracing::error!(lock_group = %self.lock_group, %id, %error, "an unreadable ended run's record; skipped");
                    })
                    .ok()
            })
            .collect())
    }
}

/// Who claimed an open run, as its row says: enough to rebuild its claim's record.
pub(super) struct ClaimedBy<'a> {
    pub(super) node: &'a str,
    pub(super) ip: &'a str,
    pub(super) token: FencingToken,
    pub(super) at_unix_ms: i64,
}

/// An open or ended run's record: the one it wrote, or its claim's while it has written none
/// (or what it wrote cannot be read, which is logged with its id and table).
pub(super) fn written_or_claim(
    table: &str,
    id: &SubmissionId,
    written: Option<&[u8]>,
    submission: &Submission,
    claimed: &ClaimedBy<'_>,
) -> RunRecord {
    if let Some(data) = written {
        match RunRecord::parse(data) {
            Ok(record) => return record,
            Err(error) => {
                tracing::error!(table, id = %id.as_str(), %error, "an unreadable run record; reading it as its claim");
            }
        }
    }
    RunRecord::claimed_submission(
        &submission.job,
        submission.due_unix_ms,
        id,
        (&NodeId::new(claimed.node), claimed.ip),
        claimed.token,
        claimed.at_unix_ms,
    )
}
