//! Every ZooKeeper path of a lock group, built in one place (DESIGN.md "ZooKeeper layout").
//!
//! Owns: the names of the lock, epoch, member, run-record, guard, delayed-submission and control
//! znodes under `<root>/<lock.name>`.
//! Must not: talk to ZooKeeper or know what the nodes hold (that is `lock` and `ledger`).

use crate::delayed::{DueBucket, Shard, SubmissionId};
use crate::ids::{JobName, NodeId};
use crate::ledger::record::{RunRecord, submission_node_name, tick_node_name};

/// The znodes of one lock group (DESIGN.md "ZooKeeper layout").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockPaths {
    pub dir: String,
    pub lock: String,
    pub epoch: String,
    pub members: String,
}

impl LockPaths {
    /// Paths of lock group `name` under `root` (e.g. `/zkcron` and `billing`).
    pub fn new(root: &str, name: &str) -> Self {
        let dir = format!("{}/{name}", root.trim_end_matches('/'));
        Self {
            lock: format!("{dir}/lock"),
            epoch: format!("{dir}/epoch"),
            members: format!("{dir}/members"),
            dir,
        }
    }

    /// This node's member znode.
    pub fn member(&self, node_id: &NodeId) -> String {
        format!("{}/{node_id}", self.members)
    }
}

/// The ledger's znodes under one lock group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerPaths {
    pub epoch: String,
    pub runs: String,
    /// Parent of the `running/<job>` guards: ephemeral, held for a run's life (concurrency).
    pub running: String,
    /// The delayed submissions, whose claims the ledger makes like ticks'.
    pub delayed: DelayedPaths,
}

impl LedgerPaths {
    /// The ledger of the lock group at `lock`.
    pub fn new(lock: &LockPaths) -> Self {
        Self {
            epoch: lock.epoch.clone(),
            runs: format!("{}/runs", lock.dir),
            running: format!("{}/running", lock.dir),
            delayed: DelayedPaths::new(lock),
        }
    }

    /// The parent of one job's records.
    pub fn job_runs(&self, job: &JobName) -> String {
        format!("{}/{job}", self.runs)
    }

    /// The guard that says a run of `job` is alive somewhere in the cluster.
    pub fn running(&self, job: &JobName) -> String {
        format!("{}/{job}", self.running)
    }

    /// One tick's record.
    pub fn record(&self, job: &JobName, scheduled_unix_ms: i64) -> String {
        format!("{}/{job}/{}", self.runs, tick_node_name(scheduled_unix_ms))
    }

    /// Where `record` is stored: a tick's or a submission's record.
    pub fn record_path(&self, record: &RunRecord) -> String {
        match &record.submission_id {
            Some(id) => self.submission_record(&record.job, record.scheduled_unix_ms, id),
            None => self.record(&record.job, record.scheduled_unix_ms),
        }
    }

    /// The record of a submission's run.
    pub fn submission_record(&self, job: &JobName, due_unix_ms: i64, id: &SubmissionId) -> String {
        format!(
            "{}/{job}/{}",
            self.runs,
            submission_node_name(due_unix_ms, id)
        )
    }
}

/// The delayed submissions of one lock group (docs/DELAYED.md):
/// `delayed/ids/<shard>/<id>` holds each submission (the id index, for idempotent submits), and
/// `delayed/due/<day>/<second>/<shard>/<id>` exists while it is pending (the due-time index the
/// owner reads bucket by bucket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedPaths {
    pub dir: String,
    pub ids: String,
    pub due: String,
    /// `open/<job>/<due_ms>-<id>`: a submission's run is claimed and has no final record yet, so
    /// the next owner finds it without reading every record (`on_interrupted`).
    pub open: String,
}

impl DelayedPaths {
    pub fn new(lock: &LockPaths) -> Self {
        let dir = format!("{}/delayed", lock.dir);
        Self {
            ids: format!("{dir}/ids"),
            due: format!("{dir}/due"),
            open: format!("{dir}/open"),
            dir,
        }
    }

    /// The id index's shard that holds `id`.
    pub fn id_shard(&self, shard: Shard) -> String {
        format!("{}/{}", self.ids, shard.name())
    }

    /// The submission node of `id`.
    pub fn submission(&self, id: &SubmissionId) -> String {
        format!("{}/{id}", self.id_shard(id.shard()))
    }

    /// The buckets of one UTC day.
    pub fn due_day(&self, day: i64) -> String {
        format!("{}/{day}", self.due)
    }

    /// The bucket of one second.
    pub fn due_bucket(&self, bucket: DueBucket) -> String {
        format!("{}/{}", self.due_day(bucket.day), bucket.second)
    }

    /// One shard of a bucket.
    pub fn due_shard(&self, bucket: DueBucket, shard: Shard) -> String {
        format!("{}/{}", self.due_bucket(bucket), shard.name())
    }

    /// The open runs of `job`'s submissions.
    pub fn open_of(&self, job: &JobName) -> String {
        format!("{}/{job}", self.open)
    }

    /// The open-run marker of submission `id` of `job`, due at `due_unix_ms`.
    pub fn open_run(&self, job: &JobName, due_unix_ms: i64, id: &SubmissionId) -> String {
        format!(
            "{}/{}",
            self.open_of(job),
            submission_node_name(due_unix_ms, id)
        )
    }

    /// The pending marker of `id`, due at `due_unix_ms`.
    pub fn pending(&self, due_unix_ms: i64, id: &SubmissionId) -> String {
        format!(
            "{}/{id}",
            self.due_shard(DueBucket::of(due_unix_ms), id.shard())
        )
    }
}

/// How operators steer a lock group (`zkcron pause`, `resume`, `release`; the HTTP API):
/// `control/paused/<job>` exists while the job is paused, `control/release` while the owner is
/// asked to hand the lock over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPaths {
    pub dir: String,
    pub paused: String,
    pub release: String,
}

impl ControlPaths {
    pub fn new(lock: &LockPaths) -> Self {
        let dir = format!("{}/control", lock.dir);
        Self {
            paused: format!("{dir}/paused"),
            release: format!("{dir}/release"),
            dir,
        }
    }

    /// The pause of `job`.
    pub fn pause(&self, job: &JobName) -> String {
        format!("{}/{job}", self.paused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delayed_paths_put_a_submission_in_its_shard_and_its_second() {
        let paths = DelayedPaths::new(&LockPaths::new("/zkcron/", "billing"));
        let id = SubmissionId::parse("order-42").expect("valid");
        assert_eq!(
            paths.submission(&id),
            "/zkcron/billing/delayed/ids/de/order-42"
        );
        assert_eq!(
            paths.pending(1_700_000_000_123, &id),
            "/zkcron/billing/delayed/due/19675/80000/de/order-42"
        );
        let ledger = LedgerPaths::new(&LockPaths::new("/zkcron", "billing"));
        assert_eq!(
            ledger.submission_record(&JobName::new("close"), 1_700_000_000_123, &id),
            "/zkcron/billing/runs/close/1700000000123-order-42"
        );
    }
}
