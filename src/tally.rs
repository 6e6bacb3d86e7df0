//! What this process asked ZooKeeper to write, by kind: each request that writes is one
//! transaction in every server's log (a failed one too: the leader logs an error transaction),
//! and carries one or more write ops (a create, a delete or a set-data; a multi's `check` ops
//! write nothing and are counted apart). Every server applies and fsyncs each of them, so
//! these counts, not the requests' sizes, are what a run costs the ensemble (issue "Half the
//! writes per run").
//!
//! Owns: the process-wide counters and the families `zkcron_zk_write_ops_total`,
//! `zkcron_zk_checks_total` and `zkcron_zk_transactions_total` that show them.
//! Must not: decide anything or write itself: each writer says what it sent, once, when it
//! sends it.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Why a transaction was written: the label of its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A tick's or a submission's claim (its record, its guard, its marker).
    Claim,
    /// A run's record written `running` at its start.
    Start,
    /// A run's final record (and the guard and open marker it deletes).
    Final,
    /// Any other record write: a skipped or missed tick, a run marked interrupted, a record
    /// written again, a claim withdrawn, a retry dropped.
    Record,
    /// Old records deleted, with their submissions' tombstones and forget lists.
    Prune,
    /// Expired submission ids freed by the sweep of the forget lists.
    Forget,
    /// Empty past due buckets and days removed.
    Due,
    /// A tick's promised retry noted or forgotten.
    Retry,
    /// A guard released apart from its run's final record.
    Guard,
    /// A cluster-wide limit's lease taken or given back.
    Lease,
    /// The lock acquired, bumped, released, or its epoch node made.
    Lock,
    /// The member node registered, refreshed for the clock check or removed.
    Member,
    /// A pause, resume, backfill or release request, or one carried out.
    Control,
    /// Submissions made, cancelled or rescheduled from this process.
    Submit,
    /// Parent nodes made once (a job's records, a lock group's tree).
    Parents,
    /// A node's ACL set to the schedule's (`zkcron acl apply`).
    Acl,
}

impl WriteKind {
    /// Its label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::Start => "start",
            Self::Final => "final",
            Self::Record => "record",
            Self::Prune => "prune",
            Self::Forget => "forget",
            Self::Due => "due",
            Self::Retry => "retry",
            Self::Guard => "guard",
            Self::Lease => "lease",
            Self::Lock => "lock",
            Self::Member => "member",
            Self::Control => "control",
            Self::Submit => "submit",
            Self::Parents => "parents",
            Self::Acl => "acl",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Debug, Default)]
struct Tally {
    ops: Family<KindLabel, Counter>,
    checks: Family<KindLabel, Counter>,
    transactions: Family<KindLabel, Counter>,
}

fn tally() -> &'static Tally {
    static TALLY: OnceLock<Tally> = OnceLock::new();
    TALLY.get_or_init(Tally::default)
}

/// One transaction of `ops` write ops was sent.
pub fn wrote(kind: WriteKind, ops: usize) {
    wrote_checked(kind, ops, 0);
}

/// One multi of `ops` write ops and `checks` check ops was sent.
pub fn wrote_checked(kind: WriteKind, ops: usize, checks: usize) {
    let label = KindLabel { kind: kind.label() };
    let tally = tally();
    tally.transactions.get_or_create(&label).inc();
    tally
        .ops
        .get_or_create(&label)
        .inc_by(u64::try_from(ops).unwrap_or(u64::MAX));
    if checks > 0 {
        tally
            .checks
            .get_or_create(&label)
            .inc_by(u64::try_from(checks).unwrap_or(u64::MAX));
    }
}

/// Registers the counters in `registry` (they are shared by every registry of the process).
pub fn register(registry: &mut Registry) {
    let tally = tally();
    registry.register(
        "zkcron_zk_write_ops",
        "ZooKeeper write ops this process sent (create, delete, set-data), by why",
        tally.ops.clone(),
    );
    registry.register(
        "zkcron_zk_checks",
        "ZooKeeper check ops this process sent in its multi-ops, by why",
        tally.checks.clone(),
    );
    registry.register(
        "zkcron_zk_transactions",
        "ZooKeeper requests that write this process sent (each one transaction, applied or failed), by why",
        tally.transactions.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn a_multi_counts_its_ops_its_checks_and_one_transaction() {
        let mut registry = Registry::default();
        register(&mut registry);
        let before = tally()
            .ops
            .get_or_create(&KindLabel { kind: "lease" })
            .get();
        wrote_checked(WriteKind::Lease, 3, 1);
        wrote(WriteKind::Lease, 2);
        let label = KindLabel { kind: "lease" };
        assert_eq!(tally().ops.get_or_create(&label).get(), before + 5);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(text.contains("zkcron_zk_write_ops_total{kind=\"lease\"}"));
        assert!(text.contains("zkcron_zk_checks_total{kind=\"lease\"}"));
        assert!(text.contains("zkcron_zk_transactions_total{kind=\"lease\"}"));
    }
}
