//! The owner's chores between runs: moving submissions pending in ZooKeeper into the delayed
//! queue's PostgreSQL store where it is kept there (and making the chain marks its ends kept
//! that a dead owner never made), counting pending delayed submissions for
//! `zkcron_delayed_pending`, sweeping the forget lists so that ids whose `dedup_window` has
//! passed are free again, and pruning the audit trail's days older than `[audit] keep`.
//!
//! Owns: when to do them (at acquisition, then every [`CHORES_EVERY`] while owner) and how much
//! to read at most ([`MAX_BUCKETS`], `forget::SWEEP_LISTS`).
//! Must not: decide anything; followers report 0 pending, so `max()` over the nodes is the count.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::layout::{AuditPaths, DelayedPaths};
use crate::ledger::Ledger;
use crate::ledger::forget;
use crate::metrics::Metrics;
use crate::report::error_chain;
use crate::view::NodeView;

/// How often the owner does its chores.
const CHORES_EVERY: Duration = Duration::from_secs(30);
/// How often the owner prunes the audit trail: its buckets are whole days.
const AUDIT_PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Due seconds read per count at most: two small requests each. Beyond, the gauge is a lower
/// bound (logged at debug).
const MAX_BUCKETS: usize = 5_000;

/// Does the chores for the life of `client`'s session, while this node owns the lock.
pub(super) fn spawn(
    client: Ledger,
    paths: DelayedPaths,
    (audit, keep): (AuditPaths, Duration),
    metrics: Arc<Metrics>,
    mut view: watch::Receiver<NodeView>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut owned = false;
        let mut next = tokio::time::Instant::now();
        let mut next_audit_prune = next;
        loop {
            let owner = view.borrow().lock.may_fire;
            let now = tokio::time::Instant::now();
            if owner && !owned {
                next = now; // a new owner starts at once
            } else if !owner && owned {
                metrics.delayed_pending(0);
            }
            owned = owner;
            if owner && now >= next {
                move_into_store(&client, &paths, &metrics).await;
                leave_kept_marks(&client).await;
                count_pending(&client, &paths, &metrics).await;
                forget_expired(&client, &paths).await;
                if now >= next_audit_prune {
                    prune_audit(&client, &audit, keep).await;
                    next_audit_prune = now + AUDIT_PRUNE_EVERY;
                }
                next = tokio::time::Instant::now() + CHORES_EVERY;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(next), if owned => {}
                changed = view.changed() => if changed.is_err() { return },
            }
        }
    });
}

/// Submissions moved from ZooKeeper's due tree into the delayed store per chore at most.
const MOVES_PER_CHORE: usize = 10_000;

/// With the queue kept in PostgreSQL: what was submitted into ZooKeeper's due tree meanwhile
/// (the direct protocol, or a node that kept the queue there) is moved into the store, each
/// logged with its id and counted.
async fn move_into_store(client: &Ledger, paths: &DelayedPaths, metrics: &Metrics) {
    if !client.delayed_in_postgres() {
        return;
    }
    match crate::ledger::store_move::move_to_store(client, paths, MOVES_PER_CHORE).await {
        Ok(moved) => {
            for id in &moved.moved {
                tracing::warn!(id = %id, "a submission pending in zookeeper's due tree moved into the delayed store ([delayed] store = \"postgres\")");
            }
            metrics.delayed_moved(moved.moved.len());
        }
        Err(err) => {
            tracing::warn!(error = %error_chain(&err), "submissions pending in zookeeper not moved into the delayed store; the next chore tries again");
        }
    }
}

/// An end this old whose chain marks the store still keeps lost its owner before they were
/// made: a live owner makes them within milliseconds of the end.
const MARKS_UNMADE_AFTER: Duration = Duration::from_secs(10);

/// With the queue kept in PostgreSQL: the chain marks of runs that ended there while their
/// owner died before it made them in ZooKeeper are made, so no child waits for good.
async fn leave_kept_marks(client: &Ledger) {
    if !client.delayed_in_postgres() {
        return;
    }
    let unmade = i64::try_from(MARKS_UNMADE_AFTER.as_millis()).unwrap_or(i64::MAX);
    let ended_by = chrono::Utc::now().timestamp_millis() - unmade;
    if let Err(err) = crate::ledger::chains::leave_kept_marks(client, ended_by).await {
        tracing::warn!(error = %error_chain(&err), "chain marks kept in the delayed store not made; the next chore tries again");
    }
}

async fn count_pending(client: &Ledger, paths: &DelayedPaths, metrics: &Metrics) {
    match crate::ledger::due::count_pending(client, paths, MAX_BUCKETS).await {
        Ok((count, complete)) => {
            if !complete {
                tracing::debug!(
                    count,
                    max_buckets = MAX_BUCKETS,
                    "pending submissions counted in part"
                );
            }
            metrics.delayed_pending(count);
        }
        Err(err) => {
            tracing::debug!(error = %error_chain(&err), "pending submissions not counted");
        }
    }
}

async fn prune_audit(client: &Ledger, paths: &AuditPaths, keep: Duration) {
    let now = chrono::Utc::now().timestamp_millis();
    match crate::ledger::audit::prune(client, paths, keep, now).await {
        Ok(0) => {}
        Ok(pruned) => tracing::info!(pruned, "audit entries older than [audit] keep pruned"),
        Err(err) => {
            tracing::warn!(error = %error_chain(&err), "audit trail not pruned; the next prune tries again")
        }
    }
}

async fn forget_expired(client: &Ledger, paths: &DelayedPaths) {
    let now = chrono::Utc::now().timestamp_millis();
    match forget::sweep(client, paths, now).await {
        Ok(0) => {}
        Ok(freed) => tracing::debug!(freed, "remembered submission ids forgotten"),
        Err(err) => {
            tracing::warn!(error = %error_chain(&err), "remembered ids not swept; the next sweep tries again")
        }
    }
}
