//! The fire machine's promises end to end (issue 8): after a crash failover the new owner starts
//! a job's ticks in scheduled order, and every tick nobody fired is recorded `missed`, visible in
//! `zkcron history` and counted in `zkcron status`. Real ZooKeeper, real `zkcron run` processes.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::time::Duration;

use support::daemon::{DaemonNode, RECORD_FIRE, now_ms, read_fires, schedule_text, zkcron_ok};
use support::{fault_lock, shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(2);

#[tokio::test]
async fn issue_8_a_crash_failover_starts_ticks_in_order_and_records_the_gap_as_missed() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("fire-gap"));
    let job = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    );
    let text = schedule_text(&connect, "fire", SESSION, DELAY, &job);
    let mut nodes = [
        DaemonNode::start(dir.path(), "g1", &text),
        DaemonNode::start(dir.path(), "g2", &text),
    ];
    let first = wait_for("a first fire", SESSION * 5, || {
        let found = read_fires(&fires).first().cloned();
        async move { found }
    })
    .await;
    let owner = nodes
        .iter()
        .position(|n| n.node_id == first.node)
        .expect("owner is ours");
    // Two more ticks by the first owner, then kill -9 it.
    wait_for("two more fires", Duration::from_secs(3) + SLACK, || {
        let done = (read_fires(&fires).len() >= 3).then_some(());
        async move { done }
    })
    .await;
    let killed_ms = now_ms();
    nodes[owner].kill();
    let survivor = &nodes[1 - owner];
    let taken = wait_for(
        "two on-time fires by the new owner",
        SESSION + DELAY + SLACK * 2,
        || {
            let fires = read_fires(&fires);
            let on_time = fires
                .iter()
                .filter(|f| f.node == survivor.node_id && f.resumed == "0")
                .count();
            let done = (on_time >= 2).then_some(fires);
            async move { done }
        },
    )
    .await;

    // Defect 2: starts (the order of the log's lines) follow the schedule, with no repeat.
    let ticks: Vec<i64> = taken.iter().map(|f| f.scheduled_ms).collect();
    assert!(
        ticks.windows(2).all(|w| w[0] < w[1]),
        "ticks start in scheduled order, each once: {ticks:?}"
    );

    // Defect 3: every tick from the first fire to the new owner's last one fired, or is covered by
    // a `missed` record in history.
    let history = zkcron_ok(
        &["history", "tick", "--json", "--limit", "100"],
        &survivor.config,
    );
    let records: Vec<serde_json::Value> = support::daemon::document_items(&history, "runs")
        .iter()
        .map(|line| serde_json::from_str(line).expect("a JSON record"))
        .collect();
    let gaps: Vec<(i64, i64, u64)> = records
        .iter()
        .filter(|r| r["status"] == "missed")
        .map(|r| {
            (
                r["missed_from_unix_ms"].as_i64().expect("gap start"),
                r["scheduled_unix_ms"].as_i64().expect("gap end"),
                r["missed_ticks"].as_u64().expect("gap size"),
            )
        })
        .collect();
    assert!(
        !gaps.is_empty(),
        "the outage's ticks are recorded missed: {history}"
    );
    for &(from, to, count) in &gaps {
        assert_eq!(
            u64::try_from((to - from) / 1000 + 1).expect("positive"),
            count,
            "a gap's count matches its range {from}..{to}"
        );
        assert!(
            from > killed_ms - 1000 && to < taken.last().map_or(0, |f| f.scheduled_ms),
            "the gap lies in the outage: {from}..{to}, killed at {killed_ms}"
        );
    }
    let covered = |tick: i64| gaps.iter().any(|&(from, to, _)| from <= tick && tick <= to);
    let last = *ticks.last().expect("fires");
    let lost: Vec<i64> = (1..)
        .map(|k| first.scheduled_ms + 1000 * k)
        .take_while(|&tick| tick < last)
        .filter(|tick| !ticks.contains(tick) && !covered(*tick))
        .collect();
    assert!(
        lost.is_empty(),
        "ticks neither fired nor recorded missed: {lost:?}\nfired {ticks:?}\ngaps {gaps:?}"
    );
    assert!(
        records.iter().any(|r| r["status"] == "missed"
            && r["error"]
                .as_str()
                .is_some_and(|e| e.contains("no node owned the lock"))),
        "the gap says why: {history}"
    );

    let missed: u64 = gaps.iter().map(|g| g.2).sum();
    let status = zkcron_ok(&["status"], &survivor.config);
    let header = status
        .lines()
        .find(|l| l.starts_with("JOB "))
        .unwrap_or_else(|| panic!("a job table: {status}"));
    let line = status
        .lines()
        .find(|l| l.starts_with("tick "))
        .unwrap_or_else(|| panic!("a line for the job: {status}"));
    // MISSED is right-aligned under its header, six wide.
    let end = header.find("MISSED").expect("a MISSED column") + "MISSED".len();
    let shown = line.get(end - 6..end).map(str::trim);
    assert_eq!(
        shown,
        Some(missed.to_string().as_str()),
        "status counts the missed ticks\n{status}"
    );
}
