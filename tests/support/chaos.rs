//! The chaos suite's cluster (issue "Faster recovery and proof under faults"): a real 3-server
//! ensemble and N real `zkcron run` nodes, each reaching ZooKeeper only through proxies of its
//! own, the faults a scenario injects, and the report a scenario ends with.
//!
//! Owns: the nodes' schedule (a 1 s job and a 10 s `forbid` job that runs 6 s, both logging their
//! start and end to one file; or, for a fleet, lock groups each with a 1 s job and some with the
//! 10 s one too), the timeline of injected faults and membership changes, reading back what
//! happened (that log, each node's own log lines about each group's lock, the ledger in
//! ZooKeeper, who owns each group) and the scenario's JSON line.
//! Must not: judge what happened — [`invariants::check`] does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use tempfile::TempDir;
use zookeeper_client::{Acls, Client, CreateMode};

use zkcron::layout::{RecordName, parse_tick_node_name};
use zkcron::run::{RunRecord, RunStatus};

use super::daemon::{DaemonNode, now_ms, schedule_text};
use super::faked_clock::FakedClock;
use super::invariants::{self, Observed, OwnerSample, Run, Violation};
use super::proxy::{Fault, Proxy};
use super::zk_cluster::{ServerOptions, ZkEnsemble, fault_tests_alone, try_wait_for};

/// The session timeout the reporter ran with.
pub const SESSION: Duration = Duration::from_secs(4);
/// Shorter than the default 10 s, to keep scenarios short; still the margin between a lost
/// session and a peer's first fire.
pub const TAKEOVER: Duration = Duration::from_secs(3);
/// How long a crashed owner may take to be replaced: DESIGN.md promise 2 (the session, then
/// the takeover delay), plus a server's tick (ZooKeeper expires a session at the first tick
/// past its timeout), the CLI's jitter (a tenth of the delay) and a second for a loaded 2-core
/// machine running 3 JVMs. Without the tick, CI once measured 8330 ms against 8300.
pub const REPLACED_WITHIN: Duration = Duration::from_millis(4000 + 200 + 3000 + 300 + 1000);

/// The 1 s job.
pub const FAST: &str = "fast";
/// The 10 s job that runs 6 s, `forbid`.
pub const LONG: &str = "long";
/// The on-demand job that delayed submissions run (issue 31): it appends its submission id and
/// node to a log of its own.
pub const SUB: &str = "sub";
/// The job of the upgrade check whose every first attempt fails and promises a retry
/// [`RETRY_BACKOFF`] later: each attempt appends `tick attempt node at_ms` to a log of its own.
pub const RETRIED: &str = "retried";
/// The job that runs after each run of [`FAST`] (issue 36): it appends `tick node parent_run_id`
/// to a log of its own.
pub const CHAINED: &str = "fast-after";
/// The job that runs after each submission's run of [`SUB`] (issue 36), a submission of its own
/// with `sub`'s payload: it appends `submission_id node parent_run_id` to a log of its own.
pub const SUB_AFTER: &str = "sub-after";
/// The job every live node runs each second (`broadcast = true`, issue 36): it appends
/// `tick node` to a log of its own.
pub const BROADCAST: &str = "fast-all";
/// Longer than a node's graceful stop, so that a rolling step can fall between a first attempt
/// and its retry.
pub const RETRY_BACKOFF: Duration = Duration::from_secs(3);
const LONG_PERIOD_MS: i64 = 10_000;
/// `[lock] rebalance_after` of a fleet: short, so that a scenario sees its moves.
pub const SETTLE: Duration = Duration::from_secs(2);
/// Between two moves by one node: a tenth of [`SETTLE`], at least a second (src/lock/placement.rs).
pub const SPACING: Duration = Duration::from_secs(1);
/// How long the harness's own session may take to open (see `ChaosCluster::client`). A minute:
/// after a pause of every server, the servers in CI once answered no connect request for more
/// than 30 s after their followers had synced (each attempt ~7 s, four in 30 s), while zkcron's
/// own nodes kept to their invariants; ZooKeeper's own election backs off up to 60 s
/// (`maxNotificationInterval`).
const CLIENT_WITHIN: Duration = Duration::from_secs(60);
const LOCK: &str = "chaos";
const ROOT: &str = "/zkcron/chaos";
/// How often the owner samples are taken from the nodes' lock timelines.
const SAMPLE_EVERY_MS: i64 = 50;
/// What a record skipped for a run of its job still alive on its node says (src/fire/machine).
const SKIPPED_BEHIND_OWN_RUN: &str = "still alive on this node";
/// What the jobs that log the time start with: the true clock, not their node's faked one
/// (libfaketime is inherited through `LD_PRELOAD`).
const TRUE_CLOCK: &str = "\"/usr/bin/env\", \"-u\", \"LD_PRELOAD\", ";
/// How long a process woken from SIGSTOP may take to say what it now believes about the lock:
/// its runtime's threads, then its lock driver, must be scheduled on a loaded 2-core machine.
/// An owner that goes on believing it owns for longer than this is caught.
const WAKE_GRACE_MS: i64 = 500;

/// One job of the nodes' schedule.
#[derive(Debug, Clone)]
struct ChaosJob {
    name: String,
    /// Its lock group; `""` is the default group.
    group: String,
    /// The 10 s `forbid` job that runs 6 s; else the 1 s job.
    long: bool,
}

impl ChaosJob {
    fn period_ms(&self) -> i64 {
        if self.long { LONG_PERIOD_MS } else { 1000 }
    }
}

/// What the nodes run: their named lock groups (besides the default one) and the jobs.
#[derive(Debug, Clone)]
struct Fleet {
    groups: Vec<String>,
    jobs: Vec<ChaosJob>,
    /// Also the on-demand job [`SUB`] in the default group, for delayed submissions.
    submissions: bool,
    /// Also [`SUB_AFTER`] after [`SUB`]: each submission's run makes one of its own.
    submitted_chain: bool,
    /// Also [`RETRIED`] in the default group, promising a retry at every tick.
    retried: bool,
    /// Also [`CHAINED`] in the default group, after [`FAST`].
    chained: bool,
    /// Also [`BROADCAST`] in the default group, on every node.
    broadcast: bool,
    /// The zkcron build the nodes start with: this one when `None` (an older one for the
    /// upgrade check).
    binary: Option<PathBuf>,
    /// The scheduled jobs' `history`: every record of the run stays to be checked.
    history: usize,
}

impl Fleet {
    /// [`FAST`] and [`LONG`] in the default group, [`CHAINED`] after `fast` and [`BROADCAST`]
    /// on every node: every scenario but the fleet's.
    fn single() -> Self {
        Self {
            chained: true,
            broadcast: true,
            ..Self::with_groups(0)
        }
    }

    /// The default group and `named` groups `g01`…, each with a 1 s job (`fast`, `fast-g01`…),
    /// and every fourth (the default, `g04`, `g08`…) with the 10 s `forbid` job too (`long`,
    /// `long-g04`…), so that a move can fall inside a run of it.
    fn with_groups(named: usize) -> Self {
        let groups: Vec<String> = (1..=named).map(|i| format!("g{i:02}")).collect();
        let mut jobs = Vec::new();
        for (i, group) in std::iter::once("")
            .chain(groups.iter().map(String::as_str))
            .enumerate()
        {
            let suffix = if group.is_empty() {
                String::new()
            } else {
                format!("-{group}")
            };
            jobs.push(ChaosJob {
                name: format!("{FAST}{suffix}"),
                group: group.to_owned(),
                long: false,
            });
            if i % 4 == 0 {
                jobs.push(ChaosJob {
                    name: format!("{LONG}{suffix}"),
                    group: group.to_owned(),
                    long: true,
                });
            }
        }
        Self {
            groups,
            jobs,
            submissions: false,
            submitted_chain: false,
            retried: false,
            chained: false,
            broadcast: false,
            binary: None,
            history: 1000,
        }
    }

    /// Every group, the default one (`""`) first.
    fn all_groups(&self) -> impl Iterator<Item = &str> {
        std::iter::once("").chain(self.groups.iter().map(String::as_str))
    }
}

/// Submissions made by [`ChaosCluster::submit`].
pub struct Submitted {
    pub ids: Vec<String>,
    /// When the last of them is due.
    pub last_due_ms: i64,
}

/// The lock node of `group` (`""`: the default group).
fn lock_path(group: &str) -> String {
    if group.is_empty() {
        format!("{ROOT}/lock")
    } else {
        format!("{ROOT}/groups/{group}/lock")
    }
}

/// The group whose lock node is `path`, if it is one.
fn group_of_lock(path: &str) -> Option<String> {
    let under = path.strip_prefix(ROOT)?;
    if under == "/lock" {
        return Some(String::new());
    }
    let group = under.strip_prefix("/groups/")?.strip_suffix("/lock")?;
    Some(group.to_owned())
}

/// Who owns each group (`""`: the default group), by the node id its lock node names.
pub type Owners = BTreeMap<String, Option<String>>;

/// Groups whose owner changed between two readings, leaving out those `dead` owned (they had
/// to move).
pub fn moves(before: &Owners, after: &Owners, dead: Option<&str>) -> usize {
    before
        .iter()
        .filter(|(group, owner)| owner.as_deref() != dead && after.get(*group) != Some(owner))
        .count()
}

/// One node: its proxies (one per server) and its process while it runs.
struct ChaosNode {
    id: String,
    proxies: Vec<Proxy>,
    daemon: Option<DaemonNode>,
    log: PathBuf,
    /// The build it runs: this one when `None`.
    binary: Option<PathBuf>,
    /// Its wall clock, when it is not the true one.
    clock: Option<FakedClock>,
}

impl ChaosNode {
    /// Its JSON log, line by line: each line, its entry, and its true time in Unix ms (the
    /// line is stamped by the node's own clock, read in order through its steps).
    fn stamped_log(&self) -> Vec<StampedLine> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut lines: Vec<StampedLine> = text
            .lines()
            .map(|line| {
                let entry = serde_json::from_str::<serde_json::Value>(line).ok();
                StampedLine {
                    line: line.to_owned(),
                    entry,
                    at_ms: None,
                }
            })
            .collect();
        let stamped: Vec<Option<i64>> = lines
            .iter()
            .map(|line| {
                let stamp = line.entry.as_ref()?["timestamp"].as_str()?;
                let at = chrono::DateTime::parse_from_rfc3339(stamp).ok()?;
                Some(at.timestamp_millis())
            })
            .collect();
        let true_ms = match &self.clock {
            Some(clock) => clock.to_true_in_order(&stamped),
            None => stamped,
        };
        for (line, at_ms) in lines.iter_mut().zip(true_ms) {
            line.at_ms = at_ms;
        }
        lines
    }
}

/// A line of a node's log, read by [`ChaosNode::stamped_log`].
struct StampedLine {
    line: String,
    entry: Option<serde_json::Value>,
    at_ms: Option<i64>,
}

/// When a node could not answer for itself: dead or stopped (SIGSTOP).
#[derive(Debug, Clone, Copy)]
struct Silent {
    node: usize,
    from_ms: i64,
    to_ms: Option<i64>,
}

/// The fault a scenario injected, for the report.
#[derive(Debug, Clone)]
pub struct FaultWindow {
    /// When the fault began.
    pub from_ms: i64,
    /// When it ended: healed, resumed, restarted — or, for a fault that does not end (a node
    /// killed for good), when the cluster had recovered from it.
    pub to_ms: i64,
    /// After `to_ms`, how long ticks may still be missed (a takeover in progress).
    pub settle: Duration,
    /// The owner the fault hit, if it hit one: the failover gap is measured to the first fire
    /// of another node.
    pub owner: Option<String>,
}

impl FaultWindow {
    /// A fault from `from_ms` to `to_ms` that hit no owner in particular.
    pub fn between(from_ms: i64, to_ms: i64, settle: Duration) -> Self {
        Self {
            from_ms,
            to_ms,
            settle,
            owner: None,
        }
    }

    /// The fault hit the owner `id`: the failover gap is measured to another node's first fire.
    pub fn hitting(self, id: String) -> Self {
        Self {
            owner: Some(id),
            ..self
        }
    }
}

/// A scenario's outcome: its JSON line and what `invariants::check` found.
#[derive(Debug)]
pub struct Report {
    pub json: serde_json::Value,
    pub violations: Vec<Violation>,
    pub failover_gap_ms: Option<i64>,
    pub resume_gap_ms: Option<i64>,
    /// Every node's lines about the lock, its session and its clock: what a failover too slow
    /// in CI is told from (the temp dir is gone by then).
    pub lock_logs: String,
}

impl Report {
    /// Panics unless every invariant held and another node fired within `bound` of the fault.
    pub fn assert_failover_within(&self, bound: Duration) {
        self.assert_holds();
        let gap = self.failover_gap_ms.expect("another node fired");
        let bound = i64::try_from(bound.as_millis()).expect("fits");
        assert!(
            gap <= bound,
            "failover after {gap} ms: {}\n{}",
            self.json,
            self.lock_logs
        );
    }

    /// Panics, naming every violation, if there was one.
    pub fn assert_holds(&self) {
        assert!(
            self.violations.is_empty(),
            "{} violation(s): {:#?}\n{}",
            self.violations.len(),
            self.violations,
            self.json
        );
    }
}

/// The ensemble, the nodes, the job log and the fault timeline of one scenario.
pub struct ChaosCluster {
    pub ensemble: ZkEnsemble,
    name: String,
    fleet: Fleet,
    nodes: Vec<ChaosNode>,
    dir: TempDir,
    job_log: PathBuf,
    /// What [`SUB`]'s runs logged: `id node attempt`, a line each.
    sub_log: PathBuf,
    /// What [`RETRIED`]'s attempts logged: `tick attempt node at_ms`, a line each.
    retry_log: PathBuf,
    /// What [`CHAINED`]'s runs logged: `tick node parent_run_id`, a line each.
    chain_log: PathBuf,
    /// What [`SUB_AFTER`]'s runs logged: `submission_id node parent_run_id`, a line each.
    sub_after_log: PathBuf,
    /// What [`BROADCAST`]'s runs logged: `tick node`, a line each.
    broadcast_log: PathBuf,
    silent: Vec<Silent>,
    started_ms: i64,
    /// The first tick of every job that had to fire: the latest of the jobs' first ticks, and,
    /// for a fleet, after the groups were first balanced.
    steady_from_ms: i64,
    /// The scenario's own fields of its JSON line.
    notes: serde_json::Map<String, serde_json::Value>,
}

/// A failed assertion with `ZKCRON_CHAOS_KEEP` set keeps the scenario's directory (the nodes'
/// logs, the servers' data) for a look afterwards, as a report with violations does.
impl Drop for ChaosCluster {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("ZKCRON_CHAOS_KEEP").is_some() {
            self.dir.disable_cleanup(true);
            eprintln!("kept {}", self.dir.path().display());
        }
    }
}

impl ChaosCluster {
    /// Starts a 3-server ensemble and `nodes` nodes, and returns once the first node fired.
    pub async fn start(name: &str, nodes: usize) -> Self {
        Self::start_with(name, nodes, |_| async {}).await
    }

    /// Like [`ChaosCluster::start`], running `prepare` on the ensemble before any node starts.
    pub async fn start_with<F, Fut>(name: &str, nodes: usize, prepare: F) -> Self
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        Self::start_fleet(
            name,
            nodes,
            Fleet::single(),
            ServerOptions::default(),
            prepare,
        )
        .await
    }

    /// Like [`ChaosCluster::start`], with the on-demand job [`SUB`] in the schedule besides
    /// `fast` and `long`, and [`SUB_AFTER`] after it: [`ChaosCluster::submit`] makes its work.
    pub async fn start_with_submissions(name: &str, nodes: usize) -> Self {
        Self::start_with_submissions_on(name, nodes, ServerOptions::default()).await
    }

    /// Like [`ChaosCluster::start_with_submissions`], the servers run as `options` says (the
    /// soak's: their disks faultable, quotas enforced).
    pub async fn start_with_submissions_on(
        name: &str,
        nodes: usize,
        options: ServerOptions,
    ) -> Self {
        let fleet = Fleet {
            submissions: true,
            submitted_chain: true,
            ..Fleet::single()
        };
        Self::start_fleet(name, nodes, fleet, options, |_| async {}).await
    }

    /// [`ChaosCluster::start_with_submissions_on`]'s fleet, every job keeping the most records a
    /// job may (`history = 5000`: 83 minutes of a 1 s job): the soak's, whose hour of ledger is
    /// still there to check at its end, and that of a parent past `jute.maxbuffer`.
    pub async fn start_keeping_history(name: &str, nodes: usize, options: ServerOptions) -> Self {
        let fleet = Fleet {
            submissions: true,
            submitted_chain: true,
            history: 5000,
            ..Fleet::single()
        };
        Self::start_fleet(name, nodes, fleet, options, |_| async {}).await
    }

    /// Like [`ChaosCluster::start_with_submissions`], with [`RETRIED`] too, every node running
    /// `binary` (this build when `None`): the upgrade check's fleet.
    pub async fn start_with_retries_on(name: &str, nodes: usize, binary: Option<PathBuf>) -> Self {
        // Older builds know no `after` nor `broadcast`.
        let fleet = Fleet {
            submissions: true,
            retried: true,
            chained: false,
            broadcast: false,
            binary,
            ..Fleet::single()
        };
        Self::start_fleet(name, nodes, fleet, ServerOptions::default(), |_| async {}).await
    }

    /// A fleet (issue 19): `named` lock groups besides the default one (see
    /// [`Fleet::with_groups`]) on `nodes` nodes, with `[lock] rebalance_after` = [`SETTLE`].
    /// Returns once every job fired and the groups are balanced (within `balanced_within`);
    /// ticks are checked from then on.
    pub async fn start_groups(
        name: &str,
        nodes: usize,
        named: usize,
        balanced_within: Duration,
    ) -> Self {
        let mut cluster = Self::start_fleet(
            name,
            nodes,
            Fleet::with_groups(named),
            ServerOptions::default(),
            |_| async {},
        )
        .await;
        cluster
            .wait_balanced("the groups balanced at the start", balanced_within)
            .await;
        // The tick in flight during the last move is fired by whichever node claimed it.
        let after_moves = (now_ms() / 1000 + 2) * 1000;
        cluster.steady_from_ms = cluster.steady_from_ms.max(after_moves);
        cluster
    }

    /// Like [`ChaosCluster::start`], the servers run as `options` says (their disks faultable,
    /// quotas enforced…), and `prepare` run on the ensemble before any node starts.
    pub async fn start_on<F, Fut>(
        name: &str,
        nodes: usize,
        options: ServerOptions,
        prepare: F,
    ) -> Self
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        Self::start_fleet(name, nodes, Fleet::single(), options, prepare).await
    }

    async fn start_fleet<F, Fut>(
        name: &str,
        nodes: usize,
        fleet: Fleet,
        options: ServerOptions,
        prepare: F,
    ) -> Self
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let ensemble = ZkEnsemble::start_options(3, options).expect("start a 3-server ensemble");
        let dir = tempfile::Builder::new()
            .prefix("zkcron-chaos-")
            .tempdir()
            .expect("temp dir");
        let job_log = dir.path().join("jobs.log");
        let sub_log = dir.path().join("subs.log");
        let retry_log = dir.path().join("retried.log");
        let chain_log = dir.path().join("chained.log");
        let sub_after_log = dir.path().join("sub-after.log");
        let broadcast_log = dir.path().join("broadcast.log");
        let mut cluster = ChaosCluster {
            ensemble,
            name: name.to_owned(),
            fleet,
            nodes: Vec::with_capacity(nodes),
            job_log,
            sub_log,
            retry_log,
            chain_log,
            sub_after_log,
            broadcast_log,
            silent: Vec::new(),
            started_ms: now_ms(),
            steady_from_ms: 0,
            notes: serde_json::Map::new(),
            dir,
        };
        prepare(cluster.client().await).await;
        for _ in 0..nodes {
            cluster.add_node().await;
        }
        // Every job has fired once: none is brand new (a job with no record never backfills, so
        // a fault before its first tick would rightly lose that tick). The first wait includes
        // the nodes' start.
        let jobs = cluster.fleet.jobs.clone();
        for job in &jobs {
            let within = Duration::from_secs(25)
                + Duration::from_millis(job.period_ms().unsigned_abs() + 5000);
            let first = cluster.wait_start(&job.name, 0, None, within).await;
            cluster.steady_from_ms = cluster.steady_from_ms.max(first.tick_ms);
        }
        cluster
    }

    /// Starts one more node, with proxies of its own (a member joining); returns its index and
    /// when it was started.
    pub async fn add_node(&mut self) -> (usize, i64) {
        self.add_node_with_clock(None).await
    }

    /// Like [`ChaosCluster::add_node`], the node's wall clock `offset` off the true one
    /// (`offset_ms`, ahead when positive), its monotonic clock real; `None`: the true clock.
    pub async fn add_node_with_clock(&mut self, offset_ms: Option<i64>) -> (usize, i64) {
        let clock = offset_ms.map(|offset_ms| {
            FakedClock::new(
                self.dir.path(),
                &format!("n{}", self.nodes.len()),
                offset_ms,
            )
        });
        let mut proxies = Vec::with_capacity(self.ensemble.len());
        for server in 0..self.ensemble.len() {
            let upstream = self
                .ensemble
                .server_address(server)
                .parse()
                .expect("server address");
            proxies.push(Proxy::start(upstream).await.expect("start a proxy"));
        }
        let node = self.nodes.len();
        let id = format!("n{node}");
        let log = self.dir.path().join(format!("{id}.log"));
        self.nodes.push(ChaosNode {
            id,
            proxies,
            daemon: None,
            log,
            binary: self.fleet.binary.clone(),
            clock,
        });
        let at = now_ms();
        self.launch(node);
        (node, at)
    }

    fn schedule(&self, node: usize) -> String {
        let connect = self.nodes[node]
            .proxies
            .iter()
            .map(|proxy| proxy.addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let log = self.job_log.display();
        let settle = if self.fleet.groups.is_empty() {
            String::new()
        } else {
            format!("rebalance_after = \"{}ms\"\n", SETTLE.as_millis())
        };
        // The time is bash's own, not `date`'s: a `date` started by the TERM trap could die of
        // the group's next signal and leave the line without it.
        let note = format!(
            "note() {{ echo \"$1 $ZKCRON_JOB $ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_NODE \
             $ZKCRON_FENCING_TOKEN $ZKCRON_ATTEMPT $ZKCRON_RESUMED \
             $(( ${{EPOCHREALTIME/./}} / 1000 ))\" >> {log}; }}"
        );
        let history = self.fleet.history;
        let mut jobs = String::from("[log]\nformat = \"json\"\n");
        for group in &self.fleet.groups {
            jobs.push_str(&format!("\n[[group]]\nname = \"{group}\"\n"));
        }
        for job in &self.fleet.jobs {
            let group = if job.group.is_empty() {
                String::new()
            } else {
                format!("group = \"{}\"\n", job.group)
            };
            let what = if job.long {
                format!(
                    "schedule = \"*/10 * * * * *\"\nconcurrency = \"forbid\"\n\
                     command = [{TRUE_CLOCK}\"/bin/bash\", \"-c\", '{note}; trap \"note end; exit 143\" TERM; \
                     note start; sleep 6 & wait $!; note end']\n"
                )
            } else {
                format!(
                    "schedule = \"* * * * * *\"\n\
                     command = [{TRUE_CLOCK}\"/bin/bash\", \"-c\", '{note}; note start; note end']\n"
                )
            };
            jobs.push_str(&format!(
                "\n[[job]]\nname = \"{}\"\n{group}history = {history}\n{what}",
                job.name
            ));
        }
        if self.fleet.submissions {
            let subs = self.sub_log.display();
            jobs.push_str(&format!(
                "\n[[job]]\nname = \"{SUB}\"\nhistory = 5000\nstarting_deadline = \"1h\"\n\
                 command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_SUBMISSION_ID $ZKCRON_NODE \
                 $ZKCRON_ATTEMPT\" >> {subs}']\n"
            ));
        }
        if self.fleet.submitted_chain {
            let after = self.sub_after_log.display();
            jobs.push_str(&format!(
                "\n[[job]]\nname = \"{SUB_AFTER}\"\nhistory = 5000\nstarting_deadline = \"1h\"\n\
                 after = [\"{SUB}\"]\n\
                 command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_SUBMISSION_ID $ZKCRON_NODE \
                 $ZKCRON_PARENT_RUN_ID\" >> {after}']\n"
            ));
        }
        if self.fleet.retried {
            let retried = self.retry_log.display();
            let backoff = RETRY_BACKOFF.as_secs();
            jobs.push_str(&format!(
                "\n[[job]]\nname = \"{RETRIED}\"\nhistory = {history}\nschedule = \"*/2 * * * * *\"\n\
                 retries = 1\nretry_backoff = \"{backoff}s\"\n\
                 command = [{TRUE_CLOCK}\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_ATTEMPT \
                 $ZKCRON_NODE $(date +%s%3N)\" >> {retried}; [ \"$ZKCRON_ATTEMPT\" -ge 2 ]']\n"
            ));
        }
        if self.fleet.chained {
            let chained = self.chain_log.display();
            jobs.push_str(&format!(
                "\n[[job]]\nname = \"{CHAINED}\"\nhistory = {history}\nafter = [\"{FAST}\"]\n\
                 command = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_NODE \
                 $ZKCRON_PARENT_RUN_ID\" >> {chained}']\n"
            ));
        }
        if self.fleet.broadcast {
            let everywhere = self.broadcast_log.display();
            jobs.push_str(&format!(
                "\n[[job]]\nname = \"{BROADCAST}\"\nhistory = {history}\nschedule = \"* * * * * *\"\n\
                 broadcast = true\ncommand = [\"/bin/sh\", \"-c\", 'echo \"$ZKCRON_SCHEDULED_UNIX_MS \
                 $ZKCRON_NODE\" >> {everywhere}']\n"
            ));
        }
        schedule_text(&connect, LOCK, SESSION, TAKEOVER, &jobs).replacen(
            "[lock]\n",
            &format!("[lock]\n{settle}"),
            1,
        )
    }

    fn launch(&mut self, node: usize) {
        let schedule = self.schedule(node);
        let this = &self.nodes[node];
        let env = this.clock.as_ref().map(FakedClock::env).unwrap_or_default();
        let daemon = match &this.binary {
            None => DaemonNode::start_with_env(self.dir.path(), &this.id, &schedule, &env),
            Some(binary) => {
                assert!(env.is_empty(), "an older build runs on the true clock");
                DaemonNode::start_binary(binary, self.dir.path(), &this.id, &schedule)
            }
        };
        self.nodes[node].daemon = Some(daemon);
    }

    /// Stops `node` gracefully and starts it again on `binary` (this build when `None`): one
    /// step of a rolling upgrade or rollback. Returns when it was stopped.
    pub async fn replace_binary(&mut self, node: usize, binary: Option<PathBuf>) -> i64 {
        let at = self.stop(node).await;
        self.nodes[node].binary = binary;
        self.restart(node);
        at
    }

    /// Returns once every server of the ensemble has taken a new session (each tried again for
    /// up to [`CLIENT_WITHIN`], as [`ChaosCluster::client`]): after a pause of every server,
    /// `srvr` answers well before the servers take sessions again (CI once saw the nodes'
    /// connects unanswered for more than 10 s after it).
    pub async fn wait_sessions_accepted(&self) {
        for server in 0..self.ensemble.len() {
            let address = self.ensemble.server_address(server);
            let deadline = tokio::time::Instant::now() + CLIENT_WITHIN;
            loop {
                match Client::connect(&address).await {
                    Ok(_) => break,
                    Err(err) if tokio::time::Instant::now() >= deadline => panic!(
                        "{address} took no session within {CLIENT_WITHIN:?}: {err}\n{}",
                        self.ensemble.log_tail(server)
                    ),
                    // A pause between attempts, not a wait for an event: there is none.
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    }

    /// A new session on the ensemble itself (not through a proxy). Tried again for up to
    /// [`CLIENT_WITHIN`]: an ensemble just back from a whole pause serves its old sessions
    /// first, and one attempt's 2.4 s could run out on a busy machine (seen once in CI).
    /// Each attempt asks one server, in turn: with the whole connect string, every attempt of
    /// 30 s timed out once in CI after a pause of every server, although the ensemble said it
    /// served; one server that takes connections and answers none must not hide the others.
    pub async fn client(&self) -> Client {
        let deadline = tokio::time::Instant::now() + CLIENT_WITHIN;
        let mut failed = Vec::new();
        let mut servers = (0..self.ensemble.len()).cycle();
        loop {
            let server = servers.next().unwrap_or_default();
            let address = self.ensemble.server_address(server);
            match Client::connect(&address).await {
                Ok(client) => return client,
                Err(err) => failed.push(format!("{address}: {err}")),
            }
            if tokio::time::Instant::now() >= deadline {
                let logs: Vec<String> = (0..self.ensemble.len())
                    .map(|i| format!("--- server {i} ---\n{}", self.ensemble.log_tail(i)))
                    .collect();
                panic!(
                    "connect to a server of the ensemble within {CLIENT_WITHIN:?}; the last \
                     attempts: {}\n{}",
                    failed[failed.len().saturating_sub(6)..].join("; "),
                    logs.join("\n")
                );
            }
            // A pause between attempts, not a wait for an event: there is none to await.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// [`Self::client`] as the library takes a session: through its doorway.
    pub async fn session(&self) -> zkcron::ledger::Ledger {
        let client = self.client().await;
        zkcron::ledger::Ledger::new(zkcron::zk::Zk::new(
            client,
            &Acls::anyone_all(),
            zkcron::zk::REQUEST_BOUND,
        ))
    }

    /// The node that owns the lock and its id.
    pub async fn owner_and_id(&self) -> (usize, String) {
        let owner = self.owner().await;
        (owner, self.id(owner))
    }

    /// The node that owns the lock, by the lock node's data.
    pub async fn owner(&self) -> usize {
        let client = self.client().await;
        let (data, _) = client
            .get_data(&format!("{ROOT}/lock"))
            .await
            .expect("read the lock node");
        let info: serde_json::Value = serde_json::from_slice(&data).expect("lock node JSON");
        let id = info["node_id"].as_str().expect("node_id");
        self.index(id)
    }

    /// Who owns each group, by the data of its lock node (a node handing it over still names
    /// itself there until it deleted it).
    pub async fn group_owners(&self) -> Owners {
        self.owners_via(&self.client().await).await
    }

    async fn owners_via(&self, client: &Client) -> Owners {
        let mut owners = Owners::new();
        for group in self.fleet.all_groups() {
            let owner = match client.get_data(&lock_path(group)).await {
                Ok((data, _)) => serde_json::from_slice::<serde_json::Value>(&data)
                    .ok()
                    .and_then(|info| info["node_id"].as_str().map(str::to_owned)),
                Err(_) => None,
            };
            owners.insert(group.to_owned(), owner);
        }
        owners
    }

    /// The ids of the nodes that run (neither killed, stopped nor frozen).
    fn live_ids(&self) -> BTreeSet<String> {
        (0..self.nodes.len())
            .filter(|node| {
                self.nodes[*node].daemon.is_some()
                    && !self
                        .silent
                        .iter()
                        .any(|s| s.node == *node && s.to_ms.is_none())
            })
            .map(|node| self.nodes[node].id.clone())
            .collect()
    }

    /// Waits until every group is owned by a live node; returns the owners.
    pub async fn wait_owned(&self, what: &str, within: Duration) -> Owners {
        self.wait_owners(what, within, |_, _| true).await
    }

    /// Waits until every group is owned by a live node, every live node owns one and none
    /// more than ⌈G/N⌉ (N live nodes); returns the owners.
    pub async fn wait_balanced(&self, what: &str, within: Duration) -> Owners {
        let groups = self.fleet.groups.len() + 1;
        self.wait_owners(what, within, |live, load| {
            let cap = groups.div_ceil(live.len());
            load.len() == live.len() && load.values().all(|n| *n <= cap)
        })
        .await
    }

    /// Waits until every group is owned by a live node and `settled(live ids, groups per
    /// owner)` holds.
    async fn wait_owners(
        &self,
        what: &str,
        within: Duration,
        settled: impl Fn(&BTreeSet<String>, &BTreeMap<String, usize>) -> bool,
    ) -> Owners {
        let live = self.live_ids();
        let what = format!("{}: {what}", self.name);
        let client = self.client().await;
        let found = try_wait_for(&what, within, || async {
            let owners = self.owners_via(&client).await;
            let mut load: BTreeMap<String, usize> = BTreeMap::new();
            for owner in owners.values() {
                let owner = owner.as_ref().filter(|id| live.contains(*id))?;
                *load.entry(owner.clone()).or_default() += 1;
            }
            settled(&live, &load).then_some(owners)
        })
        .await;
        match found {
            Ok(owners) => owners,
            Err(not_reached) => panic!(
                "{not_reached}\nowners: {:?}\n{}",
                self.group_owners().await,
                self.node_logs_tail()
            ),
        }
    }

    /// Adds `key` to the scenario's JSON line.
    pub fn note(&mut self, key: &str, value: serde_json::Value) {
        self.notes.insert(key.to_owned(), value);
    }

    fn index(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The node's id, as its jobs report it in `ZKCRON_NODE`.
    pub fn id(&self, node: usize) -> String {
        self.nodes[node].id.clone()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Steps `node`'s wall clock to `offset_s` seconds off the true one (it must have been
    /// started with a faked clock); it sees the step within a second. Returns when it was
    /// written.
    pub fn set_clock(&self, node: usize, offset_s: i64) -> i64 {
        let clock = self.nodes[node]
            .clock
            .as_ref()
            .expect("a node with a faked clock");
        clock.set(offset_s);
        now_ms()
    }

    /// SIGKILL; returns when it happened.
    pub fn kill(&mut self, node: usize) -> i64 {
        let mut daemon = self.nodes[node].daemon.take().expect("node runs");
        let at = now_ms();
        daemon.kill();
        self.silent.push(Silent {
            node,
            from_ms: at,
            to_ms: None,
        });
        at
    }

    /// Starts a killed or stopped node again.
    pub fn restart(&mut self, node: usize) -> i64 {
        assert!(self.nodes[node].daemon.is_none(), "node is down");
        let at = now_ms();
        self.end_silence(node, at);
        self.launch(node);
        at
    }

    /// SIGTERM, and waits until it exited; returns when the signal was sent.
    pub async fn stop(&mut self, node: usize) -> i64 {
        let daemon = self.nodes[node].daemon.take().expect("node runs");
        let at = now_ms();
        daemon.signal(Signal::SIGTERM);
        self.reap(node, daemon).await;
        at
    }

    /// Waits for a node told to stop to exit cleanly; it is silent from then on.
    async fn reap(&mut self, node: usize, mut daemon: DaemonNode) {
        let status = daemon.wait_exit(Duration::from_secs(20)).await;
        assert!(
            status.success(),
            "{} exited with {status}",
            self.nodes[node].id
        );
        self.silent.push(Silent {
            node,
            from_ms: now_ms(),
            to_ms: None,
        });
    }

    /// SIGSTOP: the process keeps its sockets and answers nothing.
    pub fn freeze(&mut self, node: usize) -> i64 {
        let at = now_ms();
        self.daemon(node).signal(Signal::SIGSTOP);
        self.silent.push(Silent {
            node,
            from_ms: at,
            to_ms: None,
        });
        at
    }

    pub fn thaw(&mut self, node: usize) -> i64 {
        self.daemon(node).signal(Signal::SIGCONT);
        let at = now_ms();
        self.end_silence(node, at);
        at
    }

    fn end_silence(&mut self, node: usize, at: i64) {
        if let Some(silent) = self
            .silent
            .iter_mut()
            .find(|s| s.node == node && s.to_ms.is_none())
        {
            silent.to_ms = Some(at);
        }
    }

    fn daemon(&self, node: usize) -> &DaemonNode {
        self.nodes[node].daemon.as_ref().expect("node runs")
    }

    /// Applies `fault` to every connection of the node to ZooKeeper.
    pub fn partition(&self, node: usize, fault: Fault) -> i64 {
        for proxy in &self.nodes[node].proxies {
            proxy.set(fault);
        }
        now_ms()
    }

    /// The loopback ports through which `node` reaches the servers (its proxies').
    pub fn proxy_ports(&self, node: usize) -> Vec<u16> {
        self.nodes[node]
            .proxies
            .iter()
            .map(|proxy| proxy.addr().port())
            .collect()
    }

    /// Waits for a start of [`FAST`] after `after_ms`, on a node other than `not_on` if given.
    pub async fn wait_fast_start(
        &self,
        after_ms: i64,
        not_on: Option<&str>,
        within: Duration,
    ) -> Run {
        self.wait_start(FAST, after_ms, not_on, within).await
    }

    async fn wait_start(
        &self,
        job: &str,
        after_ms: i64,
        not_on: Option<&str>,
        within: Duration,
    ) -> Run {
        let what = format!(
            "{}: a start of {job} after {after_ms} not on {not_on:?}",
            self.name
        );
        let found = try_wait_for(&what, within, || {
            let run = self
                .runs()
                .into_iter()
                .filter(|run| run.job == job && run.start_ms > after_ms)
                .find(|run| not_on.is_none_or(|node| run.node != node));
            async move { run }
        })
        .await;
        found.unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", self.node_logs_tail()))
    }

    /// Lets the cluster run for `span` (the scenario's steady phases: a wall-clock span is what
    /// they measure).
    pub async fn run_for(&self, span: Duration) {
        tokio::time::sleep(span).await;
    }

    /// Every node's log lines about the ticks of `violations`: their run ids, their ticks as
    /// the machine logs them. A violation in CI is told from these (the temp dir is gone).
    fn node_logs_about(&self, violations: &[Violation]) -> String {
        let mut out = String::new();
        for violation in violations {
            let (Violation::Lost { job, tick_ms }
            | Violation::NotRun { job, tick_ms }
            | Violation::NoFinalRecord { job, tick_ms }) = violation
            else {
                continue;
            };
            let Some(tick) = chrono::DateTime::from_timestamp_millis(*tick_ms) else {
                continue;
            };
            let keys = [
                format!("{job}-{tick_ms}"),
                tick.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
                tick.format("%Y-%m-%dT%H:%M:%S").to_string(),
                tick_ms.to_string(),
            ];
            out.push_str(&format!("--- about {job} {tick_ms} ---\n"));
            for node in &self.nodes {
                let text = std::fs::read_to_string(&node.log).unwrap_or_default();
                for line in text.lines().filter(|line| {
                    line.contains(job.as_str()) && keys.iter().any(|key| line.contains(key))
                }) {
                    out.push_str(&format!("{}: {line}\n", node.id));
                }
            }
        }
        out
    }

    /// The spans of ticks, in ms, that a node logged it could not start in time because it was
    /// stalled: missed ticks recorded for a stall, and claimed ticks too late to start.
    fn stalls_logged(&self) -> Vec<(i64, i64)> {
        let at_ms = |field: &serde_json::Value| {
            let text = field.as_str()?;
            let at = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S UTC").ok()?;
            Some(at.and_utc().timestamp_millis())
        };
        let mut spans = Vec::new();
        for node in &self.nodes {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            for line in text.lines() {
                let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                let fields = &entry["fields"];
                let message = fields["message"].as_str().unwrap_or_default();
                let reason = fields["reason"].as_str().unwrap_or_default();
                let span = if message == "missed ticks recorded" && reason.contains("stalled") {
                    at_ms(&fields["from"]).zip(at_ms(&fields["to"]))
                } else if message == "not firing: the claimed tick is too late to start" {
                    at_ms(&fields["tick"]).map(|tick| (tick, tick))
                } else {
                    None
                };
                spans.extend(span);
            }
        }
        spans
    }

    /// Each node's last lines about the lock, its session and its clock check.
    fn node_logs_of_the_lock(&self) -> String {
        const ABOUT: [&str; 5] = ["lock", "session", "clock", "takeover", "missed"];
        let mut out = String::new();
        for node in &self.nodes {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            let lines: Vec<&str> = text
                .lines()
                .filter(|line| ABOUT.iter().any(|about| line.contains(about)))
                .collect();
            out.push_str(&format!("--- {}, of the lock ---\n", node.id));
            out.push_str(&lines[lines.len().saturating_sub(30)..].join("\n"));
            out.push('\n');
        }
        out
    }

    fn node_logs_tail(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {} ---\n", node.id));
            out.push_str(&lines[lines.len().saturating_sub(15)..].join("\n"));
            out.push('\n');
        }
        out
    }

    /// Every run in the job log: a start, with its end if one was logged.
    fn runs(&self) -> Vec<Run> {
        let text = std::fs::read_to_string(&self.job_log).unwrap_or_default();
        let mut runs: Vec<Run> = Vec::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [what, job, tick, node, token, attempt, _resumed, at] = fields[..] else {
                panic!("job log line {line:?}");
            };
            let number = |text: &str| -> i64 {
                text.parse()
                    .unwrap_or_else(|_| panic!("job log line {line:?}"))
            };
            let (tick_ms, token, at) = (number(tick), number(token), number(at));
            match what {
                "start" => runs.push(Run {
                    job: job.to_owned(),
                    tick_ms,
                    node: node.to_owned(),
                    token,
                    start_ms: at,
                    end_ms: None,
                }),
                "end" => {
                    let _ = attempt;
                    if let Some(run) = runs
                        .iter_mut()
                        .rev()
                        .find(|run| run.job == job && run.tick_ms == tick_ms && run.node == node)
                    {
                        run.end_ms = Some(at);
                    }
                }
                other => panic!("job log line starts with {other:?}"),
            }
        }
        runs
    }

    /// Stops every node (SIGTERM at once, after thawing frozen ones), reads back what happened,
    /// checks the invariants and prints the scenario's JSON line (also appended to the file named
    /// by `ZKCRON_CHAOS_OUT`, for `scripts/chaos`).
    pub async fn finish(self, window: Option<FaultWindow>) -> Report {
        self.finish_windows(window.into_iter().collect()).await
    }

    /// Like [`ChaosCluster::finish`], for a scenario of several faults or membership changes:
    /// a tick inside any of the windows is excused when it is recorded. In the JSON line,
    /// `failover_gap_ms` is the first window's that hit an owner, `resume_gap_ms` the last
    /// window's, `fault_ms` the windows' total.
    pub async fn finish_windows(mut self, windows: Vec<FaultWindow>) -> Report {
        let stop_ms = now_ms();
        for node in 0..self.nodes.len() {
            if self
                .silent
                .iter()
                .any(|s| s.node == node && s.to_ms.is_none())
                && self.nodes[node].daemon.is_some()
            {
                self.thaw(node);
            }
        }
        for node in &self.nodes {
            if let Some(daemon) = &node.daemon {
                daemon.signal(Signal::SIGTERM);
            }
        }
        for node in 0..self.nodes.len() {
            if let Some(daemon) = self.nodes[node].daemon.take() {
                self.reap(node, daemon).await;
            }
        }

        let mut runs = self.runs();
        // A run of a killed node ended with it: its process died of PR_SET_PDEATHSIG.
        for run in runs.iter_mut().filter(|run| run.end_ms.is_none()) {
            let node = self.index(&run.node);
            run.end_ms = self
                .silent
                .iter()
                .filter(|s| s.node == node && s.from_ms >= run.start_ms)
                .map(|s| s.from_ms)
                .min();
        }
        let ledger = self.read_ledger().await;
        let mut observed = Observed {
            runs: runs.clone(),
            groups: self
                .fleet
                .jobs
                .iter()
                .map(|job| (job.name.clone(), job.group.clone()))
                .collect(),
            forbid: self
                .fleet
                .jobs
                .iter()
                .filter(|job| job.long)
                .map(|job| job.name.clone())
                .collect(),
            final_records: ledger.final_records.clone(),
            recorded_missed: ledger.recorded_missed.clone(),
            said_not_run: ledger.said_not_run.clone(),
            skipped_behind_own_run: ledger.skipped_behind_own_run.clone(),
            owner_samples: self.owner_samples(stop_ms),
            ..Observed::default()
        };
        // Ticks up to a second before the stop had to fire (a stopping owner gives back later
        // claims); a fault window excuses its ticks and those of the takeover after it.
        let last_tick = stop_ms - 1000;
        let mut excused: Vec<(i64, i64)> = windows
            .iter()
            .map(|w| {
                let settle = i64::try_from(w.settle.as_millis()).expect("settle fits");
                (w.from_ms - 1000, w.to_ms + settle)
            })
            .collect();
        // Beside the test pool, a node stalled by the machine (its own log says so) records the
        // ticks it could not start in time: late, recorded, never lost nor run twice. Alone
        // (scripts/chaos), every such tick still counts against the scenario.
        if !fault_tests_alone() {
            let stalls = self.stalls_logged();
            self.notes
                .insert("ticks_late_by_a_stall".to_owned(), stalls.len().into());
            excused.extend(stalls);
        }
        for job in &self.fleet.jobs {
            let period = job.period_ms();
            let mut tick = (self.steady_from_ms + period - 1).div_euclid(period) * period;
            while tick <= last_tick {
                let inside = excused
                    .iter()
                    .any(|(from, to)| (*from..=*to).contains(&tick));
                let ticks = if inside {
                    &mut observed.in_fault
                } else {
                    &mut observed.expected
                };
                ticks.entry(job.name.clone()).or_default().push(tick);
                tick += period;
            }
        }
        let violations = invariants::check(&observed);
        let chained_starts = self.chained_starts();
        let chain = if self.fleet.chained {
            // A parent that ended in the last seconds may leave its child for the next owner.
            invariants::chain(
                ledger.succeeded.get(FAST).unwrap_or(&BTreeSet::new()),
                &chained_starts,
                &ledger.chained_recorded,
                stop_ms - 3000,
            )
        } else {
            Vec::new()
        };
        if !chain.is_empty() {
            eprintln!("chain violations: {chain:?}");
        }
        if self.fleet.chained {
            let notes = &mut self.notes;
            notes.insert("chained_runs".to_owned(), chained_starts.len().into());
            notes.insert("chain_violations".to_owned(), chain.len().into());
        }
        let mut violations = violations;
        violations.extend(chain.into_iter().map(Violation::Chain));
        if self.fleet.broadcast {
            let starts = self.broadcast_starts();
            let broadcast = invariants::broadcast(&starts, &ledger.broadcast_recorded);
            if !broadcast.is_empty() {
                eprintln!("broadcast violations: {broadcast:?}");
            }
            let missed = ledger
                .broadcast_recorded
                .values()
                .filter(|status| *status == "missed")
                .count();
            let notes = &mut self.notes;
            notes.insert("broadcast_runs".to_owned(), starts.len().into());
            notes.insert("broadcast_missed".to_owned(), missed.into());
            notes.insert("broadcast_violations".to_owned(), broadcast.len().into());
            violations.extend(broadcast.into_iter().map(Violation::Broadcast));
        }
        let report = self.report(&windows, &runs, &ledger, violations, stop_ms);
        let failed =
            !report.violations.is_empty() || self.notes.contains_key("submissions_problem");
        if failed && std::env::var_os("ZKCRON_CHAOS_KEEP").is_some() {
            self.dir.disable_cleanup(true);
            eprintln!("kept {}", self.dir.path().display());
        }
        report
    }

    fn report(
        &self,
        windows: &[FaultWindow],
        runs: &[Run],
        ledger: &Ledger,
        violations: Vec<Violation>,
        stop_ms: i64,
    ) -> Report {
        let mut max_gap_ms = None;
        for job in self.fleet.jobs.iter().filter(|job| !job.long) {
            let mut starts: Vec<i64> = runs
                .iter()
                .filter(|run| run.job == job.name && run.start_ms >= self.steady_from_ms)
                .map(|run| run.start_ms)
                .collect();
            starts.sort_unstable();
            let gap = starts.windows(2).map(|pair| pair[1] - pair[0]).max();
            max_gap_ms = max_gap_ms.max(gap);
        }
        let mut fast: Vec<&Run> = runs
            .iter()
            .filter(|run| run.job == FAST && run.start_ms >= self.steady_from_ms)
            .collect();
        fast.sort_by_key(|run| run.start_ms);
        let failover_gap_ms = windows.iter().find_map(|w| {
            let owner = w.owner.as_deref()?;
            fast.iter()
                .find(|run| run.start_ms > w.from_ms && run.node != owner)
                .map(|run| run.start_ms - w.from_ms)
        });
        let resume_gap_ms = windows.last().and_then(|w| {
            let mut after: Vec<i64> = runs
                .iter()
                .map(|run| run.start_ms)
                .filter(|start| *start > w.to_ms)
                .collect();
            after.sort_unstable();
            after.first().map(|start| start - w.to_ms)
        });
        let count = |pick: fn(&Violation) -> bool| violations.iter().filter(|v| pick(v)).count();
        let taken_back = self.nodes.iter().any(|node| {
            std::fs::read_to_string(&node.log)
                .unwrap_or_default()
                .contains("zookeeper session taken back")
        });
        let fault_ms =
            (!windows.is_empty()).then(|| windows.iter().map(|w| w.to_ms - w.from_ms).sum::<i64>());
        let mut json = serde_json::json!({
            "scenario": self.name,
            "nodes": self.nodes.len(),
            "seconds": (stop_ms - self.started_ms) / 1000,
            "fires": runs.len(),
            "duplicates": count(|v| matches!(v, Violation::StartedTwice { .. })),
            "missed": ledger.missed_ticks,
            "failover_gap_ms": failover_gap_ms,
            "resume_gap_ms": resume_gap_ms,
            "max_gap_ms": max_gap_ms,
            "overlap": count(|v| matches!(v, Violation::Overlap { .. })),
            "violations": violations.len(),
            "session_taken_back": taken_back,
            "fault_ms": fault_ms,
        });
        if let Some(fields) = json.as_object_mut() {
            fields.extend(self.notes.clone());
        }
        println!("{json}");
        if let Some(path) = std::env::var_os("ZKCRON_CHAOS_OUT") {
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .expect("open ZKCRON_CHAOS_OUT");
            writeln!(out, "{json}").expect("write ZKCRON_CHAOS_OUT");
        }
        if !violations.is_empty() {
            eprintln!("{}", self.node_logs_tail());
            eprintln!("{}", self.node_logs_about(&violations));
            eprintln!("--- ledger ---\n{}", ledger.listing.join("\n"));
            let mut runs = runs.to_vec();
            runs.sort_by_key(|run| run.start_ms);
            eprintln!("--- runs ---\n{runs:#?}");
        }
        Report {
            json,
            violations,
            failover_gap_ms,
            resume_gap_ms,
            lock_logs: self.node_logs_of_the_lock(),
        }
    }

    /// Every run record, after the nodes stopped. Records that do not parse are the scenario's
    /// own garbage, ignored here.
    async fn read_ledger(&self) -> Ledger {
        self.ensemble
            .wait_serving(Duration::from_secs(30))
            .await
            .expect("the ensemble serves at the end");
        let client = self.client().await;
        let mut ledger = Ledger::default();
        for job in &self.fleet.jobs {
            let (job, period) = (job.name.as_str(), job.period_ms());
            let dir = format!("{ROOT}/runs/{job}");
            let names = children_of(&client, &dir).await;
            for name in names {
                let Some(tick_ms) = parse_tick_node_name(&name) else {
                    continue;
                };
                let Some(data) = data_of(&client, &format!("{dir}/{name}")).await else {
                    continue;
                };
                let missed = ledger.recorded_missed.entry(job.to_owned()).or_default();
                let Ok(record) = RunRecord::parse(&data) else {
                    // A foreign record occupies the tick: nobody can claim it.
                    missed.insert(tick_ms);
                    continue;
                };
                ledger.listing.push(format!(
                    "{job} {tick_ms} {:?} node={} token={} missed_from={:?} error={:?}",
                    record.status,
                    record.node_id,
                    record.fencing_token.0,
                    record.missed_from_unix_ms,
                    record.error
                ));
                if record.status.is_final() {
                    ledger.final_records.insert((job.to_owned(), tick_ms));
                }
                if record.status == RunStatus::Succeeded {
                    let succeeded = ledger.succeeded.entry(job.to_owned()).or_default();
                    succeeded.insert(tick_ms);
                }
                match record.status {
                    RunStatus::Missed => {
                        let from = record.missed_from_unix_ms.unwrap_or(tick_ms);
                        let mut tick = from;
                        let first_attempt = record.attempt <= 1;
                        while tick <= tick_ms {
                            missed.insert(tick);
                            ledger.missed_ticks += 1;
                            if first_attempt {
                                let not_run = ledger.said_not_run.entry(job.to_owned());
                                not_run.or_default().insert(tick);
                            }
                            tick += period;
                        }
                    }
                    // Claimed by an owner that died before it started: `interrupted`, and
                    // with `on_interrupted = "skip"` left so.
                    RunStatus::Skipped | RunStatus::Interrupted => {
                        missed.insert(tick_ms);
                        ledger.missed_ticks += 1;
                        let behind_own_run = record
                            .error
                            .as_deref()
                            .is_some_and(|why| why.contains(SKIPPED_BEHIND_OWN_RUN));
                        if record.status == RunStatus::Skipped && behind_own_run {
                            let skipped = ledger.skipped_behind_own_run.entry(job.to_owned());
                            skipped.or_default().insert(tick_ms);
                        }
                    }
                    _ => {}
                }
            }
        }
        if self.fleet.broadcast {
            let dir = format!("{ROOT}/runs/{BROADCAST}");
            for name in children_of(&client, &dir).await {
                let Some(RecordName {
                    scheduled_unix_ms,
                    node: Some(node),
                    ..
                }) = RecordName::parse(&name)
                else {
                    continue;
                };
                let Some(data) = data_of(&client, &format!("{dir}/{name}")).await else {
                    continue;
                };
                let status = RunRecord::parse(&data).map_or_else(
                    |_| "unreadable".to_owned(),
                    |r| r.status.as_str().to_owned(),
                );
                let key = (scheduled_unix_ms, node.to_string());
                ledger.broadcast_recorded.insert(key, status);
            }
        }
        if self.fleet.chained {
            let dir = format!("{ROOT}/runs/{CHAINED}");
            let names = children_of(&client, &dir).await;
            ledger.chained_recorded = names
                .iter()
                .filter_map(|name| parse_tick_node_name(name))
                .collect();
        }
        ledger
    }

    /// Every start of [`BROADCAST`], as it logged it: (tick, node).
    fn broadcast_starts(&self) -> Vec<(i64, String)> {
        let text = std::fs::read_to_string(&self.broadcast_log).unwrap_or_default();
        text.lines()
            .map(|line| {
                let parsed = line
                    .split_once(' ')
                    .and_then(|(tick, node)| Some((tick.parse().ok()?, node.to_owned())));
                parsed.unwrap_or_else(|| panic!("{BROADCAST} log line {line:?}"))
            })
            .collect()
    }

    /// Every start of [`CHAINED`], as it logged it: (its parent's instant, node).
    fn chained_starts(&self) -> Vec<(i64, String)> {
        let text = std::fs::read_to_string(&self.chain_log).unwrap_or_default();
        text.lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let tick = fields.first().and_then(|tick| tick.parse().ok());
                match (tick, fields.get(1)) {
                    (Some(tick), Some(node)) => (tick, (*node).to_owned()),
                    _ => panic!("{CHAINED} log line {line:?}"),
                }
            })
            .collect()
    }

    /// At every sampled moment, what each node that could answer said about each group's lock:
    /// its own log's latest word on it (`lock acquired`, or `lock lost` / released / given up).
    /// A dead or stopped node says nothing.
    fn owner_samples(&self, stop_ms: i64) -> Vec<OwnerSample> {
        let words: Vec<Vec<LockWord>> = self.nodes.iter().map(lock_timeline).collect();
        // Per node and group, (instant ms, owns it from then on); a word of no group (a start)
        // speaks for every group.
        let timelines: Vec<Vec<(&str, Timeline)>> = words
            .iter()
            .map(|words| {
                self.fleet
                    .all_groups()
                    .map(|group| {
                        let said = words
                            .iter()
                            .filter(|w| w.group.as_deref().is_none_or(|g| g == group))
                            .map(|w| (w.at_ms, w.owns))
                            .collect();
                        (group, said)
                    })
                    .collect()
            })
            .collect();
        // A woken process has not spoken yet: silent on a lock until its first word on it, for
        // at most WAKE_GRACE_MS (what it says first must be what it believes now).
        let silent_at = |node: usize, said: &Timeline, at: i64| {
            self.silent.iter().any(|s| {
                let to = s.to_ms.map(|to| {
                    let first_word = said.iter().map(|(t, _)| *t).find(|t| *t > to);
                    first_word.unwrap_or(i64::MAX).min(to + WAKE_GRACE_MS)
                });
                s.node == node && s.from_ms <= at && to.is_none_or(|to| at < to)
            })
        };
        let mut samples = Vec::new();
        let mut at = self.started_ms;
        while at < stop_ms {
            for (i, node) in self.nodes.iter().enumerate() {
                for (group, said) in &timelines[i] {
                    if silent_at(i, said, at) {
                        continue;
                    }
                    let owns = said
                        .iter()
                        .take_while(|(t, _)| *t <= at)
                        .last()
                        .is_some_and(|(_, owns)| *owns);
                    samples.push(OwnerSample {
                        at_ms: at,
                        group: (*group).to_owned(),
                        node: node.id.clone(),
                        owns,
                    });
                }
            }
            at += SAMPLE_EVERY_MS;
        }
        samples
    }

    /// Submits `count` runs of [`SUB`] through the library (docs/DELAYED.md's protocol, a
    /// batch per multi-op), the first due at `first_due_ms` and one every `spacing_ms` after
    /// it.
    pub async fn submit(&self, count: usize, first_due_ms: i64, spacing_ms: i64) -> Submitted {
        self.submit_named("s", count, first_due_ms, spacing_ms)
            .await
    }

    /// Like [`ChaosCluster::submit`], the ids `<prefix><n>`: a scenario that submits more than
    /// once names each batch apart.
    pub async fn submit_named(
        &self,
        prefix: &str,
        count: usize,
        first_due_ms: i64,
        spacing_ms: i64,
    ) -> Submitted {
        let config = self.nodes[0]
            .daemon
            .as_ref()
            .map(|daemon| daemon.config.clone())
            .expect("node 0 runs while the submissions are made");
        let config = zkcron::config::load(&config).expect("the nodes' config loads");
        let delayed = zkcron::delayed::Delayed::with_client(self.session().await, &config);
        let mut ids = Vec::with_capacity(count);
        let mut requests = Vec::with_capacity(count);
        for i in 0..count {
            let id = format!("{prefix}{i:05}");
            let due = first_due_ms + i64::try_from(i).expect("small") * spacing_ms;
            requests.push(zkcron::delayed::SubmitRequest {
                traceparent: None,
                job: zkcron::JobName::new(SUB),
                due: chrono::DateTime::from_timestamp_millis(due).expect("in range"),
                id: Some(zkcron::delayed::SubmissionId::parse(&id).expect("id")),
                payload: Vec::new(),
            });
            ids.push(id);
        }
        for chunk in requests.chunks(500) {
            for result in delayed.submit_many(chunk.to_vec()).await {
                result.expect("submitted");
            }
        }
        let last_due_ms = first_due_ms + i64::try_from(count).expect("small") * spacing_ms;
        Submitted { ids, last_due_ms }
    }

    /// Waits until each of `submitted` has run, up to `after_last` past the last one's due
    /// time, and asserts that none ran twice, that each made its one child where the chain
    /// after submitted parents is on, and that none is pending (issue 31).
    pub async fn assert_each_submission_ran_once(
        &mut self,
        submitted: &Submitted,
        after_last: Duration,
    ) {
        if let Err(problem) = self
            .check_each_submission_ran_once(submitted, after_last)
            .await
        {
            panic!("{problem}");
        }
    }

    /// [`Self::assert_each_submission_ran_once`]'s checks, the first that fails told rather
    /// than panicked on: a long run (the soak) still checks its ticks after it.
    pub async fn check_each_submission_ran_once(
        &mut self,
        submitted: &Submitted,
        after_last: Duration,
    ) -> Result<(), String> {
        let left = u64::try_from(submitted.last_due_ms - now_ms()).unwrap_or(0);
        let within = Duration::from_millis(left) + after_last;
        self.submissions_not_run(&submitted.ids, within).await?;
        let runs = self.submission_runs();
        let twice: Vec<_> = runs.iter().filter(|(_, nodes)| nodes.len() > 1).collect();
        if !twice.is_empty() {
            return Err(format!("submissions run more than once: {twice:?}"));
        }
        self.note("submissions", serde_json::json!(runs.len()));
        // The children first: the last parents' ends submit theirs a moment before this looks,
        // and a child pending until its claim is no submission left behind (CI once counted
        // one here while it was on its way).
        if self.fleet.submitted_chain {
            self.submitted_parents_without_one_child(after_last).await?;
        }
        let pending = self.pending_submissions().await;
        if !pending.is_empty() {
            return Err(format!("none stays pending: {pending:?}"));
        }
        Ok(())
    }

    /// Every run of [`SUB`] recorded `succeeded` made exactly one run of [`SUB_AFTER`], under
    /// the id `<id>.sub-after`, naming that run as its parent (or its record says why it did not
    /// run); none ran twice (issue 36: a submitted parent's child, across the scenario's faults).
    async fn submitted_parents_without_one_child(
        &mut self,
        within: Duration,
    ) -> Result<(), String> {
        let what = format!(
            "{}: a {SUB_AFTER} run for each succeeded {SUB} run",
            self.name
        );
        let log = self.sub_after_log.clone();
        // The children are read before their parents' records: a child is submitted in its
        // parent's final record's transaction, so every parent a child read here names is then
        // read succeeded. Read the other way round, a last parent ending in between made its
        // child look as if it named no succeeded run.
        let read = || async {
            let children = children_logged(&log);
            let succeeded = self.succeeded_submissions().await;
            (succeeded, children)
        };
        let settled = try_wait_for(&what, within, || async {
            let (succeeded, children) = read().await;
            let lost =
                invariants::submitted_chain(&succeeded, &children, &BTreeSet::new(), SUB_AFTER)
                    .into_iter()
                    .any(|v| matches!(v, invariants::SubmittedChainViolation::Lost { .. }));
            (!lost).then_some((succeeded, children))
        })
        .await;
        let ((succeeded, children), recorded) = match settled {
            Ok(read) => (read, BTreeSet::new()),
            Err(_) => (read().await, self.submissions_recorded(SUB_AFTER).await),
        };
        let violations = invariants::submitted_chain(&succeeded, &children, &recorded, SUB_AFTER);
        if !violations.is_empty() {
            return Err(format!(
                "{}: {} violation(s) of the chain after submitted runs ({} succeeded {SUB} \
                 runs): {:?}",
                self.name,
                violations.len(),
                succeeded.len(),
                violations.iter().take(10).collect::<Vec<_>>()
            ));
        }
        self.note("submitted_children", serde_json::json!(children.len()));
        Ok(())
    }

    /// The ids of `job`'s submissions that have a record.
    async fn submissions_recorded(&self, job: &str) -> BTreeSet<String> {
        let client = self.client().await;
        let dir = format!("{ROOT}/runs/{job}");
        let names = children_of(&client, &dir).await;
        names
            .iter()
            .filter_map(|name| Some(name.split_once('-')?.1.to_owned()))
            .collect()
    }

    /// The ids of [`SUB`]'s submissions whose record says `succeeded`, with their run ids.
    async fn succeeded_submissions(&self) -> BTreeMap<String, String> {
        let client = self.client().await;
        let dir = format!("{ROOT}/runs/{SUB}");
        let names = children_of(&client, &dir).await;
        let mut succeeded = BTreeMap::new();
        for name in names {
            let Some(data) = data_of(&client, &format!("{dir}/{name}")).await else {
                continue;
            };
            let Ok(record) = RunRecord::parse(&data) else {
                continue;
            };
            if let (RunStatus::Succeeded, Some(id)) = (record.status, &record.submission_id) {
                succeeded.insert(id.to_string(), record.run_id.clone());
            }
        }
        succeeded
    }

    /// `count` submissions of [`SUB`] made by `binary`'s CLI (another build of zkcron: the
    /// upgrade check), with ids `<prefix>NNNNN`, the first due `first_in` from now and one a
    /// second after. Each is one `zkcron submit` run.
    pub fn submit_with(
        &self,
        binary: &Path,
        prefix: &str,
        count: usize,
        first_in: Duration,
    ) -> Submitted {
        let config = self.nodes[0]
            .daemon
            .as_ref()
            .map(|daemon| daemon.config.clone())
            .expect("node 0 runs while the submissions are made");
        let mut ids = Vec::with_capacity(count);
        for i in 0..count {
            let id = format!("{prefix}{i:05}");
            let due_in = format!("{}s", first_in.as_secs() + u64::try_from(i).expect("small"));
            let out = std::process::Command::new(binary)
                .args(["submit", SUB, "--in", &due_in, "--id", &id, "--config"])
                .arg(&config)
                .output()
                .expect("run the other build's zkcron submit");
            assert!(
                out.status.success(),
                "{} submit {id}: {}",
                binary.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            ids.push(id);
        }
        let last_in = first_in.as_millis() + u128::try_from(count).expect("small") * 1000;
        Submitted {
            ids,
            last_due_ms: now_ms() + i64::try_from(last_in).expect("small"),
        }
    }

    /// Every run of [`SUB`] by submission id: the nodes that ran it, in order.
    pub fn submission_runs(&self) -> BTreeMap<String, Vec<String>> {
        let text = std::fs::read_to_string(&self.sub_log).unwrap_or_default();
        let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            if let (Some(id), Some(node)) = (fields.next(), fields.next()) {
                runs.entry(id.to_owned()).or_default().push(node.to_owned());
            }
        }
        runs
    }

    /// Every attempt of [`RETRIED`], as it logged it.
    pub fn retried_attempts(&self) -> Vec<invariants::Attempt> {
        let text = std::fs::read_to_string(&self.retry_log).unwrap_or_default();
        text.lines()
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let [tick, attempt, node, at] = fields[..] else {
                    panic!("{RETRIED} log line {line:?}");
                };
                let number = |text: &str| -> i64 {
                    text.parse()
                        .unwrap_or_else(|_| panic!("{RETRIED} log line {line:?}"))
                };
                invariants::Attempt {
                    tick_ms: number(tick),
                    attempt: u32::try_from(number(attempt)).expect("an attempt number"),
                    node: node.to_owned(),
                    at_ms: number(at),
                }
            })
            .collect()
    }

    /// Every run of `job` so far, as the jobs' log says.
    pub fn runs_of(&self, job: &str) -> Vec<Run> {
        self.runs()
            .into_iter()
            .filter(|run| run.job == job)
            .collect()
    }

    /// The submissions still pending in ZooKeeper, each as `id (job, due ms)`.
    pub async fn pending_submissions(&self) -> Vec<String> {
        let config = self.nodes.iter().find_map(|node| node.daemon.as_ref());
        let config = config.expect("a node runs").config.clone();
        let config = zkcron::config::load(&config).expect("the nodes' config loads");
        let delayed = zkcron::delayed::Delayed::with_client(self.session().await, &config);
        let pending = delayed.list(None, usize::MAX).await;
        let pending = pending.expect("list the pending submissions");
        pending
            .iter()
            .map(|p| {
                format!(
                    "{} ({}, due {})",
                    p.id, p.submission.job, p.submission.due_unix_ms
                )
            })
            .collect()
    }

    /// When node `node` first logged `message` at or after `after_ms`, by its log's own stamp.
    pub fn logged_at(&self, node: usize, message: &str, after_ms: i64) -> Option<i64> {
        self.nodes[node]
            .stamped_log()
            .into_iter()
            .filter(|line| {
                line.entry
                    .as_ref()
                    .is_some_and(|entry| entry["fields"]["message"].as_str() == Some(message))
            })
            .filter_map(|line| line.at_ms)
            .find(|at| *at >= after_ms)
    }

    /// Waits up to `within` for node `node` to log `message` at or after `after_ms`; returns
    /// its log's stamp.
    pub async fn wait_logged(
        &self,
        node: usize,
        message: &str,
        after_ms: i64,
        within: Duration,
    ) -> i64 {
        let what = format!("{}: {} logs {message:?}", self.name, self.nodes[node].id);
        let found = try_wait_for(&what, within, || {
            let at = self.logged_at(node, message, after_ms);
            async move { at }
        })
        .await;
        found.unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", self.node_logs_tail()))
    }

    /// Waits up to `within` until every one of `ids` has run; panics naming how many had.
    pub async fn wait_submissions_ran(&self, ids: &[String], within: Duration) {
        if let Err(problem) = self.submissions_not_run(ids, within).await {
            panic!("{problem}");
        }
    }

    /// Waits until each of `ids` has run, up to `within`; what never ran, and what the nodes
    /// said of the first few, when some did not.
    async fn submissions_not_run(&self, ids: &[String], within: Duration) -> Result<(), String> {
        let what = format!("{}: all {} submissions ran", self.name, ids.len());
        let found = try_wait_for(&what, within, || {
            let runs = self.submission_runs();
            let all = ids.iter().all(|id| runs.contains_key(id));
            async move { all.then_some(()) }
        })
        .await;
        if let Err(not_reached) = found {
            let runs = self.submission_runs();
            let missing: Vec<&String> = ids.iter().filter(|id| !runs.contains_key(*id)).collect();
            // What the nodes said of each of the first few that never ran.
            let mut said = String::new();
            let client = self.client().await;
            let dir = format!("{ROOT}/runs/{SUB}");
            let names = client.list_children(&dir).await.unwrap_or_default();
            for id in missing.iter().take(5) {
                for name in names.iter().filter(|name| name.ends_with(id.as_str())) {
                    let data = client.get_data(&format!("{dir}/{name}")).await;
                    let record = data.map(|(data, _)| String::from_utf8_lossy(&data).into_owned());
                    said.push_str(&format!("record {name}: {record:?}\n"));
                }
                for node in &self.nodes {
                    let text = std::fs::read_to_string(&node.log).unwrap_or_default();
                    for line in text.lines().filter(|line| line.contains(id.as_str())) {
                        said.push_str(&format!("{}: {line}\n", node.id));
                    }
                }
            }
            return Err(format!(
                "{not_reached}: {} of {} ran; never: {missing:?}\n{said}",
                runs.len(),
                ids.len(),
            ));
        }
        Ok(())
    }

    /// Node `node`'s log lines stamped at or after `from_ms`, the last `lines` of them.
    pub fn log_since(&self, node: usize, from_ms: i64, lines: usize) -> String {
        let log = self.nodes[node].stamped_log();
        let kept: Vec<&str> = log
            .iter()
            .filter(|line| line.at_ms.is_none_or(|at| at >= from_ms))
            .map(|line| line.line.as_str())
            .collect();
        kept[kept.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, without waiting: returns when it was sent. [`ChaosCluster::wait_stopped`]
    /// reaps it.
    pub fn terminate(&mut self, node: usize) -> i64 {
        let at = now_ms();
        self.daemon(node).signal(Signal::SIGTERM);
        at
    }

    /// Waits up to `within` for a node sent SIGTERM to exit cleanly; returns when it had.
    pub async fn wait_stopped(&mut self, node: usize, within: Duration) -> i64 {
        let asked_ms = now_ms();
        let what = format!("{}: {} exits", self.name, self.nodes[node].id);
        let exited = try_wait_for(&what, within, || {
            let running = self.nodes[node]
                .daemon
                .as_mut()
                .is_some_and(DaemonNode::is_running);
            async move { (!running).then_some(()) }
        })
        .await;
        if let Err(not_reached) = exited {
            let since = asked_ms - i64::try_from(within.as_millis()).unwrap_or(0);
            panic!(
                "{not_reached}; its log:\n{}",
                self.log_since(node, since, 400)
            );
        }
        let at = now_ms();
        let daemon = self.nodes[node].daemon.take().expect("node runs");
        self.reap(node, daemon).await;
        at
    }

    /// Deletes `path` under the lock group.
    pub async fn remove(&self, path: &str) {
        let full = format!("{ROOT}/{path}");
        self.client()
            .await
            .delete(&full, None)
            .await
            .unwrap_or_else(|err| panic!("delete {full}: {err}"));
    }

    /// Waits until `path` under the lock group does not exist (an ephemeral node's session
    /// expired).
    pub async fn wait_gone(&self, path: &str, within: Duration) {
        let full = format!("{ROOT}/{path}");
        let client = self.client().await;
        let gone = try_wait_for(&format!("{full} is gone"), within, || {
            let client = client.clone();
            let full = full.clone();
            async move { matches!(client.check_stat(&full).await, Ok(None)).then_some(()) }
        })
        .await;
        gone.unwrap_or_else(|not_reached| panic!("{not_reached}"));
    }

    /// Starts of [`FAST`] after `after_ms`.
    pub fn fast_starts_after(&self, after_ms: i64) -> usize {
        self.runs()
            .iter()
            .filter(|run| run.job == FAST && run.start_ms > after_ms)
            .count()
    }

    /// Writes `data` to `path` under the lock group (creating it, persistent, if absent).
    pub async fn plant(&self, path: &str, data: &[u8]) {
        plant(&self.client().await, path, data).await;
    }

    /// The temp dir (schedule files, node logs, the job log), for a scenario's own files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Creates `<root>/<lock>/<path>` (and its parents) with `data`, or overwrites it.
pub async fn plant(client: &Client, path: &str, data: &[u8]) {
    let full = format!("{ROOT}/{path}");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let parent = full.rsplit_once('/').map_or("/", |(parent, _)| parent);
    client.mkdir(parent, &open).await.ok();
    match client.create(&full, data, &open).await {
        Ok(_) => {}
        Err(zookeeper_client::Error::NodeExists) => {
            client
                .set_data(&full, data, None)
                .await
                .unwrap_or_else(|err| panic!("set {full}: {err}"));
        }
        Err(err) => panic!("create {full}: {err}"),
    }
}

/// What the ledger holds at the end of a scenario.
#[derive(Debug, Default)]
struct Ledger {
    final_records: BTreeSet<(String, i64)>,
    /// Per job, the instants of its succeeded runs.
    succeeded: BTreeMap<String, BTreeSet<i64>>,
    /// The instants [`CHAINED`]'s records hold.
    chained_recorded: BTreeSet<i64>,
    /// Each node's record of each tick of [`BROADCAST`]: its status.
    broadcast_recorded: BTreeMap<(i64, String), String>,
    recorded_missed: BTreeMap<String, BTreeSet<i64>>,
    said_not_run: BTreeMap<String, BTreeSet<i64>>,
    /// Per job, the ticks skipped for a run of the job still alive on the recording node.
    skipped_behind_own_run: BTreeMap<String, BTreeSet<i64>>,
    missed_ticks: usize,
    /// Every record, `job tick status [missed_from]`, for a failing scenario's message.
    listing: Vec<String>,
}

/// What a node said about one lock, in order: (instant ms, owns it from then on).
type Timeline = Vec<(i64, bool)>;

/// One of a node's words on a lock.
#[derive(Debug)]
struct LockWord {
    at_ms: i64,
    /// The group whose lock it speaks of; `None`: every group (the process started).
    group: Option<String>,
    /// It owns that lock from then on.
    owns: bool,
}

/// A node's own words on the locks, from its JSON log.
fn lock_timeline(node: &ChaosNode) -> Vec<LockWord> {
    let mut timeline = Vec::new();
    for line in node.stamped_log() {
        let (Some(entry), Some(at_ms)) = (line.entry, line.at_ms) else {
            continue;
        };
        let owns = match entry["fields"]["message"].as_str() {
            Some("lock acquired") => true,
            // A process starting again owns nothing until it says so.
            Some(
                "zkcron started"
                | "lock lost"
                | "lock handed over: released for a peer to take"
                | "lock released for a graceful handoff"
                | "lock given up for shutdown",
            ) => false,
            _ => continue,
        };
        let group = match entry["fields"]["path"].as_str() {
            // A lock path of another lock group than ours is none of the scenario's.
            Some(path) => match group_of_lock(path) {
                Some(group) => Some(group),
                None => continue,
            },
            None => None,
        };
        timeline.push(LockWord { at_ms, group, owns });
    }
    timeline
}

/// What [`SUB_AFTER`]'s runs logged, by submission id: each run's node and parent run id.
fn children_logged(log: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut runs: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, node, parent] = fields[..] else {
            panic!("{SUB_AFTER} log line {line:?}");
        };
        runs.entry(id.to_owned())
            .or_default()
            .push((node.to_owned(), parent.to_owned()));
    }
    runs
}

/// How long a check's read of the ledger is tried again: an ensemble whose leader the last
/// fault stopped (a full disk) elects another within seconds.
const READ_WITHIN: Duration = Duration::from_secs(30);

/// `path`'s data at the end of a scenario; `None` when it is not there. A read that fails
/// otherwise is tried again for [`READ_WITHIN`], then fails the check naming the path: a record
/// skipped for a failed read reads as a lost one, or as a parent that did not succeed (the soak
/// of 2026-12-02 evening).
async fn data_of(client: &Client, path: &str) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + READ_WITHIN;
    loop {
        match client.get_data(path).await {
            Ok((data, _)) => return Some(data),
            Err(zookeeper_client::Error::NoNode) => return None,
            Err(err) if tokio::time::Instant::now() >= deadline => {
                panic!("{path}: not read within {READ_WITHIN:?}: {err}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// `dir`'s children at the end of a scenario, as [`data_of`] reads data: none when `dir` is not
/// there, a failed listing tried again.
async fn children_of(client: &Client, dir: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + READ_WITHIN;
    loop {
        match client.list_children(dir).await {
            Ok(names) => return names,
            Err(zookeeper_client::Error::NoNode) => return Vec::new(),
            Err(err) if tokio::time::Instant::now() >= deadline => {
                panic!("{dir}: not listed within {READ_WITHIN:?}: {err}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
