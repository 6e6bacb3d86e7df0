//! Jitter (issue 20), end to end: each tick starts at the tick plus the job's offset for it —
//! the same instant whichever node owns, before and after a kill -9 of the owner. Real
//! ZooKeeper, real `zkcron run` processes; each run notes its tick, its node and when it
//! started.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{DELAY, DaemonNode, SESSION, SLACK, schedule_text};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

const JITTER: Duration = Duration::from_secs(4);
/// Two on-time runs of a `*/5` job from any instant: up to 5 s to its next tick, 5 s to the
/// one after, and up to the jitter after that.
const TWO_TICKS: Duration = Duration::from_secs(14);
/// From the instant a run is due to its shell noting the time: fork, exec and `date`, on a
/// loaded CI machine. A start before its instant is never allowed.
const START_LATENESS_MS: i64 = 500;
/// A node that has just gained the lock reads each job's records (catch-up) before it starts the
/// job's ticks, so that they start in order: a tick due in that moment waits for the reading
/// (CI saw 688 ms, right after the takeover). Only a node's first run gets this bound.
const FIRST_RUN_LATENESS_MS: i64 = 3_000;

/// One run as its job noted it.
#[derive(Debug)]
struct Start {
    tick: i64,
    node: String,
    /// `ZKCRON_RESUMED=1`: a tick that came due while no node could fire (the takeover), run
    /// late by catch-up.
    resumed: bool,
    started: i64,
}

fn starts(path: &Path) -> Vec<Start> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "{line:?}");
            Start {
                tick: f[0].parse().expect("tick"),
                node: f[1].to_owned(),
                resumed: f[2] == "1",
                started: f[3].parse().expect("start"),
            }
        })
        .collect()
}

/// Waits for `count` runs by `node`; on a timeout shows its log.
async fn wait_runs(log: &Path, node: &str, count: usize, within: Duration, shown: &DaemonNode) {
    try_wait_for(&format!("{count} runs by {node}"), within, || {
        let done = (starts(log)
            .iter()
            .filter(|s| s.node == node && !s.resumed)
            .count()
            >= count)
            .then_some(());
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", shown.log_tail()));
}

#[tokio::test]
async fn every_tick_starts_at_its_offset_whichever_node_owns() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("jitter"));
    let job = format!(
        "[[job]]\nname = \"spread\"\nschedule = \"*/5 * * * * *\"\njitter = \"{}s\"\n\
         shell = 'echo \"$ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_NODE $ZKCRON_RESUMED $(date +%s%3N)\" >> {}'\n",
        JITTER.as_secs(),
        log.display()
    );
    let text = schedule_text(&connect, "jitter", SESSION, DELAY, &job);
    let mut first = DaemonNode::start(dir.path(), "j1", &text);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start(dir.path(), "j2", &text);
    second
        .wait_log("zookeeper session established", SLACK)
        .await;
    wait_runs(&log, "j1", 2, TWO_TICKS + SLACK, &first).await;
    first.kill();
    wait_runs(&log, "j2", 2, SESSION + DELAY + TWO_TICKS + SLACK, &second).await;

    let runs = starts(&log);
    let mut nodes_seen = std::collections::HashSet::new();
    for run in &runs {
        let first_of_node = nodes_seen.insert(run.node.clone());
        let at = chrono::DateTime::from_timestamp_millis(run.tick).expect("tick");
        let offset = zkcron::schedule::jitter_offset("spread", at, JITTER).num_milliseconds();
        assert!(
            (0..4_000).contains(&offset),
            "offset {offset} ms within the jitter"
        );
        let late = run.started - (run.tick + offset);
        // A caught-up tick runs late, never early; every other one at its instant.
        let allowed = if run.resumed {
            0..i64::MAX
        } else if first_of_node {
            0..FIRST_RUN_LATENESS_MS
        } else {
            0..START_LATENESS_MS
        };
        assert!(
            allowed.contains(&late),
            "{} started tick {} {late} ms after tick + its offset {offset} ms: {runs:?}",
            run.node,
            run.tick
        );
    }
    let mut ticks: Vec<i64> = runs.iter().map(|run| run.tick).collect();
    ticks.sort_unstable();
    let before = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), before, "no tick twice: {runs:?}");
}
