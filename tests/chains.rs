//! Jobs that follow jobs (`after`, issue 36) on real daemons and a real ZooKeeper: every
//! succeeded run of a parent has exactly one run of its child, at the parent's instant, across
//! a kill -9 of the owner mid-chain; a child in another lock group is run by that group's
//! owner; a diamond with one failing parent records the child's instant `skipped`, naming it.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use support::daemon::{DaemonNode, logs_of, schedule_text, zkcron_ok};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);

/// Appends `$ZKCRON_JOB $ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_PARENT_RUN_ID $ZKCRON_NODE` to `log`.
fn record_start(log: &Path) -> String {
    format!(
        "echo \"$ZKCRON_JOB $ZKCRON_SCHEDULED_UNIX_MS ${{ZKCRON_PARENT_RUN_ID:--}} $ZKCRON_NODE\" >> {}",
        log.display()
    )
}

/// One start a job recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Start {
    job: String,
    scheduled_ms: i64,
    parents: String,
    node: String,
}

fn starts(log: &Path) -> Vec<Start> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "start line {line:?}");
            Start {
                job: f[0].to_owned(),
                scheduled_ms: f[1].parse().expect("scheduled ms"),
                parents: f[2].to_owned(),
                node: f[3].to_owned(),
            }
        })
        .collect()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn starts_of<'s>(all: &'s [Start], job: &str) -> Vec<&'s Start> {
    all.iter().filter(|s| s.job == job).collect()
}

/// The job's records as `zkcron history --json` shows them: (scheduled ms, status, run id,
/// parents' run ids).
fn records(job: &str, config: &Path) -> Vec<(i64, String, String, Vec<String>)> {
    zkcron_ok(&["history", job, "--json", "--limit", "1000"], config)
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).expect("a json record");
            let parents = record["parents"]
                .as_array()
                .map(|all| {
                    all.iter()
                        .map(|p| p["run_id"].as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            (
                record["scheduled_unix_ms"].as_i64().expect("scheduled"),
                record["status"].as_str().expect("status").to_owned(),
                record["run_id"].as_str().expect("run id").to_owned(),
                parents,
            )
        })
        .collect()
}

/// Waits until every run of `parent` that `admits` has a child run in `log`, and no parent run is
/// still open; returns the parent's records.
async fn chain_settled(
    parent: &str,
    child: &str,
    log: &Path,
    config: &Path,
    nodes: &[&DaemonNode],
) -> Vec<(i64, String, String, Vec<String>)> {
    let found = try_wait_for(
        &format!("every succeeded {parent} has its {child}"),
        SLACK * 4,
        || {
            let parents = records(parent, config);
            let all = starts(log);
            let children = starts_of(&all, child);
            let settled = parents
                .iter()
                .all(|(ms, status, ..)| match status.as_str() {
                    "succeeded" => children.iter().any(|c| c.scheduled_ms == *ms),
                    "running" | "claimed" => false,
                    _ => true,
                });
            let done = settled.then_some(parents);
            async move { done }
        },
    )
    .await;
    found.unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\nparent records {:?}\nstarts {:?}\n{}",
            records(parent, config),
            starts(log),
            logs_of(nodes)
        )
    })
}

#[tokio::test]
async fn every_succeeded_extract_has_exactly_one_load_at_its_instant_across_a_kill_9_mid_chain() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("chain"));
    // extract every 2 s, failing every third tick; load after each success, for a second.
    let jobs = format!(
        "[[job]]\nname = \"extract\"\nschedule = \"*/2 * * * * *\"\nshell = '{}; sleep 0.3; \
         test $(( ZKCRON_SCHEDULED_UNIX_MS / 2000 % 3 )) -ne 0'\n\
         [[job]]\nname = \"load\"\nafter = [\"extract\"]\nshell = '{}; sleep 1'\n",
        record_start(&log),
        record_start(&log),
    );
    let text = schedule_text(&connect, "chain", SESSION, DELAY, &jobs);
    let mut first = DaemonNode::start(dir.path(), "c1", &text);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start(dir.path(), "c2", &text);
    second
        .wait_log("zookeeper session established", SLACK)
        .await;

    try_wait_for("two loads on c1", Duration::from_secs(20), || {
        let all = starts(&log);
        let loads = starts_of(&all, "load").len();
        async move { (loads >= 2).then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&first, &second])));
    // Mid-chain: parents end and their children wait (load is paused), then the owner dies.
    zkcron_ok(&["pause", "load"], &first.config);
    let paused_at = now_ms();
    let config = first.config.clone();
    try_wait_for(
        "two extracts succeeded with their loads waiting",
        Duration::from_secs(20),
        || {
            let waiting = records("extract", &config)
                .iter()
                .filter(|(ms, status, ..)| *ms > paused_at && status == "succeeded")
                .count();
            async move { (waiting >= 2).then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&first, &second])));
    first.kill();
    let all = starts(&log);
    let last_load = starts_of(&all, "load")
        .iter()
        .map(|load| load.scheduled_ms)
        .max()
        .unwrap_or_default();
    assert!(last_load < paused_at, "a paused load waits: {all:?}");
    second
        .wait_log("lock acquired", SESSION + DELAY + SLACK)
        .await;
    zkcron_ok(&["resume", "load"], &second.config);
    let waited = try_wait_for("the waiting loads run on c2", SLACK * 3, || {
        let all = starts(&log);
        let on_c2 = starts_of(&all, "load")
            .iter()
            .filter(|s| s.node == "c2" && s.scheduled_ms > paused_at)
            .count();
        async move { (on_c2 >= 2).then_some(on_c2) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&second])));
    assert!(waited >= 2);
    // No more parents: what is promised drains.
    zkcron_ok(&["pause", "extract"], &second.config);
    let extracts = chain_settled("extract", "load", &log, &second.config, &[&second]).await;

    let all = starts(&log);
    let loads = starts_of(&all, "load");
    let mut per_instant: BTreeMap<i64, usize> = BTreeMap::new();
    for load in &loads {
        *per_instant.entry(load.scheduled_ms).or_default() += 1;
    }
    let succeeded: Vec<&(i64, String, String, Vec<String>)> = extracts
        .iter()
        .filter(|(_, s, ..)| s == "succeeded")
        .collect();
    // Two loads before the pause, two extracts waiting through the kill: at least four.
    assert!(
        succeeded.len() >= 4,
        "enough runs to mean something: {extracts:?}"
    );
    assert!(
        extracts.iter().any(|(_, s, ..)| s == "failed"),
        "some extracts failed: {extracts:?}"
    );
    for (ms, _, run_id, _) in &succeeded {
        assert_eq!(
            per_instant.get(ms),
            Some(&1),
            "extract at {ms} succeeded: exactly one load at its instant; loads {loads:?}"
        );
        let load = loads.iter().find(|l| l.scheduled_ms == *ms);
        assert_eq!(
            load.map(|l| l.parents.as_str()),
            Some(run_id.as_str()),
            "ZKCRON_PARENT_RUN_ID names the extract run"
        );
    }
    for (ms, count) in &per_instant {
        assert!(
            succeeded.iter().any(|(s, ..)| s == ms),
            "a load at {ms} ({count} times) follows no succeeded extract: {extracts:?}"
        );
    }
    // The failed extracts' instants are recorded for load, skipped and naming the parent
    // (each as soon as its mark is read: waited for, not assumed).
    let failed: Vec<i64> = extracts
        .iter()
        .filter(|(_, s, ..)| s == "failed")
        .map(|(ms, ..)| *ms)
        .collect();
    let config = second.config.clone();
    try_wait_for(
        "every failed extract's instant skipped for load",
        SLACK,
        || {
            let load_records = records("load", &config);
            let done = failed.iter().all(|ms| {
                load_records
                    .iter()
                    .any(|(m, s, ..)| m == ms && s == "skipped")
            });
            async move { done.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}: failed {failed:?}; load {:?}",
            records("load", &config)
        )
    });
    let shown = zkcron_ok(&["history", "load"], &second.config);
    assert!(
        shown.contains("after: extract run extract-"),
        "history shows which parent run a load came from: {shown}"
    );
    assert!(
        shown.contains("extract ended failed (after_status = succeeded)"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_child_in_another_group_is_run_by_that_groups_owner_and_a_diamond_with_a_failing_parent_is_skipped()
 {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("chain-groups"));
    // `left` always succeeds, `right` fails on odd ticks; `join` after both, `audit` after
    // `left` in group b. Node g1 alone may own group a, g2 group b (tags).
    let record = record_start(&log);
    let jobs = format!(
        "[[group]]\nname = \"a\"\nrequires = [\"a\"]\n[[group]]\nname = \"b\"\nrequires = [\"b\"]\n\
         [[job]]\nname = \"left\"\ngroup = \"a\"\nschedule = \"*/2 * * * * *\"\nshell = '{record}'\n\
         [[job]]\nname = \"right\"\ngroup = \"a\"\nschedule = \"*/2 * * * * *\"\nshell = '{record}; \
         test $(( ZKCRON_SCHEDULED_UNIX_MS / 2000 % 2 )) -eq 0'\n\
         [[job]]\nname = \"join\"\ngroup = \"a\"\nafter = [\"left\", \"right\"]\nshell = '{record}'\n\
         [[job]]\nname = \"audit\"\ngroup = \"b\"\nafter = [\"left\"]\nshell = '{record}'\n"
    );
    let text = |tag: &str| {
        let node = format!("[node]\ntags = [\"{tag}\"]\n{jobs}");
        schedule_text(&connect, "chain-groups", SESSION, DELAY, &node)
    };
    let g1 = DaemonNode::start(dir.path(), "g1", &text("a"));
    let g2 = DaemonNode::start(dir.path(), "g2", &text("b"));
    let nodes = [&g1, &g2];
    try_wait_for("joins and audits", Duration::from_secs(30), || {
        let all = starts(&log);
        let enough = starts_of(&all, "join").len() >= 2 && starts_of(&all, "audit").len() >= 4;
        async move { enough.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\nstarts {:?}\n{}",
            starts(&log),
            logs_of(&nodes)
        )
    });
    zkcron_ok(&["pause", "left"], &g1.config);
    zkcron_ok(&["pause", "right"], &g1.config);
    chain_settled("left", "audit", &log, &g1.config, &nodes).await;

    let all = starts(&log);
    let audits = starts_of(&all, "audit");
    assert!(
        audits.iter().all(|a| a.node == "g2"),
        "group b's owner runs audit: {audits:?}"
    );
    let lefts = records("left", &g1.config);
    for (ms, status, ..) in lefts.iter().filter(|(_, s, ..)| s == "succeeded") {
        let count = audits.iter().filter(|a| a.scheduled_ms == *ms).count();
        assert_eq!(count, 1, "left at {ms} ({status}): one audit; {audits:?}");
    }
    // A join runs only where both parents succeeded; its other instants are skipped, naming
    // the failed parent.
    let rights = records("right", &g1.config);
    let joins = starts_of(&all, "join");
    for join in &joins {
        let right = rights.iter().find(|(ms, ..)| *ms == join.scheduled_ms);
        assert_eq!(
            right.map(|(_, s, ..)| s.as_str()),
            Some("succeeded"),
            "a join only after both: {join:?}"
        );
        assert_eq!(
            join.parents.split(',').count(),
            2,
            "both parents' runs: {join:?}"
        );
    }
    let settled = try_wait_for("join's failed instants skipped", SLACK * 2, || {
        let joined = records("join", &g1.config);
        let failed: Vec<i64> = rights
            .iter()
            .filter(|(_, s, ..)| s == "failed")
            .map(|(ms, ..)| *ms)
            .collect();
        let done = failed
            .iter()
            .all(|ms| joined.iter().any(|(m, s, ..)| m == ms && s == "skipped"))
            && !failed.is_empty();
        async move { done.then_some(joined) }
    })
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\nright {rights:?}\njoin {:?}",
            records("join", &g1.config)
        )
    });
    let status = zkcron_ok(&["status"], &g1.config);
    let line = status.lines().find(|l| l.starts_with("join "));
    assert!(
        line.is_some_and(|l| l.contains("after left, right")),
        "status shows the chain: {status}"
    );
    let shown = zkcron_ok(&["history", "join"], &g1.config);
    assert!(
        shown.contains("right ended failed (after_status = succeeded)"),
        "{shown}"
    );
    assert!(!settled.is_empty());
}
