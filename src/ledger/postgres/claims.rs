//! Claiming pending submissions: the fenced statements that move them to the open runs, and
//! the read of what is due that the owner's machine chooses from.
//!
//! Every claim is one statement that takes the fence row `FOR SHARE` at the claimer's token
//! and claims only if it holds it ([`super::fence`]). Two ways in: the submissions the fire
//! machine chose (`claim_chosen`, their records built by it, as the ZooKeeper store's claims
//! are; each waits for a cancel in flight on its row), and whatever is due by a time
//! (`claim_due`, oldest first, skipping rows another claimer holds), for a queue drained in
//! volume.
//!
//! Owns: those statements' parameters and reading their rows back.
//! Must not: decide what to claim or when (the fire machine does).

use tokio_postgres::types::ToSql;

use super::error::StoreError;
use super::handle::PgStore;
use crate::delayed::submission::{Submission, SubmissionId};
use crate::ids::{FencingToken, NodeId};
use crate::ledger::submission_state::JobsRead;
use crate::run::RunRecord;

/// A submission the store handed to its claimer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub id: SubmissionId,
    pub submission: Submission,
    /// The record a claim writes in the ZooKeeper store: attempt 1, by this node, this token.
    pub record: RunRecord,
}

/// What one claim statement did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedBatch {
    /// Oldest due first.
    pub claimed: Vec<Claimed>,
    /// Rows it took that could not be read back as submissions: each is logged with its id,
    /// and stays open in the store for an operator, never silently dropped.
    pub unreadable: Vec<String>,
    /// The last row it took, in (due, id) order; none when it took nothing.
    pub reached: Option<Mark>,
}

/// Where claims in (due time, id) order have reached: every row at or before it was taken or
/// skipped. The next claim from it reads no index entry of the rows taken before, which a
/// vacuum may not have removed yet (a transaction elsewhere holding an old snapshot keeps them
/// all). A row submitted below it, or skipped while another claimer held it, is found only by
/// a claim from the start: the owner moves its mark down for a submit it is told of, and
/// claims from the start now and then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub due_unix_ms: i64,
    pub id: String,
}

/// A claim the fire machine chose: the submission, where it was due, and its claim record.
#[derive(Debug, Clone)]
pub struct Chosen<'a> {
    pub id: &'a SubmissionId,
    pub due_unix_ms: i64,
    pub record: &'a RunRecord,
}

/// What became of a chosen claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenClaim {
    /// It is this node's open run now, with the chosen record.
    Claimed,
    /// It was not pending at that due time: cancelled, rescheduled or claimed before.
    Gone,
}

impl PgStore {
    /// Claims the submissions the fire machine chose, with their records, in one statement
    /// that checks the fence; each answer in `chosen`'s order.
    ///
    /// # Errors
    /// `Fenced` when the fence holds another token (nothing was claimed); `Unreachable` or
    /// `Query` when the database did not answer (it may have claimed them: read them back with
    /// [`PgStore::find`]).
    pub async fn claim_chosen(
        &self,
        token: FencingToken,
        chosen: &[Chosen<'_>],
        node: (&NodeId, &str),
        now_unix_ms: i64,
    ) -> Result<Vec<ChosenClaim>, StoreError> {
        let ids: Vec<&str> = chosen.iter().map(|c| c.id.as_str()).collect();
        let dues: Vec<i64> = chosen.iter().map(|c| c.due_unix_ms).collect();
        let records: Vec<Vec<u8>> = chosen.iter().map(|c| c.record.to_bytes()).collect();
        let earliest = dues.iter().copied().min().unwrap_or(0);
        let latest = dues.iter().copied().max().unwrap_or(0);
        let params: [&(dyn ToSql + Sync); 11] = [
            &self.lock_group,
            &i64::from(token.0),
            &ids,
            &dues,
            &records,
            &node.0.as_str(),
            &node.1,
            &now_unix_ms,
            &earliest,
            &latest,
            &self.fence_group,
        ];
        let live = self.live().await?;
        let rows = self
            .bounded(
                "a claim",
                live.client.query(&live.statements.claim_chosen, &params),
            )
            .await?;
        self.fenced_in(&rows, token).await?;
        let claimed: std::collections::HashSet<String> = rows
            .iter()
            .filter_map(|row| row.get::<_, Option<String>>(1))
            .collect();
        // An id chosen twice was claimed once: its first place says so, the later ones not.
        let mut answered = std::collections::HashSet::new();
        Ok(chosen
            .iter()
            .map(|c| {
                let id = c.id.as_str();
                if claimed.contains(id) && answered.insert(id) {
                    ChosenClaim::Claimed
                } else {
                    ChosenClaim::Gone
                }
            })
            .collect())
    }

    /// The pending submissions due after `after_unix_ms` and by `through_unix_ms`, oldest first
    /// (by id within a due time), at most `limit`, of `jobs`: what the owner's machine chooses
    /// from. A row
    /// that cannot be read is logged with its id and left pending.
    ///
    /// # Errors
    /// `Unreachable` or `Query` when the database did not answer.
    pub async fn pending_between(
        &self,
        after_unix_ms: i64,
        through_unix_ms: i64,
        limit: i64,
        jobs: &JobsRead,
    ) -> Result<Vec<(SubmissionId, Submission)>, StoreError> {
        let (named, listed) = match jobs {
            JobsRead::Only(named) => (named, true),
            JobsRead::AllBut(named) => (named, false),
        };
        let params: [&(dyn ToSql + Sync); 6] = [
            &self.lock_group,
            &after_unix_ms,
            &through_unix_ms,
            &limit,
            named,
            &listed,
        ];
        let live = self.live().await?;
        let rows = self
            .bounded(
                "reading due submissions",
                live.client.query(&live.statements.pending_between, &params),
            )
            .await?;
        let mut found = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.get(0);
            let data: Vec<u8> = row.get(1);
            match (SubmissionId::parse(&id), Submission::parse(&data)) {
                (Ok(parsed), Ok(submission)) => found.push((parsed, submission)),
                (Err(error), _) => {
                    tracing::error!(lock_group = %self.lock_group, %id, %error, "a pending submission's id is not one; left pending in zkcron_pending");
                }
                (_, Err(error)) => {
                    tracing::error!(lock_group = %self.lock_group, %id, %error, "an unreadable pending submission; left pending in zkcron_pending");
                }
            }
        }
        Ok(found)
    }

    /// How many submissions are pending, and whether that is all of them: counted up to `cap`.
    ///
    /// # Errors
    /// `Unreachable` or `Query` when the database did not answer.
    pub async fn count_pending(&self, cap: i64) -> Result<(u64, bool), StoreError> {
        let live = self.side().await?;
        let row = self
            .bounded(
                "counting pending submissions",
                live.client
                    .query_one(&live.statements.count_pending, &[&self.lock_group, &cap]),
            )
            .await?;
        let counted: i64 = row.get(0);
        Ok((u64::try_from(counted).unwrap_or(0), counted < cap))
    }

    /// Claims up to `limit` pending submissions due by `due_by_unix_ms` and past `after` (from
    /// the start when none), oldest first (by id within a due time), for
    /// `node` holding `token`: they move to the open runs in the statement that checks the
    /// fence, and rows another claimer holds are skipped rather than waited for.
    ///
    /// # Errors
    /// `Fenced` when the fence holds another token (raise it first with
    /// [`PgStore::raise_fence`]; a newer one means this node is a stale owner, and nothing was
    /// claimed); `Unreachable` or `Query` when the database did not answer.
    pub async fn claim_due(
        &self,
        token: FencingToken,
        after: Option<&Mark>,
        due_by_unix_ms: i64,
        limit: i64,
        node: (&NodeId, &str),
        now_unix_ms: i64,
    ) -> Result<ClaimedBatch, StoreError> {
        let (after_due, after_id) =
            after.map_or((i64::MIN, ""), |mark| (mark.due_unix_ms, mark.id.as_str()));
        let live = self.live().await?;
        let rows = self
            .bounded(
                "a claim",
                live.client.query(
                    &live.statements.claim,
                    &[
                        &self.lock_group,
                        &i64::from(token.0),
                        &due_by_unix_ms,
                        &limit,
                        &node.0.as_str(),
                        &node.1,
                        &now_unix_ms,
                        &after_due,
                        &after_id,
                        &self.fence_group,
                    ],
                ),
            )
            .await?;
        self.fenced_in(&rows, token).await?;
        let mut batch = ClaimedBatch {
            claimed: Vec::new(),
            unreadable: Vec::new(),
            reached: None,
        };
        for row in rows {
            let Some(id) = row.get::<_, Option<String>>(1) else {
                continue;
            };
            let due: i64 = row.get(3);
            // Rows come in (due, id) order: the last one is where the claim reached.
            batch.reached = Some(Mark {
                due_unix_ms: due,
                id: id.clone(),
            });
            let data: Vec<u8> = row.get(4);
            match (SubmissionId::parse(&id), Submission::parse(&data)) {
                (Ok(parsed), Ok(submission)) => {
                    let record = RunRecord::claimed_submission(
                        &submission.job,
                        submission.due_unix_ms,
                        &parsed,
                        node,
                        token,
                        now_unix_ms,
                    );
                    batch.claimed.push(Claimed {
                        id: parsed,
                        submission,
                        record,
                    });
                }
                (Err(error), _) => {
                    tracing::error!(lock_group = %self.lock_group, %id, %error, "a claimed submission's id is not one; its run stays open in zkcron_open");
                    batch.unreadable.push(id);
                }
                (_, Err(error)) => {
                    tracing::error!(lock_group = %self.lock_group, %id, %error, "a claimed submission is unreadable; its run stays open in zkcron_open");
                    batch.unreadable.push(id);
                }
            }
        }
        Ok(batch)
    }

    /// A claim statement's verdict on the fence (its first column, on every row).
    async fn fenced_in(
        &self,
        rows: &[tokio_postgres::Row],
        token: FencingToken,
    ) -> Result<(), StoreError> {
        if rows.first().is_some_and(|row| row.get::<_, bool>(0)) {
            return Ok(());
        }
        self.fenced(token).await
    }
}
