//! Real `zkcron lock-demo` processes for the lock's integration tests.
//!
//! Owns: starting the built binary, reading its event lines (stamped with when the test saw
//! them), signals by PID (kill, terminate, pause, resume), and killing it on drop.
//! Must not: start ZooKeeper (that is `zk_cluster`).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::zk_cluster::{Within, try_wait_for};

/// How a group of demo nodes is configured.
#[derive(Debug, Clone)]
pub struct DemoGroup {
    pub connect: String,
    pub name: String,
    pub session_timeout: Duration,
    pub takeover_delay: Duration,
    /// Where each node's stderr log goes.
    pub log_dir: PathBuf,
}

/// One line a node printed, with when the test read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: Instant,
    pub line: String,
}

/// A running `zkcron lock-demo` process.
pub struct DemoNode {
    pub node_id: String,
    child: Child,
    events: Arc<Mutex<Vec<Event>>>,
    stderr_path: PathBuf,
    exited: Option<ExitStatus>,
}

impl DemoGroup {
    /// Starts node `node_id` of this group.
    pub fn start(&self, node_id: &str) -> DemoNode {
        DemoNode::start(self, node_id)
    }
}

impl DemoNode {
    fn start(group: &DemoGroup, node_id: &str) -> Self {
        let stderr_path = group.log_dir.join(format!("{node_id}-{}.log", unique()));
        let stderr = File::create(&stderr_path).expect("create node log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args([
                "--log-level",
                "zkcron=debug,info",
                "lock-demo",
                "--connect",
                &group.connect,
            ])
            .args(["--name", &group.name, "--node-id", node_id])
            .args(["--session-timeout", &humantime(group.session_timeout)])
            .args(["--takeover-delay", &humantime(group.takeover_delay)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn zkcron (is the binary built?)");
        let stdout = child.stdout.take().expect("piped stdout");
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let event = Event {
                    at: Instant::now(),
                    line,
                };
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(event);
            }
        });
        Self {
            node_id: node_id.to_owned(),
            child,
            events,
            stderr_path,
            exited: None,
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits i32"))
    }

    /// Everything printed so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Tokens of every `acquired` line so far, in order.
    pub fn acquired_tokens(&self) -> Vec<i32> {
        self.events()
            .iter()
            .filter_map(|e| parse_token(&e.line))
            .collect()
    }

    /// True when the last `acquired`/`lost` line says we hold the lock.
    pub fn holds_lock(&self) -> bool {
        let events = self.events();
        let last = events
            .iter()
            .rev()
            .find(|e| e.line == "lost" || e.line.starts_with("acquired "));
        last.is_some_and(|e| e.line.starts_with("acquired "))
    }

    /// Waits for the first line after index `from` matching `matches`; returns its index and event.
    pub async fn wait_line(
        &self,
        what: &str,
        from: usize,
        within: impl Into<Within>,
        matches: impl Fn(&str) -> bool,
    ) -> (usize, Event) {
        let found = try_wait_for(&format!("{} prints {what}", self.node_id), within, || {
            let found = self
                .events()
                .into_iter()
                .enumerate()
                .skip(from)
                .find(|(_, e)| matches(&e.line));
            async move { found }
        })
        .await;
        found.unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", self.report()))
    }

    /// Waits for an `acquired` line after index `from`; returns the token and when it was seen.
    pub async fn wait_acquired(&self, from: usize, within: impl Into<Within>) -> (i32, Instant) {
        let (_, event) = self
            .wait_line("acquired", from, within, |l| l.starts_with("acquired "))
            .await;
        (
            parse_token(&event.line).expect("token in acquired line"),
            event.at,
        )
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal)
            .unwrap_or_else(|err| panic!("{signal} to {}: {err}", self.node_id));
    }

    /// Waits for the process to exit on its own.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let status = super::daemon::wait_child_exit(&mut self.child, &self.node_id, within).await;
        self.exited = Some(status);
        status
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Lines and log tail, for failure messages.
    pub fn report(&self) -> String {
        let lines: Vec<String> = self.events().into_iter().map(|e| e.line).collect();
        let log = self.stderr();
        let tail: Vec<&str> = log
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!(
            "--- {} stdout ---\n{}\n--- {} stderr (tail) ---\n{}",
            self.node_id,
            lines.join("\n"),
            self.node_id,
            tail.join("\n")
        )
    }

    pub fn log_path(&self) -> &Path {
        &self.stderr_path
    }
}

impl Drop for DemoNode {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `acquired token=N` → N.
pub fn parse_token(line: &str) -> Option<i32> {
    line.strip_prefix("acquired token=")?.parse().ok()
}

fn humantime(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
