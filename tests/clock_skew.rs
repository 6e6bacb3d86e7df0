//! A node whose clock is behind (issue 24): it takes over without firing a tick twice, and while
//! a healthy member is there it does not keep the lock. Real ZooKeeper, real `zkcron run`
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

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use support::daemon::{DaemonNode, RECORD_FIRE, read_fires, schedule_text};
use support::faked_clock::{FakedClock, LIBFAKETIME};
use support::{fault_lock, shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(4);
const DELAY: Duration = Duration::from_secs(1);
const BEHIND: Duration = Duration::from_secs(15);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);

/// A lock group with one per-second job (`history = 5`) recording its fires: the temp dir, the
/// fires file and the schedule text.
fn per_second_job(chroot: &str) -> (tempfile::TempDir, PathBuf, String) {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install -y faketime"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(chroot));
    let job = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nhistory = 5\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    );
    let text = schedule_text(&connect, "skew", SESSION, DELAY, &job);
    (dir, fires, text)
}

/// A node named `behind` whose wall clock is [`BEHIND`] behind (libfaketime), its monotonic
/// clock real.
fn start_behind(dir: &Path, text: &str) -> DaemonNode {
    DaemonNode::start_with_env(
        dir,
        "behind",
        text,
        &[
            ("LD_PRELOAD", Path::new(LIBFAKETIME)),
            ("FAKETIME", Path::new("-15s")),
            ("FAKETIME_DONT_FAKE_MONOTONIC", Path::new("1")),
        ],
    )
}

/// Every tick in `ticks` fired once, in scheduled order.
fn once_and_in_order(ticks: &[i64]) {
    let mut once = ticks.to_vec();
    once.sort_unstable();
    once.dedup();
    assert_eq!(once.len(), ticks.len(), "no tick fired twice: {ticks:?}");
    assert!(
        ticks.windows(2).all(|w| w[0] < w[1]),
        "ticks start in scheduled order across the handover: {ticks:?}"
    );
}

#[tokio::test]
async fn a_node_15_s_behind_takes_over_and_fires_no_tick_twice_and_none_out_of_order() {
    let _serial = fault_lock();
    let (dir, fires, text) = per_second_job("skew");
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
    let behind = start_behind(dir.path(), &text);
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
    once_and_in_order(&ticks);
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
    // Alone once the healthy node has gone, it fires by the servers' clock; before its first
    // clock check it may have seen its clock behind the newest record, and said so once.
    let said = behind.log().matches("this node's clock is behind").count();
    assert!(
        said <= 1,
        "the skew is said once at most:\n{}",
        behind.log_tail()
    );
    assert!(
        behind
            .log()
            .contains("firing by the ensemble's clock (offset -15.0 s)"),
        "{}",
        behind.log_tail()
    );
    // Its clock check warned too: alone, off the servers' (it keeps firing).
    let log = behind.log();
    let clock_lines: Vec<&str> = log.lines().filter(|l| l.contains("clock")).collect();
    assert!(
        log.contains("no other member can fire instead"),
        "alone, off the servers': {clock_lines:#?}"
    );
}

/// Issue 24 §3: a node whose clock is off the other members' by more than
/// `lock.max_clock_offset` does not keep the lock. Alone it owns and fires (only warning: no one
/// else could fire instead); once a healthy member is there, it hands the lock over, stays out
/// of contention, and `status` shows each member's clock. No tick fires twice or out of order.
#[tokio::test]
async fn a_node_off_the_fleets_clock_hands_the_lock_over_and_stays_out_of_contention() {
    let _serial = fault_lock();
    let (dir, fires, text) = per_second_job("skew-yield");
    let behind = start_behind(dir.path(), &text);
    behind.wait_log("owns the lock", SESSION + SLACK).await;
    behind
        .wait_log("no other member can fire instead", SESSION + SLACK)
        .await;
    wait_for("two fires by the node behind, alone", SLACK * 2, || {
        let done = (read_fires(&fires).len() >= 2).then_some(());
        async move { done }
    })
    .await;

    // A clock check every session timeout (4 s here) sees the healthy member's offset.
    let healthy = DaemonNode::start(dir.path(), "healthy", &text);
    behind
        .wait_log("stays out of contention", SESSION + SLACK)
        .await;
    healthy.wait_log("owns the lock", SESSION + SLACK).await;
    let status = support::daemon::zkcron_ok(&["status"], &healthy.config);
    let row = |node: &str| {
        status
            .lines()
            .find(|line| line.trim_start().starts_with(node))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(row("behind").contains("OUT OF CONTENTION"), "{status}");
    assert!(
        row("behind").contains("clock -1"),
        "about 15 s behind: {status}"
    );
    assert!(!row("healthy").contains("OUT OF CONTENTION"), "{status}");
    wait_for("three fires by the healthy node", SLACK * 2, || {
        let done = (read_fires(&fires)
            .iter()
            .filter(|f| f.node == "healthy")
            .count()
            >= 3)
            .then_some(());
        async move { done }
    })
    .await;

    let all = read_fires(&fires);
    let ticks: Vec<i64> = all.iter().map(|f| f.scheduled_ms).collect();
    once_and_in_order(&ticks);
    let last_behind = all.iter().rposition(|f| f.node == "behind");
    let first_healthy = all.iter().position(|f| f.node == "healthy");
    assert!(
        last_behind < first_healthy,
        "the node behind fires nothing once it has handed over: {all:?}"
    );
    assert_eq!(
        behind.log().matches("owns the lock").count(),
        1,
        "it never contends again while its clock is off:\n{}",
        behind.log_tail()
    );
}

/// Issue 31, defect 2: the owner's wall clock steps back 20 s (an NTP correction, a VM resumed)
/// beside a healthy peer. The owner judges itself skewed and hands the lock over — logged as a
/// handover, naming the peer, not as a lost lock — and the cancel of the tick it had claimed
/// ahead, whose launcher now waits 20 s for its instant, does not wait for it: its guard goes
/// at once, and the peer runs the job's ticks. Of the 25 ticks after the step, at least 17
/// run (the owner's clock check takes a session timeout to see the step), none twice.
#[tokio::test]
async fn a_clock_stepping_back_on_the_owner_does_not_stall_the_next_owner() {
    const STEP: i64 = 20_000;
    const AFTER_STEP: i64 = 25_000;
    let _serial = fault_lock();
    let (dir, fires, text) = per_second_job("skew-step");
    // Its clock steps when the test sets it. Monotonic time stays real.
    let clock = FakedClock::new(dir.path(), "stepper", 0);
    let stepper = DaemonNode::start_with_env(dir.path(), "stepper", &text, &clock.env());
    stepper.wait_log("owns the lock", SESSION + SLACK).await;
    let healthy = DaemonNode::start(dir.path(), "healthy", &text);
    healthy
        .wait_log("lock held by another node", SESSION + SLACK)
        .await;
    wait_for("three fires by the stepper", SLACK * 2, || {
        let done = (read_fires(&fires).len() >= 3).then_some(());
        async move { done }
    })
    .await;

    let stepped_ms = support::daemon::now_ms();
    clock.set(-STEP);
    let after = Duration::from_millis(u64::try_from(AFTER_STEP).expect("positive"));
    stepper
        .wait_log("lock handed over to healthy", SESSION * 2 + SLACK)
        .await;
    tokio::time::sleep(after.saturating_sub(Duration::from_millis(
        u64::try_from(support::daemon::now_ms() - stepped_ms).unwrap_or(0),
    )))
    .await;
    // The last of the 25 ticks has had time to be recorded by the job.
    let last_tick = (stepped_ms / 1000 + AFTER_STEP / 1000) * 1000;
    wait_for(
        "the 25th tick after the step, or a later one",
        SLACK,
        || {
            let done = read_fires(&fires)
                .iter()
                .any(|f| f.scheduled_ms >= last_tick)
                .then_some(());
            async move { done }
        },
    )
    .await;

    let all = read_fires(&fires);
    let ticks: Vec<i64> = all.iter().map(|f| f.scheduled_ms).collect();
    let mut once = ticks.clone();
    once.sort_unstable();
    once.dedup();
    assert_eq!(once.len(), ticks.len(), "no tick fired twice: {all:?}");
    let ran = once
        .iter()
        .filter(|tick| **tick > stepped_ms && **tick <= stepped_ms + AFTER_STEP)
        .count();
    assert!(
        ran >= 17,
        "only {ran} of the 25 ticks after the step ran: {all:?}\n--- stepper ---\n{}\n--- healthy ---\n{}",
        stepper.log_tail(),
        healthy.log_tail()
    );
    let log = stepper.log();
    let lost: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("lock::driver") && l.contains("lock lost"))
        .collect();
    assert!(lost.is_empty(), "a handover is not a lost lock: {lost:#?}");
    assert!(
        log.contains("the wall clock stepped"),
        "the step is noticed, so that no limit on the stop path stretches with it:\n{}",
        stepper.log_tail()
    );
}

/// Issue 34: a node alone whose clock is off the ZooKeeper servers' fires by theirs — its own
/// corrected by the offset it measures — so that 15 s ahead it fires no tick 15 s early, and ten
/// minutes behind it does not fire nothing for ten minutes. Each job records the true time of
/// its start (its `date` without libfaketime), which must be at or after its scheduled instant
/// and close to it; no tick fires twice; the log and `status` say how it fires.
#[tokio::test]
async fn a_node_alone_fires_by_the_ensembles_clock_ahead_or_behind() {
    let _serial = fault_lock();
    for (faked, said) in [("+15s", "offset +15.0 s"), ("-600s", "offset -600.0 s")] {
        let dir = tempfile::tempdir().expect("temp dir");
        let starts = dir.path().join("starts.log");
        let connect =
            shared_ensemble().connect_string_with_chroot(&unique_chroot("ensemble-clock"));
        let job = format!(
            "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\n\
             shell = 'echo \"$ZKCRON_SCHEDULED_UNIX_MS $(env -u LD_PRELOAD -u FAKETIME date +%s%3N)\" >> {}'\n",
            starts.display()
        );
        let text = schedule_text(&connect, "alone", SESSION, DELAY, &job);
        let node = DaemonNode::start_with_env(
            dir.path(),
            "alone",
            &text,
            &[
                ("LD_PRELOAD", Path::new(LIBFAKETIME)),
                ("FAKETIME", Path::new(faked)),
                ("FAKETIME_DONT_FAKE_MONOTONIC", Path::new("1")),
            ],
        );
        node.wait_log("firing by the ensemble's clock", SESSION + SLACK)
            .await;
        let read = || -> Vec<(i64, i64)> {
            std::fs::read_to_string(&starts)
                .unwrap_or_default()
                .lines()
                .filter_map(|line| {
                    let (tick, at) = line.split_once(' ')?;
                    Some((tick.parse().ok()?, at.parse().ok()?))
                })
                .collect()
        };
        let fired = support::try_wait_for(&format!("five fires, clock {faked}"), SLACK * 4, || {
            let fired = read();
            async move { (fired.len() >= 5).then_some(fired) }
        })
        .await
        .unwrap_or_else(|_| panic!("clock {faked}: five fires: {:?}\n{}", read(), node.log()));
        let ticks: Vec<i64> = fired.iter().map(|(tick, _)| *tick).collect();
        once_and_in_order(&ticks);
        for (tick, at) in &fired {
            let late = at - tick;
            // Never early by the true clock; on time within a busy machine's second.
            assert!(
                (0..1_000).contains(&late),
                "clock {faked}: tick {tick} started {late} ms after it by the true clock: {fired:?}"
            );
        }
        let log = node.log();
        assert!(
            log.contains(said),
            "clock {faked}: the log says {said}:\n{log}"
        );
        let status = support::daemon::zkcron_ok(&["status"], &node.config);
        assert!(
            status.contains("firing by the ensemble's clock"),
            "clock {faked}: {status}"
        );
    }
}
