//! `zkcron backfill` (issue 20), end to end: a real `zkcron run` and real ZooKeeper. The past
//! ticks of a yearly job have no records; a backfill runs them once each, in order, with
//! `ZKCRON_BACKFILL=1`, and a second backfill of the same range finds them recorded.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{
    DELAY, DaemonNode, Fire, RECORD_FIRE, SESSION, SLACK, read_fires, schedule_text, zkcron_ok,
    zkcron_refused,
};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

/// Waits for `count` runs in the fire log; on a timeout shows the node's log.
async fn wait_fires(fires: &Path, count: usize, node: &DaemonNode) -> Vec<Fire> {
    try_wait_for(&format!("{count} backfilled runs"), SLACK * 3, || {
        let all = read_fires(fires);
        let done = (all.len() >= count).then_some(all);
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", node.log_tail()))
}

#[tokio::test]
async fn past_ticks_without_records_run_once_each_in_order() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let flags = dir.path().join("backfill.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("backfill"));
    let job = format!(
        "[[job]]\nname = \"yearly\"\nschedule = \"0 0 0 1 1 *\"\n\
         shell = '{RECORD_FIRE}{}; echo \"$ZKCRON_BACKFILL\" >> {}'\n\
         [[job]]\nname = \"often\"\nschedule = \"* * * * * *\"\nshell = \"true\"\nenabled = false\n",
        fires.display(),
        flags.display()
    );
    let text = schedule_text(&connect, "backfill", SESSION, DELAY, &job);
    let node = DaemonNode::start(dir.path(), "b1", &text);
    node.wait_log("lock acquired", SESSION + SLACK).await;
    let config = node.config.clone();
    let range = ["--from", "2023-01-01", "--to", "2026-01-01T00:00:00Z"];

    let dry = zkcron_ok(
        &[&["backfill", "yearly", "--dry-run"][..], &range[..]].concat(),
        &config,
    );
    assert_eq!(dry.matches("  would run").count(), 4, "{dry}");
    assert!(dry.contains("dry run: 4 tick(s) would run"), "{dry}");
    assert!(read_fires(&fires).is_empty(), "a dry run runs nothing");

    // One tick first; then the whole range, which finds it recorded and runs the other three.
    let one = zkcron_ok(
        &[
            "backfill",
            "yearly",
            "--from",
            "2024-01-01",
            "--to",
            "2024-01-01",
        ],
        &config,
    );
    assert!(one.contains("1 tick(s) requested"), "{one}");
    wait_fires(&fires, 1, &node).await;
    let said = zkcron_ok(&[&["backfill", "yearly"][..], &range[..]].concat(), &config);
    assert!(
        said.contains("3 tick(s) requested") && said.matches("recorded succeeded").count() == 1,
        "{said}"
    );
    let ran = wait_fires(&fires, 4, &node).await;
    let years: Vec<String> = ran.iter().map(|f| f.scheduled_at[..4].to_owned()).collect();
    assert_eq!(
        years,
        ["2024", "2023", "2025", "2026"],
        "2024 once, then the rest in order: {ran:?}"
    );
    // Each run writes its flag after its fire line: the last one may still be writing it.
    let flags = try_wait_for("four flags", SLACK, || {
        let read = std::fs::read_to_string(&flags).unwrap_or_default();
        async move { (read.lines().count() >= 4).then_some(read) }
    })
    .await
    .unwrap_or_else(|_| std::fs::read_to_string(&flags).unwrap_or_default());
    assert_eq!(flags, "1\n1\n1\n1\n", "ZKCRON_BACKFILL=1");

    // The same range again: every tick is recorded now; nothing runs twice.
    let again = zkcron_ok(&[&["backfill", "yearly"][..], &range[..]].concat(), &config);
    assert_eq!(again.matches("recorded succeeded").count(), 4, "{again}");
    assert!(again.contains("nothing to run"), "{again}");

    for (from, to, job, says) in [
        ("2026-01-01", "2023-01-01", "yearly", "is before --from"),
        ("2026-01-01", "2999-01-01", "yearly", "is after now"),
        ("2026-01-01", "2026-01-02", "often", "86401 ticks from"),
    ] {
        let refused = zkcron_refused(&["backfill", job, "--from", from, "--to", to], &config);
        assert!(refused.contains(says), "{refused}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read_fires(&fires).len(), 4, "each tick once");
}
