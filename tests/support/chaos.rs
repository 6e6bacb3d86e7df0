//! The chaos suite's cluster (issue "Faster recovery and proof under faults"): a real 3-server
//! ensemble and N real `zkcron run` nodes, each reaching ZooKeeper only through proxies of its
//! own, the faults a scenario injects, and the report a scenario ends with.
//!
//! Owns: the nodes' schedule (a 1 s job and a 10 s `forbid` job that runs 6 s, both logging their
//! start and end to one file), the timeline of injected faults, reading back what happened (that
//! log, each node's own log lines about the lock, the ledger in ZooKeeper) and the scenario's
//! JSON line.
//! Must not: judge what happened — [`invariants::check`] does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use tempfile::TempDir;
use zookeeper_client::{Acls, Client, CreateMode};

use zkcron::layout::parse_tick_node_name;
use zkcron::run::{RunRecord, RunStatus};

use super::daemon::{DaemonNode, now_ms, schedule_text};
use super::invariants::{self, Observed, Run, Violation};
use super::proxy::{Fault, Proxy};
use super::zk_cluster::{ZkEnsemble, try_wait_for};

/// The session timeout the reporter ran with.
pub const SESSION: Duration = Duration::from_secs(4);
/// Shorter than the default 10 s, to keep scenarios short; still the margin between a lost
/// session and a peer's first fire.
pub const TAKEOVER: Duration = Duration::from_secs(3);
/// How long a crashed owner may take to be replaced: DESIGN.md promise 2, plus the CLI's jitter
/// (a tenth of the delay) and a second for a loaded 2-core machine running 3 JVMs.
pub const REPLACED_WITHIN: Duration = Duration::from_millis(4000 + 3000 + 300 + 1000);

/// The 1 s job.
pub const FAST: &str = "fast";
/// The 10 s job that runs 6 s, `forbid`.
pub const LONG: &str = "long";
const LONG_PERIOD_MS: i64 = 10_000;
const LOCK: &str = "chaos";
const ROOT: &str = "/zkcron/chaos";
/// How often the owner samples are taken from the nodes' lock timelines.
const SAMPLE_EVERY_MS: i64 = 50;
/// How long a process woken from SIGSTOP may take to say what it now believes about the lock:
/// its runtime's threads, then its lock driver, must be scheduled on a loaded 2-core machine.
/// An owner that goes on believing it owns for longer than this is caught.
const WAKE_GRACE_MS: i64 = 500;

/// One node: its proxies (one per server) and its process while it runs.
struct ChaosNode {
    id: String,
    proxies: Vec<Proxy>,
    daemon: Option<DaemonNode>,
    log: PathBuf,
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
}

impl Report {
    /// Panics unless every invariant held and another node fired within `bound` of the fault.
    pub fn assert_failover_within(&self, bound: Duration) {
        self.assert_holds();
        let gap = self.failover_gap_ms.expect("another node fired");
        let bound = i64::try_from(bound.as_millis()).expect("fits");
        assert!(gap <= bound, "failover after {gap} ms: {}", self.json);
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
    nodes: Vec<ChaosNode>,
    dir: TempDir,
    job_log: PathBuf,
    silent: Vec<Silent>,
    started_ms: i64,
    /// The first tick of both jobs that had to fire: the first of [`LONG`], which fired.
    steady_from_ms: i64,
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
        let ensemble = ZkEnsemble::start(3).expect("start a 3-server ensemble");
        let dir = tempfile::Builder::new()
            .prefix("zkcron-chaos-")
            .tempdir()
            .expect("temp dir");
        let job_log = dir.path().join("jobs.log");
        let mut cluster = ChaosCluster {
            ensemble,
            name: name.to_owned(),
            nodes: Vec::with_capacity(nodes),
            job_log,
            silent: Vec::new(),
            started_ms: now_ms(),
            steady_from_ms: 0,
            dir,
        };
        prepare(cluster.client().await).await;
        for i in 0..nodes {
            let mut proxies = Vec::with_capacity(cluster.ensemble.len());
            for server in 0..cluster.ensemble.len() {
                let upstream = cluster
                    .ensemble
                    .server_address(server)
                    .parse()
                    .expect("server address");
                proxies.push(Proxy::start(upstream).await.expect("start a proxy"));
            }
            let id = format!("n{i}");
            let log = cluster.dir.path().join(format!("{id}.log"));
            cluster.nodes.push(ChaosNode {
                id,
                proxies,
                daemon: None,
                log,
            });
            cluster.launch(i);
        }
        // Both jobs have fired once: neither is brand new (a job with no record never backfills,
        // so a fault before its first tick would rightly lose that tick).
        let fast = cluster
            .wait_start(FAST, 0, None, Duration::from_secs(30))
            .await;
        let long = cluster
            .wait_start(
                LONG,
                fast.start_ms,
                None,
                Duration::from_millis(LONG_PERIOD_MS as u64 + 5000),
            )
            .await;
        cluster.steady_from_ms = long.tick_ms;
        cluster
    }

    fn schedule(&self, node: usize) -> String {
        let connect = self.nodes[node]
            .proxies
            .iter()
            .map(|proxy| proxy.addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let log = self.job_log.display();
        let note = format!(
            "note() {{ echo \"$1 $ZKCRON_JOB $ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_NODE \
             $ZKCRON_FENCING_TOKEN $ZKCRON_ATTEMPT $ZKCRON_RESUMED $(date +%s%3N)\" >> {log}; }}"
        );
        let jobs = format!(
            "[log]\nformat = \"json\"\n\n\
             [[job]]\nname = \"{FAST}\"\nschedule = \"* * * * * *\"\nhistory = 1000\n\
             command = [\"/bin/sh\", \"-c\", '{note}; note start; note end']\n\n\
             [[job]]\nname = \"{LONG}\"\nschedule = \"*/10 * * * * *\"\nhistory = 1000\n\
             concurrency = \"forbid\"\n\
             command = [\"/bin/sh\", \"-c\", '{note}; trap \"note end; exit 143\" TERM; \
             note start; sleep 6 & wait $!; note end']\n"
        );
        schedule_text(&connect, LOCK, SESSION, TAKEOVER, &jobs)
    }

    fn launch(&mut self, node: usize) {
        let schedule = self.schedule(node);
        let daemon = DaemonNode::start(self.dir.path(), &self.nodes[node].id, &schedule);
        self.nodes[node].daemon = Some(daemon);
    }

    /// A new session on the ensemble itself (not through a proxy).
    pub async fn client(&self) -> Client {
        Client::connect(&self.ensemble.connect_string())
            .await
            .expect("connect to the ensemble")
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
    pub async fn finish(mut self, window: Option<FaultWindow>) -> Report {
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
            forbid: BTreeSet::from([LONG.to_owned()]),
            final_records: ledger.final_records.clone(),
            recorded_missed: ledger.recorded_missed.clone(),
            owner_samples: self.owner_samples(stop_ms),
            ..Observed::default()
        };
        // Ticks up to a second before the stop had to fire (a stopping owner gives back later
        // claims); a fault window excuses its ticks and those of the takeover after it.
        let last_tick = stop_ms - 1000;
        let excused = window.as_ref().map(|w| {
            let settle = i64::try_from(w.settle.as_millis()).expect("settle fits");
            (w.from_ms - 1000, w.to_ms + settle)
        });
        for (job, period) in [(FAST, 1000), (LONG, LONG_PERIOD_MS)] {
            let mut tick = (self.steady_from_ms + period - 1).div_euclid(period) * period;
            while tick <= last_tick {
                let inside = excused.is_some_and(|(from, to)| (from..=to).contains(&tick));
                let ticks = if inside {
                    &mut observed.in_fault
                } else {
                    &mut observed.expected
                };
                ticks.entry(job.to_owned()).or_default().push(tick);
                tick += period;
            }
        }
        let violations = invariants::check(&observed);
        let report = self.report(window, &runs, &ledger, violations, stop_ms);
        if !report.violations.is_empty() && std::env::var_os("ZKCRON_CHAOS_KEEP").is_some() {
            eprintln!("kept {}", self.dir.keep().display());
        }
        report
    }

    fn report(
        &self,
        window: Option<FaultWindow>,
        runs: &[Run],
        ledger: &Ledger,
        violations: Vec<Violation>,
        stop_ms: i64,
    ) -> Report {
        let mut fast: Vec<&Run> = runs
            .iter()
            .filter(|run| run.job == FAST && run.start_ms >= self.steady_from_ms)
            .collect();
        fast.sort_by_key(|run| run.start_ms);
        let max_gap_ms = fast
            .windows(2)
            .map(|pair| pair[1].start_ms - pair[0].start_ms)
            .max();
        let failover_gap_ms = window.as_ref().and_then(|w| {
            let owner = w.owner.as_deref()?;
            fast.iter()
                .find(|run| run.start_ms > w.from_ms && run.node != owner)
                .map(|run| run.start_ms - w.from_ms)
        });
        let resume_gap_ms = window.as_ref().and_then(|w| {
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
        let json = serde_json::json!({
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
            "fault_ms": window.as_ref().map(|w| w.to_ms - w.from_ms),
        });
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
        for (job, period) in [(FAST, 1000), (LONG, LONG_PERIOD_MS)] {
            let dir = format!("{ROOT}/runs/{job}");
            let names = client.list_children(&dir).await.unwrap_or_default();
            for name in names {
                let Some(tick_ms) = parse_tick_node_name(&name) else {
                    continue;
                };
                let Ok((data, _)) = client.get_data(&format!("{dir}/{name}")).await else {
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
                match record.status {
                    RunStatus::Missed => {
                        let from = record.missed_from_unix_ms.unwrap_or(tick_ms);
                        let mut tick = from;
                        while tick <= tick_ms {
                            missed.insert(tick);
                            ledger.missed_ticks += 1;
                            tick += period;
                        }
                    }
                    // Claimed by an owner that died before it started: `interrupted`, and
                    // with `on_interrupted = "skip"` left so.
                    RunStatus::Skipped | RunStatus::Interrupted => {
                        missed.insert(tick_ms);
                        ledger.missed_ticks += 1;
                    }
                    _ => {}
                }
            }
        }
        ledger
    }

    /// At every sampled moment, what each node that could answer said about the lock: its own
    /// log's latest word on it (`lock acquired`, or `lock lost` / released / given up). A dead
    /// or stopped node says nothing.
    fn owner_samples(&self, stop_ms: i64) -> Vec<(i64, String, bool)> {
        let timelines: Vec<Vec<(i64, bool)>> = self
            .nodes
            .iter()
            .map(|node| lock_timeline(&node.log))
            .collect();
        // A woken process has not spoken yet: silent until its first word on the lock, for at
        // most WAKE_GRACE_MS (what it says first must be what it believes now).
        let silent: Vec<Silent> = self
            .silent
            .iter()
            .map(|s| Silent {
                to_ms: s.to_ms.map(|to| {
                    let first_word = timelines[s.node].iter().map(|(t, _)| *t).find(|t| *t > to);
                    first_word.unwrap_or(i64::MAX).min(to + WAKE_GRACE_MS)
                }),
                ..*s
            })
            .collect();
        let mut samples = Vec::new();
        let mut at = self.started_ms;
        while at < stop_ms {
            for (i, node) in self.nodes.iter().enumerate() {
                let silent = silent
                    .iter()
                    .any(|s| s.node == i && s.from_ms <= at && s.to_ms.is_none_or(|to| at < to));
                if silent {
                    continue;
                }
                let owns = timelines[i]
                    .iter()
                    .take_while(|(t, _)| *t <= at)
                    .last()
                    .is_some_and(|(_, owns)| *owns);
                samples.push((at, node.id.clone(), owns));
            }
            at += SAMPLE_EVERY_MS;
        }
        samples
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
    recorded_missed: BTreeMap<String, BTreeSet<i64>>,
    missed_ticks: usize,
    /// Every record, `job tick status [missed_from]`, for a failing scenario's message.
    listing: Vec<String>,
}

/// A node's own word on the lock, from its JSON log: (instant ms, owns it from then on).
fn lock_timeline(log: &Path) -> Vec<(i64, bool)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut timeline = Vec::new();
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let owns = match entry["fields"]["message"].as_str() {
            Some("lock acquired") => true,
            // A process starting again owns nothing until it says so.
            Some(
                "zkcron started"
                | "lock lost"
                | "lock released for a graceful handoff"
                | "lock given up for shutdown",
            ) => false,
            _ => continue,
        };
        let Some(at) = entry["timestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        else {
            continue;
        };
        timeline.push((at.timestamp_millis(), owns));
    }
    timeline
}
