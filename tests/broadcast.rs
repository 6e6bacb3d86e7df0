//! Broadcast jobs (`broadcast = true`, issue 36) on real daemons and a real ZooKeeper: every
//! live member runs each tick once, recorded per node; a node that joins runs no tick from
//! before it joined; a node killed with -9 runs nothing more, and the ticks it was still a
//! member for are recorded `missed` for it by the owner; restarted, it runs nothing twice and
//! marks the run it was killed in `interrupted`.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use support::daemon::{DaemonNode, logs_of, now_ms, schedule_text, zkcron_ok};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

/// Long enough that a killed node stays a member past a tick (every 2 s) for certain.
const SESSION: Duration = Duration::from_secs(5);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);
/// The owner's sweep looks this long after a tick's start (`SWEEP_AFTER`), plus slack.
const SWEPT: Duration = Duration::from_secs(8);

/// (tick ms, node) of each start the job wrote.
fn starts(log: &Path) -> Vec<(i64, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (ms, node) = line.split_once(' ').expect("`<ms> <node>`");
            (ms.parse().expect("ms"), node.to_owned())
        })
        .collect()
}

/// The job's records: (tick ms, node) → status.
fn records(config: &Path) -> BTreeMap<(i64, String), String> {
    records_with_times(config)
        .into_iter()
        .map(|(key, (status, _, _))| (key, status))
        .collect()
}

async fn wait_starts(
    what: &str,
    log: &Path,
    nodes: &[&DaemonNode],
    done: impl Fn(&[(i64, String)]) -> bool,
) {
    try_wait_for(what, Duration::from_secs(30), || {
        let reached = done(&starts(log));
        async move { reached.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{:?}\n{}", starts(log), logs_of(nodes)));
}

fn ran(all: &[(i64, String)], node: &str) -> Vec<i64> {
    all.iter()
        .filter(|(_, n)| n == node)
        .map(|(ms, _)| *ms)
        .collect()
}

/// The schedule of these tests, in a chroot of its own: `everywhere`, a broadcast job every
/// 2 s that logs `<tick ms> <node>` to `log` and runs 1.5 s.
fn every_two_seconds(log: &Path, test: &str) -> String {
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(test));
    // `allow`: a run started late on a busy machine may outlive the next tick, and under the
    // default `forbid` that tick would be recorded skipped; these tests are about which node
    // records what, not about overlap (tests/daemon.rs has forbid's).
    let jobs = format!(
        "[[job]]\nname = \"everywhere\"\nschedule = \"*/2 * * * * *\"\nbroadcast = true\n\
         concurrency = \"allow\"\n\
         shell = 'echo \"$ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_NODE\" >> {}; sleep 1.5'\n",
        log.display()
    );
    schedule_text(&connect, "broadcast", SESSION, DELAY, &jobs)
}

/// Three nodes named `names`, the first the owner, once each has run two ticks.
async fn three_members(dir: &Path, text: &str, log: &Path, names: [&str; 3]) -> [DaemonNode; 3] {
    let first = DaemonNode::start(dir, names[0], text);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start(dir, names[1], text);
    let third = DaemonNode::start(dir, names[2], text);
    for node in [&second, &third] {
        node.wait_log("a member since", SLACK).await;
    }
    wait_starts(
        "two ticks on each of three",
        log,
        &[&first, &second, &third],
        |all| names.iter().all(|n| ran(all, n).len() >= 2),
    )
    .await;
    [first, second, third]
}

#[tokio::test]
async fn every_live_member_runs_each_tick_once_through_a_join_a_kill_and_a_restart() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let text = every_two_seconds(&log, "broadcast");
    let [b1, mut b2, b3] = three_members(dir.path(), &text, &log, ["b1", "b2", "b3"]).await;

    // A join: the fourth runs only ticks after its member znode was made.
    let joined_at = now_ms();
    let b4 = DaemonNode::start(dir.path(), "b4", &text);
    wait_starts("two ticks on the joiner", &log, &[&b4], |all| {
        ran(all, "b4").len() >= 2
    })
    .await;

    // A kill: b2 runs nothing more; the ticks it was still a member for are recorded missed.
    b2.kill();
    let killed_at = now_ms();
    let nodes = [&b1, &b3, &b4];
    wait_starts("two ticks after the kill", &log, &nodes, |all| {
        ran(all, "b1").iter().filter(|ms| **ms > killed_at).count() >= 2
    })
    .await;
    // Restarted under the same node id: a new member, so nothing it ran before runs again.
    let restarted_at = now_ms();
    let b2 = DaemonNode::start(dir.path(), "b2", &text);
    b2.wait_log("a member since", SESSION * 2 + SLACK).await;
    wait_starts("the restarted b2 runs again", &log, &[&b2], |all| {
        ran(all, "b2").iter().any(|ms| *ms > restarted_at)
    })
    .await;
    // What the kill left open (a run 1.5 s of every 2 s), the restarted b2 marks interrupted.
    let config = b1.config.clone();
    try_wait_for("nothing of b2's old process left open", SLACK, || {
        let open: Vec<(i64, String)> = records(&config)
            .into_iter()
            .filter(|((ms, node), status)| {
                node == "b2" && *ms < restarted_at && (status == "claimed" || status == "running")
            })
            .map(|((ms, _), status)| (ms, status))
            .collect();
        async move { open.is_empty().then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}: {:?}", records(&config)));
    zkcron_ok(&["pause", "everywhere"], &b1.config);
    let paused_at = now_ms();
    let nodes = [&b1, &b2, &b3, &b4];

    // Every tick until the pause is swept (SWEEP_AFTER past its start) before it is judged.
    tokio::time::sleep(SWEPT).await;
    let all = starts(&log);
    let recorded = records(&b1.config);
    let mut seen = BTreeSet::new();
    for start in &all {
        assert!(seen.insert(start.clone()), "{start:?} ran twice: {all:?}");
        let status = recorded.get(start).map(String::as_str);
        // The run b2 was killed in is interrupted; every other ended.
        let killed = start.1 == "b2" && start.0 <= killed_at && start.0 > killed_at - 2_000;
        assert!(
            status == Some("succeeded") || (killed && status == Some("interrupted")),
            "a run is recorded for its node: {start:?} {status:?}\n{recorded:?}"
        );
    }
    assert!(
        ran(&all, "b4").iter().all(|ms| *ms > joined_at),
        "the joiner ran no backlog (joined at {joined_at}): {:?}",
        ran(&all, "b4")
    );
    let b2_runs = ran(&all, "b2");
    assert!(
        b2_runs
            .iter()
            .all(|ms| *ms <= killed_at || *ms > restarted_at),
        "nothing ran on b2 between its kill ({killed_at}) and its restart ({restarted_at}): {b2_runs:?}"
    );
    let missed_b2: Vec<i64> = recorded
        .iter()
        .filter(|((ms, node), status)| node == "b2" && *ms > killed_at && *status == "missed")
        .map(|((ms, _), _)| *ms)
        .collect();
    assert!(
        !missed_b2.is_empty(),
        "a tick while the killed b2 was still a member is recorded missed for it: {recorded:?}\n{}",
        logs_of(&nodes)
    );
    assert!(
        missed_b2.iter().all(
            |ms| *ms < killed_at + i64::try_from((SESSION + SLACK).as_millis()).expect("small")
        ),
        "missed only while its old session lived: {missed_b2:?}"
    );
    // b1 and b3 lived throughout: each of their ticks from b3's join to the pause is recorded,
    // run or missed, so `history` tells who ran each tick and who did not.
    let first_all = ran(&all, "b3").into_iter().min().expect("b3 ran");
    let ticks: BTreeSet<i64> = all
        .iter()
        .map(|(ms, _)| *ms)
        .filter(|ms| *ms >= first_all && *ms < paused_at - 2_000)
        .collect();
    for tick in &ticks {
        for node in ["b1", "b3"] {
            assert!(
                recorded.contains_key(&(*tick, node.to_owned())),
                "{node} has a record of {tick}: {recorded:?}"
            );
        }
    }
    assert!(
        ticks.len() >= 6,
        "enough ticks to mean something: {ticks:?}"
    );
    let shown = zkcron_ok(&["history", "everywhere"], &b1.config);
    assert!(shown.contains("b3") && shown.contains("missed"), "{shown}");
    let status = zkcron_ok(&["status"], &b1.config);
    assert!(
        status.contains("broadcast: every live node runs each tick"),
        "{status}"
    );
}

/// A record as this test judges it: (status, started, finished).
type Judged = (String, Option<i64>, Option<i64>);

/// The job's records: (tick ms, node) → (status, started, finished).
fn records_with_times(config: &Path) -> BTreeMap<(i64, String), Judged> {
    support::daemon::history_records("everywhere", &["--limit", "10000"], config)
        .into_iter()
        .map(|record| {
            let key = (
                record["scheduled_unix_ms"].as_i64().expect("scheduled"),
                record["node_id"].as_str().expect("node").to_owned(),
            );
            let status = record["status"].as_str().expect("status").to_owned();
            let times = (
                record["started_unix_ms"].as_i64(),
                record["finished_unix_ms"].as_i64(),
            );
            (key, (status, times.0, times.1))
        })
        .collect()
}

/// Issue 50: the owner killed with -9 in the middle of a run, then a member: every (tick, node)
/// of the window ends in one record — the killed owner's run `interrupted` by the next owner,
/// the ticks it was still a member for `missed`, as for the member — and every run's recorded
/// duration is its own (a 1.5 s sleep: not its claim ahead of its instant too).
#[tokio::test]
async fn a_killed_owners_ticks_end_recorded_like_a_members_and_durations_are_the_runs_own() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let text = every_two_seconds(&log, "broadcast-owner");
    let [mut o1, o2, o3] = three_members(dir.path(), &text, &log, ["o1", "o2", "o3"]).await;
    let all_three = [&o1, &o2, &o3];
    let first_of_all = ran(&starts(&log), "o3").into_iter().min().expect("o3 ran");

    // The owner, killed within 1.5 s of a start of its own: in the middle of that run.
    let before = ran(&starts(&log), "o1").len();
    wait_starts("a fresh start on the owner", &log, &all_three, |all| {
        ran(all, "o1").len() > before
    })
    .await;
    o1.kill();
    let owner_killed_at = now_ms();
    let killed_tick = ran(&starts(&log), "o1").into_iter().max().expect("o1 ran");
    let takeover = SESSION + DELAY + SLACK * 2;
    try_wait_for("a new owner", takeover, || {
        let taken = o2.log().contains("lock acquired") || o3.log().contains("lock acquired");
        async move { taken.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&o2, &o3])));
    let (owner, mut member, owner_id, member_id) = if o2.log().contains("lock acquired") {
        (o2, o3, "o2", "o3")
    } else {
        (o3, o2, "o3", "o2")
    };

    // Then a member; the owner runs on until the member's session is long gone.
    member.kill();
    let member_killed_at = now_ms();
    let gone_by = member_killed_at + i64::try_from((SESSION + SLACK).as_millis()).expect("ms");
    wait_starts(
        "the owner runs past the member's expiry",
        &log,
        &[&owner],
        |all| ran(all, owner_id).iter().any(|ms| *ms > gone_by),
    )
    .await;
    zkcron_ok(&["pause", "everywhere"], &owner.config);
    let paused_at = now_ms();
    tokio::time::sleep(SWEPT).await;

    let all = starts(&log);
    let recorded = records_with_times(&owner.config);
    let status_of = |tick: i64, node: &str| {
        recorded
            .get(&(tick, node.to_owned()))
            .map(|(status, _, _)| status.as_str())
    };
    let nodes = [&owner];
    assert_eq!(
        status_of(killed_tick, "o1"),
        Some("interrupted"),
        "the run the owner was killed in is ended by the next owner: {recorded:?}\n{}",
        logs_of(&nodes)
    );
    // Every tick of the window: one record for each node that was a member at its instant.
    // A killed node is a member until its session expires (SESSION after the kill): certainly
    // for the ticks up to a second before that.
    let member_until =
        |killed_at: i64| killed_at + i64::try_from(SESSION.as_millis()).expect("ms") - 1_000;
    let ticks: BTreeSet<i64> = all
        .iter()
        .map(|(ms, _)| *ms)
        .filter(|ms| *ms >= first_of_all && *ms < paused_at - 2_000)
        .collect();
    for tick in &ticks {
        let owed = [
            ("o1", *tick <= member_until(owner_killed_at)),
            (member_id, *tick <= member_until(member_killed_at)),
            (owner_id, true),
        ];
        for (node, _) in owed.into_iter().filter(|(_, owed)| *owed) {
            let status = status_of(*tick, node);
            assert!(
                matches!(status, Some("succeeded" | "missed" | "interrupted")),
                "{node}'s tick {tick} ends in one record, got {status:?}: {recorded:?}\n{}",
                logs_of(&nodes)
            );
        }
    }
    let missed_owner: Vec<i64> = recorded
        .iter()
        .filter(|((ms, node), (status, _, _))| {
            node == "o1" && *ms > owner_killed_at && status == "missed"
        })
        .map(|((ms, _), _)| *ms)
        .collect();
    assert!(
        !missed_owner.is_empty(),
        "a tick while the killed owner was still a member is recorded missed for it: {recorded:?}"
    );
    let open: Vec<&(i64, String)> = recorded
        .iter()
        .filter(|(_, (status, _, _))| status == "claimed" || status == "running")
        .filter(|((ms, _), _)| *ms < paused_at - 2_000)
        .map(|(key, _)| key)
        .collect();
    assert!(open.is_empty(), "no run is left open: {open:?}");
    // Each run recorded succeeded took its own 1.5 s: it started at its instant (its start is
    // decided a few ms ahead), not at its claim ~250 ms ahead of it, and ended once its
    // `sleep 1.5` had (a busy machine's fork and exit add up to half a second).
    for (key, (status, started, finished)) in &recorded {
        if status != "succeeded" {
            continue;
        }
        assert!(
            started.is_some_and(|ms| ms >= key.0 - 50),
            "{key:?} started at its instant or after, by its record: {started:?}"
        );
        let took = finished.zip(*started).map(|(end, start)| end - start);
        assert!(
            took.is_some_and(|ms| (1_450..=2_000).contains(&ms)),
            "{key:?} took {took:?} ms by its record"
        );
    }
    assert!(
        ticks.len() >= 8,
        "enough ticks to mean something: {ticks:?}"
    );
}
