//! The chaos suite (issue "Faster recovery and proof under faults"): a real 3-server ensemble,
//! real `zkcron run` nodes behind proxies of their own, one fault per scenario, and the
//! invariants of `support::invariants` checked on what the jobs logged, what the nodes said
//! about the lock and what the ledger holds. Each scenario prints one JSON line.
//!
//! The scenarios not marked `ignore` are the short selection that `cargo test` runs; `scripts/chaos`
//! runs them all, one at a time, and keeps the output in docs/CHAOS.md. Every scenario holds a
//! fault slot (`fault_lock`: three fault tests at a time beside the other tests of `cargo test`,
//! one under scripts/chaos, where the gaps they measure are not skewed by another loading the two
//! cores).
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

#[path = "chaos/clock.rs"]
mod clock;
#[path = "chaos/disk.rs"]
mod disk;
#[path = "chaos/ledger_limits.rs"]
mod ledger_limits;
#[path = "chaos/network.rs"]
mod network;
#[path = "chaos/postgres.rs"]
mod postgres;
#[path = "chaos/soak.rs"]
mod soak;

use std::time::Duration;

use support::chaos::{
    ChaosCluster, FaultWindow, Owners, REPLACED_WITHIN, SESSION, SETTLE, SPACING, TAKEOVER, moves,
    plant,
};
use support::daemon::now_ms;
use support::proxy::Fault;
use support::{fault_lock, heavy_fault_lock};

/// Before the fault: a few ticks of both jobs in steady state.
const BEFORE: Duration = Duration::from_secs(3);
/// After recovery: long enough for on-time firing to show again, and for a tick of the 10 s job.
const AFTER: Duration = Duration::from_secs(6);
/// Longer than the session timeout and the takeover delay together: peers take over meanwhile.
const BEYOND_SESSION: Duration = Duration::from_millis(4000 + 3000 + 2000);
/// Well inside the session timeout: the session survives.
const WITHIN_SESSION: Duration = Duration::from_secs(2);
/// After a fault that ends, the catch-up of the ticks it hid.
const CATCH_UP: Duration = Duration::from_secs(2);
/// A fleet's groups all owned again after a membership change: a dead owner's session expires,
/// the takeover delay passes (with a server's tick, the CLI's jitter and a loaded machine's second: that is
/// [`REPLACED_WITHIN`]), and at worst a survivor that is not a group's preferred owner takes it
/// once membership has settled.
const OWNED_WITHIN: Duration = Duration::from_millis(4000 + 200 + 3000 + 300 + 1000 + 2000);
/// Then balanced: up to four moves by one node, spaced apart.
const BALANCED_WITHIN: Duration =
    Duration::from_millis(4000 + 200 + 3000 + 300 + 1000 + 2000 + 4000);

const _: () = assert!(
    BEYOND_SESSION.as_millis() > SESSION.as_millis() + TAKEOVER.as_millis()
        && WITHIN_SESSION.as_millis() * 2 <= SESSION.as_millis()
        && OWNED_WITHIN.as_millis() == REPLACED_WITHIN.as_millis() + SETTLE.as_millis()
        && BALANCED_WITHIN.as_millis() == OWNED_WITHIN.as_millis() + 4 * SPACING.as_millis()
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn steady() {
    let _guard = fault_lock();
    let cluster = ChaosCluster::start("steady", 3).await;
    cluster.run_for(Duration::from_secs(20)).await;
    let report = cluster.finish(None).await;
    report.assert_holds();
    let max_gap = report.json["max_gap_ms"].as_i64().expect("fired");
    assert!(
        max_gap < 1500,
        "a second's job skipped a beat: {}",
        report.json
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn graceful_stop_of_the_owner() {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start("graceful stop of the owner", 3).await;
    cluster.run_for(BEFORE).await;
    let (owner, id) = cluster.owner_and_id().await;
    let from = cluster.stop(owner).await;
    cluster
        .wait_fast_start(from, Some(&id), Duration::from_secs(3))
        .await;
    cluster.run_for(AFTER).await;
    // No settle: a planned handoff loses no tick after the one in flight.
    let report = cluster
        .finish(Some(
            FaultWindow::between(from, from, Duration::ZERO).hitting(id),
        ))
        .await;
    // The next tick after a handoff of at most a second (DESIGN.md promise 2).
    report.assert_failover_within(Duration::from_secs(2));
}

/// Issue 31: delayed submissions for this scenario, due one every [`SUB_SPACING_MS`].
const SUBMISSIONS: usize = 3000;
/// 100 a second.
const SUB_SPACING_MS: i64 = 10;
/// A stopping owner hands the lock over within this (DESIGN.md promise 2).
const RELEASED_WITHIN_MS: i64 = 1000;
/// Its jobs' default `kill_grace`: a stopping node is gone within it (the jobs here trap TERM
/// and end at once), with a second for the loaded machine.
const EXITED_WITHIN: Duration = Duration::from_secs(10 + 1);

/// Issue 31: SIGTERM of the owner while delayed submissions fall due at 100 a second and the
/// per-second ticks run. The stopping owner withdrew its claims ahead and then hung holding the
/// lock (two runs in three), so the scenario stops an owner twice: at a third of the flow, and,
/// with the first node back, the next owner at two thirds. Each stop releases the lock within a
/// second and exits within the jobs' kill grace; every submission runs once and none stays
/// pending; no tick is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_of_the_owner_under_delayed_load() {
    let _guard = heavy_fault_lock();
    let mut cluster =
        ChaosCluster::start_with_submissions("graceful stop of the owner under delayed load", 3)
            .await;
    // Room to write them all before the first is due: about 2 s alone, more than 4 s once
    // in CI beside the side job's build.
    let first_due = now_ms() + 8_000;
    let submitted = cluster.submit(SUBMISSIONS, first_due, SUB_SPACING_MS).await;
    assert!(
        now_ms() < first_due,
        "all submitted before the first is due"
    );
    let span = i64::try_from(SUBMISSIONS).expect("small") * SUB_SPACING_MS;
    let mut windows = Vec::new();
    let mut stops = Vec::new();
    for third in [1, 2] {
        let at = first_due + span * third / 3;
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(at - now_ms()).unwrap_or(0),
        ))
        .await;
        let (owner, id) = cluster.owner_and_id().await;
        let from = cluster.terminate(owner);
        let released = cluster
            .wait_logged(
                owner,
                "lock released for a graceful handoff",
                from,
                Duration::from_secs(10),
            )
            .await;
        let exited = cluster.wait_stopped(owner, EXITED_WITHIN).await;
        stops.push(serde_json::json!({"released_ms": released - from, "exited_ms": exited - from}));
        assert!(
            released - from <= RELEASED_WITHIN_MS,
            "stop {third}: the lock was released {} ms after SIGTERM; the owner's log since:\n{}",
            released - from,
            cluster.log_since(owner, from, 200)
        );
        cluster
            .wait_fast_start(from, Some(&id), Duration::from_secs(3))
            .await;
        // The handover's own ticks: a stopped owner is replaced within a second (promise 2).
        let handover = Duration::from_millis(RELEASED_WITHIN_MS.unsigned_abs());
        windows.push(FaultWindow::between(from, from, handover).hitting(id));
        cluster.restart(owner);
    }
    cluster
        .assert_each_submission_ran_once(&submitted, Duration::from_secs(15))
        .await;
    cluster.note("stops", serde_json::json!(stops));
    let report = cluster.finish_windows(windows).await;
    // Released within a second, then the next tick; beside the pool, a loaded machine's second
    // more (CI: 2139 ms once).
    let failover = if support::fault_tests_alone() { 2 } else { 3 };
    report.assert_failover_within(Duration::from_secs(failover));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_of_the_owner() {
    kill_of_the_owner_among("kill -9 of the owner", 3).await;
}

/// The owner of `nodes` killed for good: another takes over within [`REPLACED_WITHIN`].
async fn kill_of_the_owner_among(name: &str, nodes: usize) {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start(name, nodes).await;
    cluster.run_for(BEFORE).await;
    let (owner, id) = cluster.owner_and_id().await;
    let from = cluster.kill(owner);
    cluster
        .wait_fast_start(from, Some(&id), REPLACED_WITHIN + CATCH_UP)
        .await;
    cluster.run_for(AFTER).await;
    let report = cluster
        .finish(Some(
            FaultWindow::between(from, from, REPLACED_WITHIN).hitting(id),
        ))
        .await;
    report.assert_failover_within(REPLACED_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn kill_and_restart_of_the_owner_within_the_session() {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start("kill -9 and restart within the session", 3).await;
    cluster.run_for(BEFORE).await;
    let owner = cluster.owner().await;
    let from = cluster.kill(owner);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let to = cluster.restart(owner);
    cluster
        .wait_fast_start(to, None, REPLACED_WITHIN + CATCH_UP)
        .await;
    cluster.run_for(AFTER).await;
    // Its old lock node names it: the restarted node reclaims at once when it goes, its peers
    // wait the takeover delay.
    assert_eq!(cluster.owner().await, owner, "the restarted node reclaims");
    let report = cluster
        .finish(Some(FaultWindow::between(from, to, SESSION + CATCH_UP)))
        .await;
    report.assert_holds();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_of_the_owner_beyond_the_session() {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start("SIGSTOP of the owner beyond the session", 3).await;
    cluster.run_for(BEFORE).await;
    let (owner, id) = cluster.owner_and_id().await;
    let from = cluster.freeze(owner);
    tokio::time::sleep(BEYOND_SESSION).await;
    let to = cluster.thaw(owner);
    cluster.run_for(AFTER).await;
    let report = cluster
        .finish(Some(FaultWindow::between(from, to, CATCH_UP).hitting(id)))
        .await;
    report.assert_failover_within(REPLACED_WITHIN);
}

/// The owner cut off from every server for `span`: its peers take over when its session
/// expires (beyond), or it keeps the lock (within).
async fn partition_of_the_owner(name: &str, fault: Fault, span: Duration) {
    network::network_fault(name, network::Hit::Owner, fault, span, span > SESSION).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn partition_of_the_owner_cut_beyond_the_session() {
    partition_of_the_owner(
        "partition (cut) beyond the session",
        Fault::Cut,
        BEYOND_SESSION,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_of_the_owner_blackholed_beyond_the_session() {
    partition_of_the_owner(
        "partition (blackhole) beyond the session",
        Fault::Blackhole,
        BEYOND_SESSION,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn partition_of_the_owner_cut_within_the_session() {
    partition_of_the_owner(
        "partition (cut) within the session",
        Fault::Cut,
        WITHIN_SESSION,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn partition_of_the_owner_blackholed_within_the_session() {
    partition_of_the_owner(
        "partition (blackhole) within the session",
        Fault::Blackhole,
        WITHIN_SESSION,
    )
    .await;
}

/// The servers hear the owner but it hears nothing back: the claims it sends are applied, their
/// replies lost. Each must be read back as claimed (and run, or recorded too late with its
/// guard released), not left `claimed` with a guard that refuses the job's later ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_of_the_owner_muted_within_the_session() {
    partition_of_the_owner(
        "partition (replies muted) within the session",
        Fault::MuteReplies,
        WITHIN_SESSION,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn kill_of_the_zookeeper_leader() {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start("kill of the ZooKeeper leader", 3).await;
    cluster.run_for(BEFORE).await;
    let leader = cluster.ensemble.leader().await.expect("one leader");
    let from = now_ms();
    cluster.ensemble.kill(leader).expect("kill the leader");
    cluster
        .ensemble
        .wait_serving(Duration::from_secs(30))
        .await
        .expect("the other two elect a leader");
    let elected = now_ms();
    cluster.run_for(AFTER).await;
    cluster
        .ensemble
        .restart(leader)
        .await
        .expect("restart the old leader");
    let report = cluster
        .finish(Some(FaultWindow::between(
            from,
            elected,
            SESSION + CATCH_UP,
        )))
        .await;
    report.assert_holds();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_of_every_server_beyond_the_session() {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start("pause of every server beyond the session", 3).await;
    cluster.run_for(BEFORE).await;
    let from = now_ms();
    for server in 0..cluster.ensemble.len() {
        cluster.ensemble.pause(server).expect("pause a server");
    }
    tokio::time::sleep(2 * SESSION).await;
    for server in 0..cluster.ensemble.len() {
        cluster.ensemble.resume(server).expect("resume a server");
    }
    cluster
        .ensemble
        .wait_serving(Duration::from_secs(30))
        .await
        .expect("the ensemble serves again");
    cluster.wait_sessions_accepted().await;
    let to = now_ms();
    // Awaited, not assumed within AFTER: when the servers expired the sessions, the nodes open
    // new ones and wait the takeover delay, and a crowded machine once took 4.4 s to reconnect.
    // Counted from when every server takes sessions again: CI once saw none taken for 10 s
    // after `srvr` answered.
    cluster
        .wait_fast_start(to, None, REPLACED_WITHIN + CATCH_UP)
        .await;
    cluster.run_for(AFTER).await;
    let report = cluster
        .finish(Some(FaultWindow::between(from, to, REPLACED_WITHIN)))
        .await;
    report.assert_holds();
    // The servers may expire the sessions themselves as they wake (each server's session
    // tracker runs on its own clock); when the session lived, firing resumes within a second of
    // the ensemble serving again (the issue's target), plus the wait for the next tick. That is
    // a measure of the scenario alone (scripts/chaos); beside the other tests of a `cargo test`
    // run, whose pool once made it 2.9 s, the promise is only that firing resumes while the
    // session still lives.
    if report.json["session_taken_back"] == true {
        let gap = report.resume_gap_ms.expect("resumed");
        let bound = if support::fault_tests_alone() {
            2000
        } else {
            i64::try_from(SESSION.as_millis()).expect("a session in ms")
        };
        assert!(gap <= bound, "resumed after {gap} ms: {}", report.json);
    }
}

/// Issue 31, defect 3: two of the three servers die (the quorum is lost, as when their shared
/// disk fills) for longer than the session timeout while ticks and submissions are claimed and
/// launched, then start again with the sessions they had; twice (the defect showed one run in
/// three). Back, the owner takes its session back: no tick may be skipped for a guard of its own
/// that outlived a claim that never started, every tick is run or recorded, and every
/// submission runs once — none recorded failed without running, none left pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_lost_beyond_the_session_while_claims_are_in_flight() {
    const OUTAGES: usize = 2;
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start_with_submissions(
        "quorum lost beyond the session while claims are in flight",
        2,
    )
    .await;
    // 20 a second over the whole scenario: the outages and the settling after each.
    let spacing_ms = 50;
    let count = 900;
    let first_due = now_ms() + 3_000;
    let submitted = cluster.submit(count, first_due, spacing_ms).await;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(first_due + 2_000 - now_ms()).unwrap_or(0),
    ))
    .await;
    let mut windows = Vec::new();
    for _ in 0..OUTAGES {
        let from = now_ms();
        cluster.ensemble.kill(1).expect("kill a server");
        cluster.ensemble.kill(2).expect("kill a server");
        tokio::time::sleep(2 * SESSION).await;
        cluster.ensemble.restart(1).await.expect("restart a server");
        cluster.ensemble.restart(2).await.expect("restart a server");
        cluster
            .ensemble
            .wait_serving(Duration::from_secs(30))
            .await
            .expect("the ensemble serves again");
        let to = now_ms();
        windows.push(FaultWindow::between(from, to, REPLACED_WITHIN));
        cluster.run_for(AFTER).await;
    }
    cluster
        .assert_each_submission_ran_once(&submitted, REPLACED_WITHIN + CATCH_UP)
        .await;
    let report = cluster.finish_windows(windows).await;
    report.assert_holds();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn restart_of_the_whole_ensemble() {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start("restart of the whole ensemble", 3).await;
    cluster.run_for(BEFORE).await;
    let from = now_ms();
    cluster
        .ensemble
        .restart_all()
        .await
        .expect("restart every server");
    let to = now_ms();
    cluster.run_for(AFTER + SESSION).await;
    let report = cluster
        .finish(Some(FaultWindow::between(from, to, REPLACED_WITHIN)))
        .await;
    report.assert_holds();
}

/// Garbage where zkcron reads: under `runs/` (a foreign name, a record that is not JSON, one on a
/// tick still to come) and in the lock node itself while it is owned. Nothing may crash; the
/// tick a foreign record occupies does not fire; a graceful stop still hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_lock_node_and_under_runs() {
    let _guard = fault_lock();
    let mut cluster =
        ChaosCluster::start_with("garbage in the lock node and runs/", 3, |zk| async move {
            plant(&zk, "runs/fast/not-a-tick", b"\x00\xffgarbage").await;
            plant(&zk, "runs/long/12", b"{\"status\":").await;
        })
        .await;
    cluster.run_for(BEFORE).await;
    let occupied = (now_ms() / 1000 + 3) * 1000;
    cluster
        .plant(&format!("runs/fast/{occupied}"), b"\xffnot a record")
        .await;
    let (owner, id) = cluster.owner_and_id().await;
    let from = now_ms();
    cluster.plant("lock", b"\x00garbage in the lock node").await;
    cluster.run_for(BEFORE).await;
    let stopped = cluster.stop(owner).await;
    cluster
        .wait_fast_start(stopped, Some(&id), REPLACED_WITHIN + CATCH_UP)
        .await;
    cluster.run_for(AFTER).await;
    // The window spans the garbage: the occupied tick is accounted for by its foreign record.
    let report = cluster
        .finish(Some(FaultWindow::between(from, stopped, REPLACED_WITHIN)))
        .await;
    report.assert_holds();
    // The garbage record named `12` is no tick of ours: no gap since 1970 is recorded.
    let missed = report.json["missed"].as_u64().expect("missed");
    assert!(missed < 100, "{}", report.json);
}

/// A persistent node squatting the lock path (an operator's mistake, a stray tool): no node can
/// own the lock, each says why, and firing resumes once it is deleted. The squatter is made
/// while every node is cut off long enough for the owner's session, and its lock node, to go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn a_persistent_node_squatting_the_lock_path() {
    let _guard = fault_lock();
    let cluster = ChaosCluster::start("a persistent node squatting the lock path", 3).await;
    cluster.run_for(BEFORE).await;
    let from = now_ms();
    for node in 0..cluster.len() {
        cluster.partition(node, Fault::Cut);
    }
    cluster.wait_gone("lock", 2 * SESSION).await;
    cluster
        .plant("lock", br#"{"node_id":"squatter","ip":"10.9.9.9"}"#)
        .await;
    for node in 0..cluster.len() {
        cluster.partition(node, Fault::None);
    }
    let squatted = now_ms();
    cluster.run_for(AFTER).await;
    assert_eq!(
        cluster.fast_starts_after(squatted),
        0,
        "nobody fires under a squatter"
    );
    cluster.remove("lock").await;
    let to = now_ms();
    cluster
        .wait_fast_start(to, None, REPLACED_WITHIN + CATCH_UP)
        .await;
    cluster.run_for(AFTER).await;
    let report = cluster
        .finish(Some(FaultWindow::between(from, to, REPLACED_WITHIN)))
        .await;
    report.assert_holds();
}

/// 20 nodes, the owner killed: one of 19 takes over, within the same bound as with 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn twenty_nodes_kill_of_the_owner() {
    kill_of_the_owner_among("20 nodes, kill -9 of the owner", 20).await;
}

/// Issue 19's fleet: 12 groups (the default and 11 named, each a lock of its own) on 3 nodes.
/// A 4th node joins, one is killed with SIGKILL for a while, it comes back: after each step every
/// group is owned within [`OWNED_WITHIN`] and then balanced, at most ⌈G/N⌉ a live node, and the
/// moves are about G/N. Every invariant is checked per group, through the moves: each group has
/// a 1 s job and every fourth the 10 s `forbid` job that runs 6 s, so that moves fall inside its
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn twelve_groups_through_a_join_a_kill_and_a_restart() {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start_groups(
        "12 groups: 3 nodes, a join, a kill -9, a restart",
        3,
        11,
        BALANCED_WITHIN,
    )
    .await;
    let three = cluster.group_owners().await;
    cluster.run_for(BEFORE).await;

    let (joined, from) = cluster.add_node().await;
    let join = membership_changed(&cluster, "the join", from).await;
    cluster.run_for(BEFORE).await;

    // Another node than the one that joined: the victim had its groups for a while.
    let victim_id = join.balanced["g01"]
        .clone()
        .filter(|owner| *owner != cluster.id(joined))
        .unwrap_or_else(|| cluster.id(0));
    let victim = (0..cluster.len())
        .find(|node| cluster.id(*node) == victim_id)
        .expect("the victim is a node");
    let from = cluster.kill(victim);
    let kill = membership_changed(&cluster, "the kill", from).await;
    cluster.run_for(BEFORE).await;

    let from = cluster.restart(victim);
    let restart = membership_changed(&cluster, "the restart", from).await;
    cluster.run_for(AFTER).await;

    let on_join = moves(&three, &join.balanced, None);
    let on_kill = moves(&join.balanced, &kill.balanced, Some(&victim_id));
    let on_restart = moves(&kill.balanced, &restart.balanced, None);
    let (four, survivors, again) = (&join.balanced, &kill.balanced, &restart.balanced);
    cluster.note("groups", four.len().into());
    cluster.note("moves_on_join", on_join.into());
    cluster.note("moves_on_kill", on_kill.into());
    cluster.note("moves_on_restart", on_restart.into());
    cluster.note("failover_ms", kill.owned_after_ms.into());
    let balanced_after = |step: &Step| step.window.to_ms - step.window.from_ms;
    cluster.note(
        "balanced_after_ms",
        serde_json::json!({
            "join": balanced_after(&join),
            "kill": balanced_after(&kill),
            "restart": balanced_after(&restart),
        }),
    );
    let windows = [&join, &kill, &restart].map(|step| step.window.clone());
    let report = cluster.finish_windows(Vec::from(windows)).await;
    report.assert_holds();
    // G/N = 3 for a join and for the restart (the new node takes one from each node that held
    // 4); one more where a move lands on a node that then holds a group beyond its preference.
    assert!(
        on_join <= 4,
        "a join moved {on_join} groups: {three:?} → {four:?}"
    );
    assert!(
        on_restart <= 4,
        "a restart moved {on_restart} groups: {survivors:?} → {again:?}"
    );
    // The survivors hold 3 groups each under a cap of 4 (⌈12/3⌉), so the dead node's 3 fit
    // without moving any of theirs: a crashed owner's groups go to their preferred survivors
    // first. A live group moves only when a survivor that is not an orphan's preferred owner
    // took it (its grace ran out first on a loaded machine) and is then over the cap — at most
    // one live group for each of the dead node's 3, where a reshuffle would move 6 of 9.
    assert!(
        on_kill <= 3,
        "a kill moved {on_kill} live nodes' groups: {four:?} → {survivors:?}"
    );
}

/// What a membership change of the fleet came to.
struct Step {
    /// From the change until every group was owned by a live node.
    owned_after_ms: i64,
    /// Who owned each group once balanced.
    balanced: Owners,
    /// From the change to the balance, with the catch-up after it.
    window: FaultWindow,
}

/// After a membership change at `from_ms`: every group owned by a live node within
/// [`OWNED_WITHIN`], then balanced within [`BALANCED_WITHIN`].
async fn membership_changed(cluster: &ChaosCluster, change: &str, from_ms: i64) -> Step {
    cluster
        .wait_owned(&format!("every group owned after {change}"), OWNED_WITHIN)
        .await;
    let owned_after_ms = now_ms() - from_ms;
    let balanced = cluster
        .wait_balanced(
            &format!("the groups balanced after {change}"),
            BALANCED_WITHIN,
        )
        .await;
    Step {
        owned_after_ms,
        balanced,
        window: FaultWindow::between(from_ms, now_ms(), CATCH_UP),
    }
}
