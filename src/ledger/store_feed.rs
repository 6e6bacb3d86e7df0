//! The delayed store's runs as those who follow the ledger read them: where its change feed
//! stands, and what changed after a mark — for the event hub and the console's index, which
//! follow ZooKeeper's `runs/` for everything else. A ledger that keeps its queue in ZooKeeper
//! has no feed: its submissions' records are under `runs/` too.
//!
//! Owns: those reads, their errors' paths, and following the feed for a reader (`follow`).
//! Must not: decide what a change means to a follower, or write anything.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::ClaimError;
use super::handle::Ledger;
use super::postgres::{PgStore, RunChange, StoreError};
use crate::events::cursor::StoreMark;
use crate::ids::JobName;
use crate::run::RunRecord;

/// Where the store's feed stands now; `None` when the queue is kept in ZooKeeper.
///
/// # Errors
/// `Store` when the store did not answer.
pub async fn horizon(client: &Ledger) -> Result<Option<StoreMark>, ClaimError> {
    let Some(store) = client.delayed_store() else {
        return Ok(None);
    };
    store.change_horizon().await.map(Some).map_err(on(store))
}

/// At most `limit` of the store's runs changed after `after`, in the feed's order; none when
/// the queue is kept in ZooKeeper.
///
/// # Errors
/// `Store` when the store did not answer.
pub async fn changes_after(
    client: &Ledger,
    after: &StoreMark,
    limit: i64,
) -> Result<Vec<RunChange>, ClaimError> {
    let Some(store) = client.delayed_store() else {
        return Ok(Vec::new());
    };
    store.run_changes(after, limit).await.map_err(on(store))
}

/// The store's newest `limit` runs of `job`, open ones first, then ended ones newest first; none
/// when the queue is kept in ZooKeeper (its runs are under `runs/`).
///
/// # Errors
/// `Store` when the store did not answer.
pub async fn newest_of(
    client: &Ledger,
    job: &JobName,
    limit: usize,
) -> Result<Vec<RunRecord>, ClaimError> {
    let Some(store) = client.delayed_store() else {
        return Ok(Vec::new());
    };
    super::postgres::submissions::history_of(store, job, limit)
        .await
        .map_err(on(store))
}

fn on(store: &PgStore) -> impl FnOnce(StoreError) -> ClaimError + '_ {
    move |source| ClaimError::Store {
        path: format!("postgres:{}", store.lock_group()),
        source: std::sync::Arc::new(source),
    }
}

/// What a follower of the feed is told.
#[derive(Debug)]
pub enum Fed {
    /// The feed could not be read when the follower began: it is followed from `mark` on.
    Begun(StoreMark),
    /// The runs changed after the follower's mark, in the feed's order (never empty).
    Changed(Vec<RunChange>),
}

/// How often the feed is read while someone follows it: PostgreSQL tells no change of a row
/// unless asked, and a `NOTIFY` from every statement of the claim path costs every delivery
/// (measured: +16 % of the server's CPU) for views few nodes serve.
pub const POLL: Duration = Duration::from_millis(500);

/// The changes read at once, by a follower and by a read back across a gap.
pub const BATCH: i64 = 1000;

/// Follows the store's feed until `stop`: every [`POLL`] (at once again after a full batch),
/// the changes after `mark()` go to `told`; while `mark()` has none, the feed's horizon is read
/// until it answers and told as [`Fed::Begun`]. A failed read is logged once, as `reader`'s,
/// and tried again from the same mark: nothing is lost. Returns at once for a queue kept in
/// ZooKeeper.
pub async fn follow(
    client: &Ledger,
    stop: &CancellationToken,
    reader: &'static str,
    mut mark: impl FnMut() -> Option<StoreMark>,
    mut told: impl FnMut(Fed),
) {
    if client.delayed_store().is_none() {
        return;
    }
    let mut failing = false;
    loop {
        let read = match mark() {
            Some(after) => changes_after(client, &after, BATCH).await.map(Fed::Changed),
            None => match horizon(client).await {
                Ok(Some(horizon)) => Ok(Fed::Begun(horizon)),
                Ok(None) => return,
                Err(err) => Err(err),
            },
        };
        let mut full = false;
        match read {
            Ok(fed) => {
                if std::mem::take(&mut failing) {
                    tracing::info!(reader, "the delayed store's runs are read again");
                }
                match fed {
                    Fed::Changed(changes) if changes.is_empty() => {}
                    Fed::Changed(changes) => {
                        full = i64::try_from(changes.len()) == Ok(BATCH);
                        told(Fed::Changed(changes));
                    }
                    begun @ Fed::Begun(_) => {
                        full = true;
                        told(begun);
                    }
                }
            }
            Err(err) if !failing => {
                failing = true;
                tracing::warn!(
                    reader,
                    error = %crate::report::error_chain(&err),
                    "cannot read the delayed store's runs; tried again every {} ms, none lost",
                    POLL.as_millis()
                );
            }
            Err(_) => {}
        }
        if full {
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(POLL) => {}
        }
    }
}
