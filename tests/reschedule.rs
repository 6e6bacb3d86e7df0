//! Rescheduling a pending submission, and the dead letters of submissions (issue 20), end to
//! end: real `zkcron run`, real ZooKeeper, the CLI as an operator types it.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{
    DELAY, DaemonNode, RECORD_FIRE, SESSION, SLACK, now_ms, read_fires, schedule_text, zkcron_ok,
    zkcron_refused,
};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

/// Waits until `zkcron delayed show ID` says `words`.
async fn shown(id: &str, words: &str, within: Duration, node: &DaemonNode) -> String {
    let config = node.config.clone();
    try_wait_for(&format!("{id}: {words}"), within, || {
        let shown = zkcron_ok(&["delayed", "show", id], &config);
        let done = shown.contains(words).then_some(shown);
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", node.log_tail()))
}

fn fires_of(fires: &Path, id: &str) -> usize {
    read_fires(fires)
        .iter()
        .filter(|f| f.run_id.ends_with(&format!("-{id}")))
        .count()
}

#[tokio::test]
async fn a_pending_submission_moves_once_and_a_failed_one_is_retried_under_a_new_id() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("reschedule"));
    let job = format!(
        "[[job]]\nname = \"close\"\nshell = '{RECORD_FIRE}{}; test \"$(cat)\" != fail'\n",
        fires.display()
    );
    let text = schedule_text(&connect, "reschedule", SESSION, DELAY, &job);
    let node = DaemonNode::start(dir.path(), "m1", &text);
    node.wait_log("lock acquired", SESSION + SLACK).await;
    let config = node.config.clone();

    // An hour away, moved to a second from now: it runs then.
    zkcron_ok(
        &[
            "submit",
            "close",
            "--in",
            "1h",
            "--id",
            "r-1",
            "--payload",
            "ok",
        ],
        &config,
    );
    let moved_at = now_ms();
    let said = zkcron_ok(&["delayed", "reschedule", "r-1", "--in", "1s"], &config);
    assert!(said.starts_with("rescheduled r-1 (close, due "), "{said}");
    shown("r-1", "state      succeeded", SLACK * 2, &node).await;
    let fire = read_fires(&fires)
        .into_iter()
        .find(|f| f.run_id.ends_with("-r-1"))
        .expect("r-1 ran");
    assert!(
        fire.scheduled_ms >= moved_at + 900
            && fire.scheduled_ms < moved_at + 1000 + SLACK.as_millis() as i64,
        "it ran at its new due time: {fire:?}, moved at {moved_at}"
    );
    let refused = zkcron_refused(&["delayed", "reschedule", "r-1", "--in", "1h"], &config);
    assert!(
        refused.contains("r-1 can no longer be rescheduled: it is succeeded"),
        "{refused}"
    );
    let refused = zkcron_refused(&["delayed", "reschedule", "nobody", "--in", "1h"], &config);
    assert!(refused.contains("no submission nobody"), "{refused}");

    // The same move twice (a retried command) moves it once.
    zkcron_ok(
        &[
            "submit",
            "close",
            "--in",
            "1h",
            "--id",
            "r-2",
            "--payload",
            "ok",
        ],
        &config,
    );
    let at = "2030-01-01T00:00:00Z";
    let first = zkcron_ok(&["delayed", "reschedule", "r-2", "--at", at], &config);
    let again = zkcron_ok(&["delayed", "reschedule", "r-2", "--at", at], &config);
    assert!(first.starts_with("rescheduled r-2"), "{first}");
    assert!(again.starts_with("already due then: r-2"), "{again}");
    let listed = zkcron_ok(&["delayed", "list", "--json"], &config);
    let pending = support::daemon::document_items(&listed, "pending");
    let r2: Vec<&String> = pending.iter().filter(|l| l.contains("\"r-2\"")).collect();
    assert_eq!(r2.len(), 1, "one pending r-2: {listed}");
    assert!(r2[0].contains("\"due_unix_ms\":1893456000000"), "{}", r2[0]);
    zkcron_ok(&["delayed", "cancel", "r-2"], &config);

    // A failure is a dead letter; retried, it runs again with its payload, under a new id.
    zkcron_ok(
        &[
            "submit",
            "close",
            "--in",
            "1s",
            "--id",
            "d-1",
            "--payload",
            "fail",
        ],
        &config,
    );
    shown("d-1", "state      failed", SLACK * 2, &node).await;
    let dead = zkcron_ok(&["delayed", "list", "--failed"], &config);
    assert!(dead.lines().any(|l| l.starts_with("d-1 ")), "{dead}");
    assert!(!dead.contains("r-1"), "a success is no dead letter: {dead}");
    let new_id = zkcron_ok(&["delayed", "retry", "d-1", "--id", "d-1.again"], &config);
    assert_eq!(new_id.trim(), "d-1.again");
    let retried = shown("d-1.again", "state      failed", SLACK * 2, &node).await;
    assert!(retried.contains("retry of   d-1"), "{retried}");
    assert!(
        retried.contains("payload    4 bytes"),
        "the payload is copied: {retried}"
    );
    assert_eq!(fires_of(&fires, "d-1.again"), 1);
    let refused = zkcron_refused(&["delayed", "retry", "r-1"], &config);
    assert!(
        refused.contains("submission r-1 did not fail: it is succeeded"),
        "{refused}"
    );
}
