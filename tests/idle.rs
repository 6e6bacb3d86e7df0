//! Guards of an idle node's cost (issues 18, 32 and 54): one `zkcron run` node owning the lock of
//! a 1000-job schedule, none of them due, costs its host
//! - at most a few MiB of anonymous memory (`/proc/PID/smaps_rollup`: `Anonymous`, what
//!   `bench/idle_cost.sh` reports; docs/BENCHMARKS.md "Memory as it costs");
//! - at most a millisecond or two of CPU a second, over 30 s (the threads' `schedstat`: ns, where
//!   `/proc/PID/stat`'s 10 ms ticks would read 2 or 3 ticks; the bench's "sched" column).
//!
//! Which binary: the release build is what the targets are for. With `ZKCRON_IDLE_BINARY` set
//! to a release `zkcron` (e.g. `cargo build --release` first), the tests measure it against the
//! release limits; without, they measure the debug `zkcron` cargo built for the tests against
//! the debug limits. The debug binary costs more for reasons that are not the node's data: no
//! LTO, so 2.4 MiB of relocated read-only data (`.data.rel.ro`, written once by the loader)
//! instead of 1.25, larger stack frames (0.8 MiB of stacks resident instead of 0.3), and
//! unoptimised code on every wake-up.
//!
//! Memory, measured at the fixes of issue 32 (2 vCPUs): the debug build 5.3–5.4 MiB (5444–5520
//! KiB in three runs), 6.1–6.2 MiB before the allocator settings and the smaller fire state
//! (`heap::give_back_as_freed`, boxed job states and inputs), and 7.0 MiB (7172–7196 KiB) before
//! the first fixes, which the memory test fails; a release build given by `ZKCRON_IDLE_BINARY`
//! 3.6–4.0 MiB (3696–4052 KiB; one run in three was 5.4 MiB before the allocator settings).
//! At issue 54 (the CPU guard's commit): the debug build 5972 KiB, the release build 4028 KiB.
//! At issue 55 (the delayed queue's PostgreSQL store, linked into every node whatever its
//! `[delayed] store`): the debug build 6264 KiB, of which 2976 KiB are the binary's relocated
//! read-only data and 1352 KiB heap (`smaps`), the release build 4156 KiB. The debug limit moved
//! from 6 MiB to 6.5 MiB for that code; the release limit stays.
//! Each limit sits above its build's figures with the fixes and below those of a regression
//! this size: memory is not timing, a margin of a few hundred KiB is enough.
//!
//! CPU: the limits are figures for the tests' own crowded machine, not the target (issue 54:
//! 0.5 ms a second, which `bench/idle_cost.sh` holds on a quiet one). What an idle node does is
//! a handful of wake-ups a second (the ZooKeeper client's tick, the lock's heartbeat, a clock
//! check every session timeout); a regression that reads or polls a second at a time, as the
//! delayed queue's reads once did (+0.5 ms a second, issue 32), or busy-waits, is what the
//! limits are set to catch. The figures each measured with the limits are in [`CPU_LIMIT`]'s
//! comment.

use crate::support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::{Datelike, Utc};

use support::{ZkEnsemble, try_wait_for};

/// Jobs in the schedule: the targets are for 1000.
const JOBS: usize = 1000;
/// Limit for a release binary given by `ZKCRON_IDLE_BINARY`: 4.5 MiB, the figure of issue 54
/// (4028 KiB) and a margin; the target, 3 MiB, is not reached.
const RELEASE_LIMIT_KIB: u64 = 4608;
/// Limit for the tests' debug binary (6.5 MiB): see the module's comment.
const DEBUG_LIMIT_KIB: u64 = 6656;
/// Samples taken once the node has settled, one a second; the largest counts (as the bench's
/// "anon max"). A few, not one: the heap is given back once quiet, and a sample in the middle of
/// a scan of the delayed queue's buckets could see its few KiB.
const SAMPLES: usize = 3;
/// How long the CPU is measured: the 30 s, long enough that the clock check (every
/// session timeout, 10 s here) and the client's and heartbeat's wake-ups all fall in it.
const CPU_WINDOW: Duration = Duration::from_secs(30);

/// The CPU limits, ms of CPU per second of the window: (release, debug). Measured with the
/// limits (2 vCPUs, the test alone beside the memory test): the release build 0.89 ms a second,
/// the debug build 2.06. Each limit is about twice its figure, room for the tests' crowded pool
/// (the same work costs more CPU on cores other tests keep busy); a busy wait, or a read or poll
/// every tenth of a second, costs more than that.
const CPU_LIMIT: (f64, f64) = (1.5, 4.0);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_with_1000_jobs_stays_under_its_anonymous_memory_limit() {
    let idle = IdleNode::settled("idle-memory").await;
    let limit_kib = if idle.given {
        RELEASE_LIMIT_KIB
    } else {
        DEBUG_LIMIT_KIB
    };
    let mut samples = Vec::new();
    for i in 0..SAMPLES {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        samples.push(anonymous_kib(idle.node.pid()));
    }
    let largest = samples.iter().copied().max().unwrap_or_default();
    let build = idle.build();
    eprintln!(
        "idle node, {JOBS} jobs, {} ({build}): Anonymous {samples:?} KiB, largest {largest} KiB, limit {limit_kib} KiB",
        idle.binary.display()
    );
    assert!(
        largest <= limit_kib,
        "an idle node with {JOBS} jobs holds {largest} KiB of anonymous memory (samples \
         {samples:?}), over the {limit_kib} KiB limit of a {build} build \
         (bench/idle_cost.sh and docs/BENCHMARKS.md \"Memory as it costs\")\n{}",
        idle.node.tail()
    );
    idle.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_with_1000_jobs_stays_under_its_cpu_limit_over_30_s() {
    let idle = IdleNode::settled("idle-cpu").await;
    let limit = if idle.given { CPU_LIMIT.0 } else { CPU_LIMIT.1 };
    let before = thread_cpu_ns(idle.node.pid());
    let started = std::time::Instant::now();
    // The window is what is measured, not a wait for something to happen.
    tokio::time::sleep(CPU_WINDOW).await;
    let after = thread_cpu_ns(idle.node.pid());
    let seconds = started.elapsed().as_secs_f64();
    let spent_ns: u64 = after
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    #[allow(clippy::cast_precision_loss)] // ns of CPU in 30 s: far below 2^52
    let ms_per_s = spent_ns as f64 / 1e6 / seconds;
    let build = idle.build();
    assert_eq!(
        count(&idle.node.log(), "job started"),
        0,
        "a job fired: not an idle node\n{}",
        idle.node.tail()
    );
    eprintln!(
        "idle node, {JOBS} jobs, {} ({build}): {ms_per_s:.3} ms of CPU a second over {seconds:.1} s \
         ({} threads), limit {limit}",
        idle.binary.display(),
        after.len()
    );
    assert!(
        ms_per_s <= limit,
        "an idle node with {JOBS} jobs spent {ms_per_s:.3} ms of CPU a second over {seconds:.1} s, \
         over the {limit} ms limit of a {build} build (bench/idle_cost.sh, docs/BENCHMARKS.md)\n{}",
        idle.node.tail()
    );
    idle.stop().await;
}

/// One node alone in its lock group, owning it, its catch-up over and its heap given back.
struct IdleNode {
    _ensemble: ZkEnsemble,
    _dir: tempfile::TempDir,
    node: Node,
    binary: PathBuf,
    /// A release binary was given by `ZKCRON_IDLE_BINARY`.
    given: bool,
}

impl IdleNode {
    async fn settled(name: &str) -> Self {
        let ensemble = ZkEnsemble::start(1).expect("a ZooKeeper server");
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("idle.toml");
        std::fs::write(
            &config,
            schedule(&format!("{}/{name}", ensemble.connect_string())),
        )
        .expect("write the schedule");
        let given = std::env::var_os("ZKCRON_IDLE_BINARY").map(PathBuf::from);
        let binary = given
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_zkcron")));
        let log = dir.path().join("idle.log");
        let mut node = Node::start(&binary, &config, &log);

        // Connecting, acquiring and the catch-up (one listing of run records per job): bounded
        // generously, a debug build on two busy cores.
        node.wait_log("lock acquired", 1, Duration::from_secs(60))
            .await;
        // Settled: the catch-up (at least one input a job: its listing's answer) is a burst,
        // and the fire driver gives the heap back 200 ms after the last input of one, logging
        // how many inputs it followed ("free heap given back after a burst", at debug). Awaited
        // until those lines after the lock add up to the catch-up, not slept.
        let given_back = Duration::from_secs(60);
        let what = format!("the heap given back after {JOBS} inputs since the lock");
        let settled = try_wait_for(&what, given_back, || {
            let inputs = inputs_given_back(&node.log());
            async move { (inputs >= JOBS).then_some(()) }
        })
        .await;
        if let Err(not_reached) = settled {
            panic!("{not_reached}\n{}", node.tail());
        }
        assert_eq!(
            count(&node.log(), "job started"),
            0,
            "a job fired: not an idle node\n{}",
            node.tail()
        );
        Self {
            _ensemble: ensemble,
            _dir: dir,
            node,
            binary,
            given: given.is_some(),
        }
    }

    fn build(&self) -> &'static str {
        if self.given {
            "ZKCRON_IDLE_BINARY"
        } else {
            "debug"
        }
    }

    async fn stop(self) {
        self.node.stop().await;
    }
}

/// A schedule like `bench/idle_cost.sh`'s — the same six kinds of expression, time zones and
/// spread of fields — with every job's day and month set two months ahead, so that none is due
/// while the test runs (the bench picks its minutes and hours away from the clock instead).
fn schedule(connect: &str) -> String {
    let ahead = Utc::now().date_naive() + chrono::Days::new(60);
    let (day, month) = (ahead.day().min(28), ahead.month());
    let mut text = format!(
        "[zookeeper]\nconnect = \"{connect}\"\nsession_timeout = \"10s\"\n\n\
         [lock]\nname = \"idle-memory\"\nnode_id = \"idle-node\"\n\n[log]\nlevel = \"info\"\n"
    );
    for i in 0..JOBS {
        let (sec, minute, hour) = ((i * 7) % 60, (i * 13) % 60, i % 24);
        let (expression, timezone) = match i % 6 {
            0 => (format!("{sec} {}-59/5 * {day} {month} *", i % 5), None),
            1 => (format!("{sec} {minute} * {day} {month} *"), None),
            2 => (
                format!("{sec} {minute} {hour} {day} {month} *"),
                Some("Europe/Berlin"),
            ),
            3 => (format!("{minute} {hour} {day} {month} *"), None),
            4 => (format!("0 {minute} {hour} {day} {month} *"), None),
            _ => (
                format!("0 {minute} {hour} {day} {month} MON-FRI"),
                Some("America/New_York"),
            ),
        };
        let _ = write!(
            text,
            "\n[[job]]\nname = \"idle-{i:05}\"\nschedule = \"{expression}\"\n"
        );
        if let Some(timezone) = timezone {
            let _ = writeln!(text, "timezone = \"{timezone}\"");
        }
        text.push_str("command = [\"/bin/true\"]\n");
    }
    text
}

/// `Anonymous:` of `/proc/PID/smaps_rollup`, in KiB.
fn anonymous_kib(pid: u32) -> u64 {
    let path = format!("/proc/{pid}/smaps_rollup");
    let rollup = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
    rollup
        .lines()
        .find_map(|line| line.strip_prefix("Anonymous:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no Anonymous line in {path}:\n{rollup}"))
}

/// Each thread's time on a CPU so far, in ns (the first field of `/proc/PID/task/TID/schedstat`).
/// A thread that ends between two readings takes its time with it: an idle node keeps its
/// threads.
fn thread_cpu_ns(pid: u32) -> std::collections::HashMap<String, u64> {
    let tasks = format!("/proc/{pid}/task");
    let entries = std::fs::read_dir(&tasks).unwrap_or_else(|err| panic!("{tasks}: {err}"));
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("schedstat")).ok()?;
            let ns = stat.split_whitespace().next()?.parse().ok()?;
            Some((entry.file_name().to_string_lossy().into_owned(), ns))
        })
        .collect()
}

/// The inputs the fire driver gave the heap back after, added up over its lines since the lock
/// was acquired.
fn inputs_given_back(log: &str) -> usize {
    log.lines()
        .skip_while(|line| !line.contains("lock acquired"))
        .filter(|line| line.contains("free heap given back after a burst"))
        .filter_map(|line| {
            let (_, rest) = line.split_once("inputs=")?;
            rest.split_whitespace().next()?.parse::<usize>().ok()
        })
        .sum()
}

fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|line| line.contains(needle)).count()
}

/// The node, logging at info as the bench's does, and the fire driver at debug for its
/// give-back line.
struct Node {
    child: Child,
    log: PathBuf,
}

impl Node {
    fn start(binary: &Path, config: &Path, log: &Path) -> Self {
        let stderr = std::fs::File::create(log).expect("node log");
        let child = Command::new(binary)
            .args([
                "--log-level",
                "info,zkcron::fire::driver=debug",
                "run",
                "--config",
            ])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|err| panic!("spawn {}: {err}", binary.display()));
        Self {
            child,
            log: log.to_owned(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Waits until the log has `times` lines containing `text`; fails with the log's tail.
    async fn wait_log(&mut self, text: &str, times: usize, within: Duration) {
        let what = format!("{times} log line(s) with {text:?}");
        let found = try_wait_for(&what, within, || {
            let found = count(&self.log(), text) >= times;
            async move { found.then_some(()) }
        })
        .await;
        if let Err(not_reached) = found {
            let exited = self.child.try_wait().ok().flatten();
            panic!("{not_reached} (exited: {exited:?})\n{}", self.tail());
        }
    }

    /// SIGTERM, then waits (bounded) for the exit; killed on drop otherwise.
    async fn stop(mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let exited = try_wait_for("the node exits", Duration::from_secs(15), || {
            let status = self.child.try_wait().ok().flatten();
            async move { status }
        })
        .await;
        assert!(exited.is_ok(), "the node did not stop\n{}", self.tail());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
