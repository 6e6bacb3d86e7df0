//! Every ZooKeeper path of a lock group, built in one place (DESIGN.md "ZooKeeper layout").
//!
//! Owns: the names of the lock, epoch, member, run-record, guard, delayed-submission and control
//! znodes under `<root>/<lock.name>`, and reading a run record's name back.
//! Must not: talk to ZooKeeper or know what the nodes hold (that is `lock` and `ledger`).

use crate::delayed::submission::{DueBucket, ForgetBucket, Shard, Submission, SubmissionId};
use crate::ids::{JobName, NodeId};

/// The ledger's format, which a member publishes (the highest it reads). Format 2 keeps a
/// submission's run open by its record alone (`crate::ledger::OpenRuns::ByRecord`); an owner writes it only
/// while every live member reads it, since any of them may own the lock next and must find the
/// runs left open. A member that publishes none reads format 1.
pub const LEDGER_FORMAT: u32 = 2;

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

    /// The lock of named group `group` inside this one (issue 19): its own `lock` and `epoch`
    /// under `groups/<group>`, the members shared. The default group is `self`, laid out as
    /// before groups existed.
    pub fn group(&self, group: &str) -> Self {
        let dir = format!("{}/groups/{group}", self.dir);
        Self {
            lock: format!("{dir}/lock"),
            epoch: format!("{dir}/epoch"),
            members: self.members.clone(),
            dir,
        }
    }
}

/// Every path of one lock group, built once: its lock's, its ledger's (the delayed submissions'
/// among them) and its steering's. What the clients of a group (status, steering, the console,
/// the submitters) read and write, so that none builds them again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPaths {
    pub lock: LockPaths,
    pub ledger: LedgerPaths,
    pub control: ControlPaths,
}

impl GroupPaths {
    pub fn new(lock: LockPaths) -> Self {
        Self {
            ledger: LedgerPaths::new(&lock),
            control: ControlPaths::new(&lock),
            lock,
        }
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
    /// Parent of the cluster-wide caps: `limits/<name>/lease-<seq>`, ephemeral (issue 19).
    pub limits: String,
    /// `retries/<job>/<tick_ms>`: a tick whose failed run promises a retry, so the next owner
    /// finds it however many newer ticks there are (issue 24).
    pub retries: String,
    /// `after/<child>/<instant_ms>~<parent>`: a parent's run ended, for its child's group
    /// owner to run (or skip) the child at that instant (issue 36).
    pub after: String,
}

impl LedgerPaths {
    /// The ledger of the lock group at `lock`.
    pub fn new(lock: &LockPaths) -> Self {
        Self::fenced_by(lock, lock)
    }

    /// The ledger under `base`, its claims fenced by the epoch of `group` (`base` itself, or
    /// one of its named groups): records stay keyed by job whatever group owns the job, so a
    /// job that moves between groups keeps one claim per tick (issue 19).
    pub fn fenced_by(base: &LockPaths, group: &LockPaths) -> Self {
        Self {
            epoch: group.epoch.clone(),
            runs: format!("{}/runs", base.dir),
            running: format!("{}/running", base.dir),
            delayed: DelayedPaths::new(base),
            limits: format!("{}/limits", base.dir),
            retries: format!("{}/retries", base.dir),
            after: format!("{}/after", base.dir),
        }
    }

    /// The marks left for `child` by its parents' runs.
    pub fn after_of(&self, child: &JobName) -> String {
        format!("{}/{child}", self.after)
    }

    /// The mark `parent`'s run at `scheduled_unix_ms` leaves for `child`.
    pub fn chain_mark(&self, child: &JobName, scheduled_unix_ms: i64, parent: &JobName) -> String {
        self.mark(child, &MarkName::of_tick(scheduled_unix_ms, parent))
    }

    /// The mark `name` left for `child`.
    pub fn mark(&self, child: &JobName, name: &MarkName) -> String {
        format!("{}/{}", self.after_of(child), name.node_name())
    }

    /// The promised-retry markers of `job`'s ticks.
    pub fn retries_of(&self, job: &JobName) -> String {
        format!("{}/{job}", self.retries)
    }

    /// The marker of a retry promised for `job`'s tick at `scheduled_unix_ms`.
    pub fn retry_marker(&self, job: &JobName, scheduled_unix_ms: i64) -> String {
        format!(
            "{}/{}",
            self.retries_of(job),
            tick_node_name(scheduled_unix_ms)
        )
    }

    /// The leases of limit `name`.
    pub fn limit(&self, name: &str) -> String {
        format!("{}/{name}", self.limits)
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

    /// `node`'s record of a broadcast job's tick.
    pub fn broadcast_record(&self, job: &JobName, scheduled_unix_ms: i64, node: &NodeId) -> String {
        format!(
            "{}/{job}/{}",
            self.runs,
            broadcast_node_name(scheduled_unix_ms, node)
        )
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
/// owner reads bucket by bucket); `delayed/forget/<day>/<minute>/ids-<seq>` lists the
/// tombstones in the id index that may go once that minute has passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedPaths {
    pub dir: String,
    pub ids: String,
    pub due: String,
    pub forget: String,
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
            forget: format!("{dir}/forget"),
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

    /// The forget lists of one UTC day.
    pub fn forget_day(&self, day: i64) -> String {
        format!("{}/{day}", self.forget)
    }

    /// The forget lists of one minute: their ids may go once it has passed.
    pub fn forget_minute(&self, bucket: ForgetBucket) -> String {
        format!("{}/{}", self.forget_day(bucket.day), bucket.minute)
    }

    /// The prefix of a new forget list in `bucket` (a sequential node).
    pub fn forget_list(&self, bucket: ForgetBucket) -> String {
        format!("{}/ids-", self.forget_minute(bucket))
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
    /// Submission `id`'s pending marker, named as it was written (`<id>~<job>` or `<id>`).
    pub fn marker_of(&self, id: &SubmissionId, submission: &Submission) -> String {
        let job = submission.marker_names_job.then_some(&submission.job);
        self.pending(submission.due_unix_ms, id, job)
    }

    pub fn pending(&self, due_unix_ms: i64, id: &SubmissionId, job: Option<&JobName>) -> String {
        format!(
            "{}/{}",
            self.due_shard(DueBucket::of(due_unix_ms), id.shard()),
            marker_name(id, job)
        )
    }
}

/// Between a submission id and its job in a pending marker's name: no id contains it.
const MARKER_JOB_SEPARATOR: char = '~';

/// A pending marker's name: `<id>`, or `<id>~<job>` where the marker names its job (lock
/// groups: an owner then reads only its own groups' submissions, issue 19).
pub fn marker_name(id: &SubmissionId, job: Option<&JobName>) -> String {
    match job {
        Some(job) => format!("{id}{MARKER_JOB_SEPARATOR}{job}"),
        None => id.to_string(),
    }
}

/// A pending marker's name read back: the id, and the job when the name carries it; `None` for
/// a name that is neither form. A job name may contain `~`; an id may not, so the first one
/// splits them.
pub fn parse_marker_name(name: &str) -> Option<(SubmissionId, Option<JobName>)> {
    match name.split_once(MARKER_JOB_SEPARATOR) {
        Some((id, job)) if crate::ids::validate_znode_name(job).is_ok() => {
            Some((SubmissionId::parse(id).ok()?, Some(JobName::new(job))))
        }
        Some(_) => None,
        None => Some((SubmissionId::parse(name).ok()?, None)),
    }
}

/// Where the audit trail lives (`audit/<day>/e-<seq>`, issue 34): one sequential node per
/// operator action, in buckets of a UTC day so that a whole day is pruned at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPaths {
    pub dir: String,
}

impl AuditPaths {
    pub fn new(lock: &LockPaths) -> Self {
        Self {
            dir: format!("{}/audit", lock.dir),
        }
    }

    /// The entries of UTC day `day` (days since 1970-01-01).
    pub fn day(&self, day: i64) -> String {
        format!("{}/{day}", self.dir)
    }

    /// The prefix of a new entry of `day` (a sequential node).
    pub fn entry(&self, day: i64) -> String {
        format!("{}/e-", self.day(day))
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
    /// `control/backfill`: the backfill requests, sequential nodes.
    pub backfill: String,
}

impl ControlPaths {
    pub fn new(lock: &LockPaths) -> Self {
        let dir = format!("{}/control", lock.dir);
        Self {
            paused: format!("{dir}/paused"),
            release: format!("{dir}/release"),
            backfill: format!("{dir}/backfill"),
            dir,
        }
    }

    /// The backfill request named `name` (a child of [`Self::backfill`]).
    pub fn backfill_request(&self, name: &str) -> String {
        format!("{}/{name}", self.backfill)
    }

    /// The control nodes of named group `group` of the lock group at `base` (issue 19): the
    /// pauses are `base`'s, since a pause belongs to a job whatever its group; the release
    /// request is the group's own, `control/groups/<group>/release`, under the one `control/`
    /// every owner watches.
    pub fn of_group(base: &LockPaths, group: &str) -> Self {
        let base = Self::new(base);
        Self {
            release: format!("{}/groups/{group}/release", base.dir),
            ..base
        }
    }

    /// The pause of `job`.
    pub fn pause(&self, job: &JobName) -> String {
        format!("{}/{job}", self.paused)
    }

    /// The node the release request is made in.
    pub fn release_parent(&self) -> &str {
        self.release
            .rsplit_once('/')
            .map_or(self.dir.as_str(), |(parent, _)| parent)
    }
}

/// The child name of a tick's record: its scheduled instant in ms, as a decimal number.
pub fn tick_node_name(scheduled_unix_ms: i64) -> String {
    scheduled_unix_ms.to_string()
}

/// The child name of a submission's record: its due instant in ms, `-`, its id — so a job's
/// records sort by time whether they are ticks or submissions.
pub fn submission_node_name(due_unix_ms: i64, id: &SubmissionId) -> String {
    format!("{due_unix_ms}-{id}")
}

/// The child name of one node's record of a broadcast job's tick: the tick's instant in ms,
/// `~`, the node (issue 36). Not `-`, which names a submission's record; a zkcron before
/// broadcasts skips the name as foreign.
pub fn broadcast_node_name(scheduled_unix_ms: i64, node: &NodeId) -> String {
    format!("{}~{node}", tick_node_name(scheduled_unix_ms))
}

/// What a record's child name stands for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RecordName {
    /// The tick's instant, or the submission's due instant.
    pub scheduled_unix_ms: i64,
    /// `Some` for a submission's record.
    pub submission: Option<SubmissionId>,
    /// `Some` for one node's record of a broadcast job's tick.
    pub node: Option<NodeId>,
}

/// How many of a job's records a prune keeps (its `history`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Its newest records: a job with one record per tick or submission.
    Records(usize),
    /// The records of its newest ticks, however many members recorded each: a broadcast
    /// job's, whose records per tick rise and fall with its members, so that a count of
    /// records would keep fewer ticks while a member is away.
    Ticks(usize),
}

impl Keep {
    /// How many of `names` (sorted oldest first, as [`RecordName`]'s order) are beyond what
    /// is kept: the oldest that many go.
    pub fn excess(self, names: &[RecordName]) -> usize {
        match self {
            Keep::Records(keep) => names.len().saturating_sub(keep),
            Keep::Ticks(keep) => {
                let mut ticks = 0;
                let mut newer: Option<i64> = None;
                for (index, name) in names.iter().enumerate().rev() {
                    if newer != Some(name.scheduled_unix_ms) {
                        newer = Some(name.scheduled_unix_ms);
                        ticks += 1;
                        if ticks > keep {
                            return index + 1;
                        }
                    }
                }
                0
            }
        }
    }
}

impl RecordName {
    /// A tick's record.
    pub fn tick(scheduled_unix_ms: i64) -> Self {
        Self {
            scheduled_unix_ms,
            submission: None,
            node: None,
        }
    }

    /// Parses a child name of `runs/<job>`; `None` for foreign names.
    pub fn parse(name: &str) -> Option<Self> {
        if let Some((ms, node)) = name.split_once('~') {
            crate::ids::validate_znode_name(node).ok()?;
            return Some(Self {
                node: Some(NodeId::new(node.to_owned())),
                ..Self::tick(parse_tick_node_name(ms)?)
            });
        }
        let (ms, id) = match name.split_once('-') {
            Some((ms, id)) => (ms, Some(SubmissionId::parse(id).ok()?)),
            None => (name, None),
        };
        Some(Self {
            submission: id,
            ..Self::tick(parse_tick_node_name(ms)?)
        })
    }

    /// The child name this stands for.
    pub fn node_name(&self) -> String {
        match (&self.submission, &self.node) {
            (Some(id), _) => submission_node_name(self.scheduled_unix_ms, id),
            (None, Some(node)) => broadcast_node_name(self.scheduled_unix_ms, node),
            (None, None) => tick_node_name(self.scheduled_unix_ms),
        }
    }
}

/// A mark's node name under `after/<child>`: the parent's instant and the parent,
/// `<instant_ms>~<parent>`, or for a submission's run its due time and id too,
/// `<due_ms>-<id>~<parent>` (no job name or id holds a `~`; a zkcron before submitted parents
/// skips that name as foreign).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MarkName {
    pub scheduled_unix_ms: i64,
    /// The parent's run is a submission's (or a trigger's): its id.
    pub submission: Option<SubmissionId>,
    pub parent: JobName,
}

impl MarkName {
    /// The name of the mark a tick's run of `parent` leaves.
    pub fn of_tick(scheduled_unix_ms: i64, parent: &JobName) -> Self {
        Self {
            scheduled_unix_ms,
            submission: None,
            parent: parent.clone(),
        }
    }

    /// The node name this stands for.
    pub fn node_name(&self) -> String {
        match &self.submission {
            None => format!("{}~{}", tick_node_name(self.scheduled_unix_ms), self.parent),
            Some(id) => format!(
                "{}~{}",
                submission_node_name(self.scheduled_unix_ms, id),
                self.parent
            ),
        }
    }

    /// Parses a child name of `after/<child>`; `None` for foreign names.
    pub fn parse(name: &str) -> Option<Self> {
        let (run, parent) = name.split_once('~')?;
        if parent.is_empty() || parent.contains('~') {
            return None;
        }
        let (ms, submission) = match run.split_once('-') {
            None => (run, None),
            Some((ms, id)) => (ms, Some(SubmissionId::parse(id).ok()?)),
        };
        Some(Self {
            scheduled_unix_ms: parse_tick_node_name(ms)?,
            submission,
            parent: JobName::new(parent.to_owned()),
        })
    }
}

/// The scheduled instant a record's child name stands for; `None` for foreign names.
pub fn parse_tick_node_name(name: &str) -> Option<i64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// `<runs>/<job>` → (job, None); `<runs>/<job>/<record>` → (job, Some(record)); anything else
/// (foreign names below a job) is no record's.
pub fn parse_record_path(runs: &str, path: &str) -> Option<(JobName, Option<RecordName>)> {
    let rest = path.strip_prefix(runs)?.strip_prefix('/')?;
    match rest.split_once('/') {
        None if !rest.is_empty() => Some((JobName::new(rest.to_owned()), None)),
        Some((job, name)) if !name.contains('/') => {
            Some((JobName::new(job.to_owned()), Some(RecordName::parse(name)?)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_below_runs_name_a_job_or_a_record() {
        let runs = "/zkcron/main/runs";
        assert_eq!(
            parse_record_path(runs, "/zkcron/main/runs/backup"),
            Some((JobName::new("backup".to_owned()), None))
        );
        let (job, name) = parse_record_path(runs, "/zkcron/main/runs/backup/1700000000000")
            .unwrap_or_else(|| panic!("a record path"));
        assert_eq!(job.as_str(), "backup");
        assert_eq!(name.map(|n| n.scheduled_unix_ms), Some(1_700_000_000_000));
        assert_eq!(
            parse_record_path(runs, "/zkcron/main/runs/backup/not-a-record"),
            None
        );
        assert_eq!(parse_record_path(runs, "/zkcron/main/running/backup"), None);
        assert_eq!(parse_record_path(runs, "/zkcron/main/runs"), None);
    }

    #[test]
    fn a_prune_keeps_records_or_the_records_of_whole_ticks() {
        let name = |ms: i64, node: &str| RecordName {
            scheduled_unix_ms: ms,
            submission: None,
            node: Some(NodeId::new(node)),
        };
        // Oldest first: tick 1 by three members, tick 2 by one, tick 3 by two.
        let names = [
            name(1, "a"),
            name(1, "b"),
            name(1, "c"),
            name(2, "a"),
            name(3, "a"),
            name(3, "b"),
        ];
        assert_eq!(Keep::Records(4).excess(&names), 2);
        assert_eq!(Keep::Records(9).excess(&names), 0);
        assert_eq!(Keep::Ticks(2).excess(&names), 3, "tick 1 goes whole");
        assert_eq!(Keep::Ticks(1).excess(&names), 4);
        assert_eq!(Keep::Ticks(3).excess(&names), 0);
        assert_eq!(Keep::Ticks(0).excess(&names), 6);
    }

    #[test]
    fn a_mark_name_reads_back_and_foreign_names_are_refused() {
        let name = MarkName::of_tick(1_700_000_000_000, &JobName::new("extract".to_owned()));
        assert_eq!(name.node_name(), "1700000000000~extract");
        assert_eq!(MarkName::parse(&name.node_name()), Some(name.clone()));
        let id = SubmissionId::parse("order-42.a").expect("valid");
        let submitted = MarkName {
            submission: Some(id),
            ..name
        };
        assert_eq!(submitted.node_name(), "1700000000000-order-42.a~extract");
        assert_eq!(MarkName::parse(&submitted.node_name()), Some(submitted));
        for foreign in [
            "",
            "1700000000000",
            "~extract",
            "17x~extract",
            "1~",
            "1~a~b",
            "1-~extract",
            "1-a/b~extract",
            "-a~extract",
        ] {
            assert_eq!(MarkName::parse(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn delayed_paths_put_a_submission_in_its_shard_and_its_second() {
        let paths = DelayedPaths::new(&LockPaths::new("/zkcron/", "billing"));
        let id = SubmissionId::parse("order-42").expect("valid");
        assert_eq!(
            paths.submission(&id),
            "/zkcron/billing/delayed/ids/de/order-42"
        );
        assert_eq!(
            paths.pending(1_700_000_000_123, &id, None),
            "/zkcron/billing/delayed/due/19675/80000/de/order-42"
        );
        let ledger = LedgerPaths::new(&LockPaths::new("/zkcron", "billing"));
        assert_eq!(
            ledger.submission_record(&JobName::new("close"), 1_700_000_000_123, &id),
            "/zkcron/billing/runs/close/1700000000123-order-42"
        );
    }

    #[test]
    fn a_groups_paths_built_once_are_the_ones_each_part_builds() {
        let lock = LockPaths::new("/zkcron", "billing");
        let paths = GroupPaths::new(lock.clone());
        assert_eq!(paths.ledger, LedgerPaths::new(&lock));
        assert_eq!(paths.control, ControlPaths::new(&lock));
        assert_eq!(paths.ledger.delayed, DelayedPaths::new(&lock));
        assert_eq!(paths.control.paused, "/zkcron/billing/control/paused");
        assert_eq!(paths.lock, lock);
    }

    #[test]
    fn record_names_tell_ticks_from_submissions() {
        let tick = RecordName::parse("1700000000000").expect("a tick");
        assert_eq!(
            (tick.scheduled_unix_ms, &tick.submission),
            (1_700_000_000_000, &None)
        );
        let sub = RecordName::parse("1700000000000-order-42").expect("a submission");
        assert_eq!(
            sub.submission.as_ref().map(SubmissionId::as_str),
            Some("order-42")
        );
        assert_eq!(sub.node_name(), "1700000000000-order-42");
        assert!(
            tick < sub,
            "a tick sorts before a submission due at the same instant"
        );
        for foreign in ["", "-x", "12-", "12-a/b", "x-1", "lock"] {
            assert_eq!(RecordName::parse(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_broadcast_record_names_its_node_and_an_older_reader_skips_it() {
        let name = RecordName::parse("1700000000000~web-1").expect("a node's record");
        assert_eq!(name.node, Some(NodeId::new("web-1")));
        assert_eq!(name.submission, None, "the node's `-` names no submission");
        assert_eq!(name.node_name(), "1700000000000~web-1");
        let ledger = LedgerPaths::new(&LockPaths::new("/zkcron", "billing"));
        let node = NodeId::new("web-1");
        assert_eq!(
            ledger.broadcast_record(&JobName::new("rotate"), 1_700_000_000_000, &node),
            "/zkcron/billing/runs/rotate/1700000000000~web-1"
        );
        // What a zkcron before broadcasts did with the name: neither a tick nor a submission.
        let older = |name: &str| match name.split_once('-') {
            Some((ms, id)) => parse_tick_node_name(ms)
                .zip(SubmissionId::parse(id).ok())
                .map(|_| ()),
            None => parse_tick_node_name(name).map(|_| ()),
        };
        assert_eq!(older("1700000000000~web-1"), None);
        assert_eq!(older("1700000000000~web"), None);
        assert_eq!(RecordName::parse("1700000000000~"), None);
        assert_eq!(RecordName::parse("x~web"), None);
    }

    #[test]
    fn foreign_record_names_are_refused_not_panicked_on() {
        assert_eq!(
            parse_tick_node_name("1700000000000"),
            Some(1_700_000_000_000)
        );
        for foreign in ["", "-1", "12a", "lock", "99999999999999999999999"] {
            assert_eq!(parse_tick_node_name(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_marker_names_its_job_after_the_id_and_reads_back() {
        let id = SubmissionId::parse("order-42").expect("valid");
        let job = JobName::new("close~order");
        assert_eq!(marker_name(&id, None), "order-42");
        assert_eq!(marker_name(&id, Some(&job)), "order-42~close~order");
        assert_eq!(
            parse_marker_name("order-42~close~order"),
            Some((id.clone(), Some(job)))
        );
        assert_eq!(parse_marker_name("order-42"), Some((id, None)));
        for foreign in ["", "~job", "bad id~job", "order-42~"] {
            assert_eq!(parse_marker_name(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_named_group_has_its_own_lock_and_release_and_shares_the_rest() {
        let base = LockPaths::new("/zkcron", "billing");
        let group = base.group("eu");
        assert_eq!(group.lock, "/zkcron/billing/groups/eu/lock");
        assert_eq!(group.epoch, "/zkcron/billing/groups/eu/epoch");
        assert_eq!(
            group.members, base.members,
            "one membership for every group"
        );
        let ledger = LedgerPaths::fenced_by(&base, &group);
        assert_eq!(ledger.epoch, group.epoch);
        assert_eq!(
            ledger.runs,
            LedgerPaths::new(&base).runs,
            "records keyed by job"
        );
        let control = ControlPaths::of_group(&base, "eu");
        assert_eq!(control.paused, ControlPaths::new(&base).paused);
        assert_eq!(control.release, "/zkcron/billing/control/groups/eu/release");
        assert_eq!(
            control.release_parent(),
            "/zkcron/billing/control/groups/eu"
        );
        assert_eq!(
            ControlPaths::new(&base).release_parent(),
            "/zkcron/billing/control"
        );
    }
}
