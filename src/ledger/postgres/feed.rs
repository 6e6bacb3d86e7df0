//! The runs' change feed: every change of an open or ended run's row, after a mark, in the
//! order of the transactions that made them, for the event stream and the console's index —
//! which follow ZooKeeper's `runs/` for the ticks, and this for the submissions kept here.
//!
//! Each row says which transaction changed it last (`changed_xid`, schema V3). A read takes the
//! rows changed after its mark by transactions that began before its horizon — the oldest
//! transaction still running anywhere on the server (`pg_snapshot_xmin`) — so a transaction
//! that commits after a later one is never jumped: its rows are read once it is over. A row
//! changed twice between two reads is read once, as it stands. A long transaction elsewhere on
//! the server holds the horizon back: the feed waits for it, and loses nothing.
//!
//! Owns: the feed's two statements and reading their rows as records.
//! Must not: decide what a change means to a follower (`events`, `http::index`).

use super::error::StoreError;
use super::handle::PgStore;
use super::runs::{ClaimedBy, written_or_claim};
use crate::delayed::submission::{Submission, SubmissionId};
use crate::events::cursor::StoreMark;
use crate::ids::FencingToken;
use crate::run::RunRecord;

/// One run's row as a change left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunChange {
    /// Where the feed stands after it.
    pub mark: StoreMark,
    /// Its record: the one the run wrote, or its claim's.
    pub record: RunRecord,
}

impl PgStore {
    /// Where the feed stands now: after every change a read made now could see. A follower
    /// starting here is told every later change.
    ///
    /// # Errors
    /// `Unreachable` or `Query`.
    pub async fn change_horizon(&self) -> Result<StoreMark, StoreError> {
        let live = self.side().await?;
        let row = self
            .bounded(
                "reading the feed's horizon",
                live.client.query_one(&live.statements.change_horizon, &[]),
            )
            .await?;
        let xid: String = row.get(0);
        let xid = xid.parse().map_err(|_| StoreError::Unreadable {
            what: "the feed's horizon",
            found: xid,
        })?;
        Ok(StoreMark {
            xid,
            id: String::new(),
        })
    }

    /// At most `limit` runs changed after `after`, in the feed's order. A row that cannot be
    /// read is logged with its id and skipped.
    ///
    /// # Errors
    /// `Unreachable` or `Query`.
    pub async fn run_changes(
        &self,
        after: &StoreMark,
        limit: i64,
    ) -> Result<Vec<RunChange>, StoreError> {
        let live = self.side().await?;
        let xid = after.xid.to_string();
        let rows = self
            .bounded(
                "reading the runs' changes",
                live.client.query(
                    &live.statements.run_changes,
                    &[&self.lock_group, &xid, &after.id, &limit],
                ),
            )
            .await?;
        let mut changes = Vec::with_capacity(rows.len());
        for row in rows {
            let xid: String = row.get(0);
            let id: String = row.get(1);
            let written: Option<Vec<u8>> = row.get(2);
            let data: Vec<u8> = row.get(3);
            let (Ok(xid), Ok(parsed), Ok(submission)) = (
                xid.parse::<u64>(),
                SubmissionId::parse(&id),
                Submission::parse(&data),
            ) else {
                tracing::error!(lock_group = %self.lock_group, %id, "an unreadable run in the change feed; skipped");
                continue;
            };
            let table = if row.get::<_, bool>(8) {
                "zkcron_open"
            } else {
                "zkcron_ended"
            };
            let node: Option<String> = row.get(4);
            let ip: Option<String> = row.get(5);
            let token: Option<i64> = row.get(6);
            let claimed = ClaimedBy {
                node: node.as_deref().unwrap_or("-"),
                ip: ip.as_deref().unwrap_or(""),
                token: FencingToken(token.and_then(|t| i32::try_from(t).ok()).unwrap_or(0)),
                at_unix_ms: row.get(7),
            };
            let record =
                written_or_claim(table, &parsed, written.as_deref(), &submission, &claimed);
            changes.push(RunChange {
                mark: StoreMark { xid, id },
                record,
            });
        }
        Ok(changes)
    }
}
