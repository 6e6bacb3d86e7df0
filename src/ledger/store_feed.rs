//! The delayed store's runs as those who follow the ledger read them: where its change feed
//! stands, and what changed after a mark — for the event hub and the console's index, which
//! follow ZooKeeper's `runs/` for everything else. A ledger that keeps its queue in ZooKeeper
//! has no feed: its submissions' records are under `runs/` too.
//!
//! Owns: those reads and their errors' paths.
//! Must not: decide what a change means to a follower, or write anything.

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
