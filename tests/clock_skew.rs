//! A node whose clock is behind takes over (issue 24): real ZooKeeper, real `zkcron run`
//! processes, and the skew injected into one of them by libfaketime (Debian's `faketime`
//! package) — its wall clock 15 s behind, its monotonic clock left real.
//!
//! Records are kept by count (`history = 5` here: five seconds of a per-second job), so the
//! claim alone cannot stop a tick whose record is pruned; without the fire machine's floor
//! the late node fired the last 15 s again, each after a later one.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

mod support;

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::daemon::{DaemonNode, RECORD_FIRE, read_fires, schedule_text};
use support::{fault_lock, shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(4);
const DELAY: Duration = Duration::from_secs(1);
const BEHIND: Duration = Duration::from_secs(15);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[tokio::test]
async fn a_node_15_s_behind_takes_over_and_fires_no_tick_twice_and_none_out_of_order() {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install -y faketime"
    );
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("skew"));
    let job = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nhistory = 5\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    );
    let text = schedule_text(&connect, "skew", SESSION, DELAY, &job);
    let mut healthy = DaemonNode::start(dir.path(), "healthy", &text);
    wait_for(
        "five fires by the healthy node",
        SESSION + SLACK * 2,
        || {
            let done = (read_fires(&fires).len() >= 5).then_some(());
            async move { done }
        },
    )
    .await;
    let behind = DaemonNode::start_with_env(
        dir.path(),
        "behind",
        &text,
        &[
            ("LD_PRELOAD", Path::new(LIBFAKETIME)),
            ("FAKETIME", Path::new("-15s")),
            ("FAKETIME_DONT_FAKE_MONOTONIC", Path::new("1")),
        ],
    );
    behind.wait_log("zkcron started", SLACK).await;
    // A planned handoff: the node behind contends at once.
    healthy.signal(Signal::SIGTERM);
    healthy.wait_exit(SLACK * 2).await;
    let handed_over = read_fires(&fires).len();
    let all = wait_for("three fires by the node behind", BEHIND + SLACK * 3, || {
        let fires = read_fires(&fires);
        let done = (fires.iter().filter(|f| f.node == "behind").count() >= 3).then_some(fires);
        async move { done }
    })
    .await;

    let ticks: Vec<i64> = all.iter().map(|f| f.scheduled_ms).collect();
    let mut twice: Vec<i64> = ticks.clone();
    twice.sort_unstable();
    twice.dedup();
    assert_eq!(twice.len(), ticks.len(), "no tick fired twice: {ticks:?}");
    assert!(
        ticks.windows(2).all(|w| w[0] < w[1]),
        "ticks start in scheduled order across the handoff: {ticks:?}"
    );
    let newest_before = ticks
        .get(..handed_over)
        .and_then(|t| t.iter().max().copied());
    let first_after = all
        .iter()
        .find(|f| f.node == "behind")
        .map(|f| f.scheduled_ms);
    assert!(
        first_after > newest_before,
        "the node behind starts after the newest recorded tick ({newest_before:?}): {first_after:?}"
    );
    let said = behind.log().matches("this node's clock is behind").count();
    assert_eq!(said, 1, "the skew is said once:\n{}", behind.log_tail());
}
