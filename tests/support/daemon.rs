//! Real `zkcron run` processes and the fire log their jobs write, for the end-to-end tests.
//!
//! Owns: writing a node's schedule file, starting the built binary on it, signals by PID, killing
//! it on drop, and reading back which node fired which tick.
//! Must not: start ZooKeeper (that is `zk_cluster`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::zk_cluster::{try_wait_for, wait_for};

/// Wall-clock now in Unix ms, comparable with `ZKCRON_SCHEDULED_UNIX_MS`.
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since.as_millis()).expect("ms fit i64")
}

/// A schedule file for lock group `lock` at `connect`, with the given timings and `jobs` appended.
pub fn schedule_text(
    connect: &str,
    lock: &str,
    session: Duration,
    delay: Duration,
    jobs: &str,
) -> String {
    format!(
        "[zookeeper]\nconnect = \"{connect}\"\nsession_timeout = \"{}ms\"\n\n[lock]\nname = \"{lock}\"\n\
         takeover_delay = \"{}ms\"\n\n{jobs}",
        session.as_millis(),
        delay.as_millis()
    )
}

pub fn zkcron(args: &[&str], config: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run zkcron")
}

/// Asserts that a `zkcron` command exited with `code`; returns what it said, stdout then
/// stderr.
pub fn assert_exit(output: &Output, code: i32) -> String {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    format!("{stdout}{stderr}")
}

/// Runs `zkcron status ARGS --config CONFIG` where a lock group may have no owner (the scenario
/// checks owners itself): exit 0, or 4 with the report; returns its stdout.
pub fn zkcron_status(args: &[&str], config: &Path) -> String {
    let mut all = vec!["status"];
    all.extend_from_slice(args);
    let output = zkcron(&all, config);
    assert!(
        matches!(output.status.code(), Some(0 | 4)),
        "zkcron {all:?}: {output:?}"
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `zkcron ARGS --config CONFIG`, asserts it succeeded, and returns its stdout.
pub fn zkcron_ok(args: &[&str], config: &Path) -> String {
    let output = zkcron(args, config);
    assert!(
        output.status.success(),
        "zkcron {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The array `key` of a one-shot `--json` document (docs/API.md, "One JSON convention"), each
/// element as compact JSON text: `history --json`'s `runs`, `audit --json`'s `entries`. Asserts
/// that the document is one object with a `format` version.
pub fn document_items(document: &str, key: &str) -> Vec<String> {
    let parsed: serde_json::Value = serde_json::from_str(document)
        .unwrap_or_else(|err| panic!("one JSON document ({err}): {document}"));
    assert!(parsed["format"].is_u64(), "no format version: {document}");
    parsed[key]
        .as_array()
        .unwrap_or_else(|| panic!("no array {key:?}: {document}"))
        .iter()
        .map(serde_json::Value::to_string)
        .collect()
}

/// `zkcron history JOB --json EXTRA`'s run records, newest first.
pub fn history_records(job: &str, extra: &[&str], config: &Path) -> Vec<serde_json::Value> {
    let mut args = vec!["history", job, "--json"];
    args.extend_from_slice(extra);
    document_items(&zkcron_ok(&args, config), "runs")
        .iter()
        .map(|record| serde_json::from_str(record).expect("a record is JSON"))
        .collect()
}

/// Runs `zkcron ARGS --config CONFIG`, asserts it was refused (exit 2), and returns its stderr.
pub fn zkcron_refused(args: &[&str], config: &Path) -> String {
    let output = zkcron(args, config);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "zkcron {args:?}: {stderr}");
    stderr
}

/// Waits, up to `within`, for `child` (named `name` in the failure message) to exit on its own.
pub async fn wait_child_exit(child: &mut Child, name: &str, within: Duration) -> ExitStatus {
    wait_for(&format!("{name} exits"), within, || {
        let status = child.try_wait().ok().flatten();
        async move { status }
    })
    .await
}

/// The session timeout of the schedules the end-to-end tests of daemons write.
pub const SESSION: Duration = Duration::from_secs(2);
/// Their takeover delay.
pub const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
pub const SLACK: Duration = Duration::from_secs(3);

/// A job line the fire log gets: every contract variable, space-separated.
pub const RECORD_FIRE: &str = "echo \"$ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_NODE $ZKCRON_FENCING_TOKEN $ZKCRON_JOB \
$ZKCRON_RUN_ID $ZKCRON_ATTEMPT $ZKCRON_RESUMED $ZKCRON_SCHEDULED_AT\" >> ";

/// One fire, as the job recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    pub scheduled_ms: i64,
    pub node: String,
    pub token: i32,
    pub job: String,
    pub run_id: String,
    pub attempt: u32,
    pub resumed: String,
    pub scheduled_at: String,
}

/// Reads a fire log; lines that do not parse fail the test (a job wrote garbage or interleaved).
pub fn read_fires(path: &Path) -> Vec<Fire> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 8, "fire log line {line:?}");
            Fire {
                scheduled_ms: f[0].parse().expect("scheduled ms"),
                node: f[1].to_owned(),
                token: f[2].parse().expect("token"),
                job: f[3].to_owned(),
                run_id: f[4].to_owned(),
                attempt: f[5].parse().expect("attempt"),
                resumed: f[6].to_owned(),
                scheduled_at: f[7].to_owned(),
            }
        })
        .collect()
}

/// The log tails of `nodes`, each under its node id: what a failed wait shows.
/// Submits `count` submissions of `job` through the library, many out at once on one session:
/// ids `<prefix>0000`, `<prefix>0001`, …, due `spacing_ms` apart from `first_due_ms`, no payload.
pub async fn submit_spaced(
    config: &Path,
    job: &str,
    count: usize,
    first_due_ms: i64,
    spacing_ms: i64,
    prefix: &str,
) {
    let config = zkcron::config::load(config).expect("config");
    let client = std::sync::Arc::new(
        zkcron::delayed::Delayed::connect(&config)
            .await
            .expect("submitter session"),
    );
    let mut submits = tokio::task::JoinSet::new();
    for i in 0..count {
        let client = std::sync::Arc::clone(&client);
        let due = first_due_ms + i64::try_from(i).expect("small") * spacing_ms;
        let request = zkcron::delayed::SubmitRequest {
            traceparent: None,
            job: zkcron::JobName::new(job),
            due: chrono::DateTime::from_timestamp_millis(due).expect("in range"),
            id: Some(zkcron::delayed::SubmissionId::parse(&format!("{prefix}{i:04}")).expect("id")),
            payload: Vec::new(),
        };
        submits.spawn(async move {
            client.submit(request).await.expect("submitted");
        });
    }
    while let Some(done) = submits.join_next().await {
        done.expect("submit task");
    }
}

pub fn logs_of(nodes: &[&DaemonNode]) -> String {
    nodes
        .iter()
        .map(|node| format!("--- {}\n{}", node.node_id, node.log_tail()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A running `zkcron run`.
pub struct DaemonNode {
    pub node_id: String,
    pub config: PathBuf,
    child: Child,
    log: PathBuf,
    exited: Option<ExitStatus>,
}

impl DaemonNode {
    /// Writes `schedule` (which must not set `[lock] node_id`) with this node's id into `dir` and
    /// starts `zkcron run` on it.
    pub fn start(dir: &Path, node_id: &str, schedule: &str) -> Self {
        Self::start_with_env(dir, node_id, schedule, &[])
    }

    /// Like [`DaemonNode::start`], with extra environment variables (e.g. `NOTIFY_SOCKET`).
    pub fn start_with_env(
        dir: &Path,
        node_id: &str,
        schedule: &str,
        env: &[(&str, &Path)],
    ) -> Self {
        Self::spawn(
            Path::new(env!("CARGO_BIN_EXE_zkcron")),
            dir,
            node_id,
            schedule,
            env,
        )
    }

    /// Like [`DaemonNode::start`], running `binary`: another build of zkcron, as the fixture
    /// capture runs an older version.
    pub fn start_binary(binary: &Path, dir: &Path, node_id: &str, schedule: &str) -> Self {
        Self::spawn(binary, dir, node_id, schedule, &[])
    }

    fn spawn(
        binary: &Path,
        dir: &Path,
        node_id: &str,
        schedule: &str,
        env: &[(&str, &Path)],
    ) -> Self {
        let config = dir.join(format!("{node_id}.toml"));
        std::fs::write(&config, with_node_id(schedule, node_id)).expect("write node config");
        let log = dir.join(format!("{node_id}.log"));
        let stderr = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("node log");
        let child = Command::new(binary)
            .args(["--log-level", "zkcron=debug,info", "run", "--config"])
            .arg(&config)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn zkcron run");
        Self {
            node_id: node_id.to_owned(),
            config,
            child,
            log,
            exited: None,
        }
    }

    /// Replaces this node's schedule file (keeping its node_id) — then send SIGHUP to reload.
    pub fn rewrite(&self, schedule: &str) {
        std::fs::write(&self.config, with_node_id(schedule, &self.node_id))
            .expect("rewrite config");
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits i32"))
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal)
            .unwrap_or_else(|err| panic!("{signal} to {}: {err}", self.node_id));
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits, up to `within`, for the node to exit; one that does not fails the test with the
    /// end of its log (what its stop was waiting for).
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let what = format!("{} exits", self.node_id);
        let child = &mut self.child;
        let exited = try_wait_for(&what, within, || {
            let status = child.try_wait().ok().flatten();
            async move { status }
        })
        .await;
        match exited {
            Ok(status) => {
                self.exited = Some(status);
                status
            }
            Err(not_reached) => panic!("{not_reached}\n{}", self.log_tail()),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `text`.
    pub async fn wait_log(&self, text: &str, within: Duration) {
        let what = format!("{} logs {text:?}", self.node_id);
        let found = try_wait_for(&what, within, || {
            let found = self.log().contains(text);
            async move { found.then_some(()) }
        })
        .await;
        if let Err(not_reached) = found {
            panic!("{not_reached}\n{}", self.log_tail());
        }
    }

    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for DaemonNode {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn with_node_id(schedule: &str, node_id: &str) -> String {
    assert!(schedule.contains("[lock]\n"), "schedule has a [lock] table");
    schedule.replacen("[lock]\n", &format!("[lock]\nnode_id = \"{node_id}\"\n"), 1)
}
