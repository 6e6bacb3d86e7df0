//! The chaos suite (issue "Faster recovery and proof under faults"): a real 3-server ensemble,
//! real `zkcron run` nodes behind proxies of their own, one fault per scenario, and the
//! invariants of `support::invariants` checked on what the jobs logged, what the nodes said
//! about the lock and what the ledger holds. Each scenario prints one JSON line.
//!
//! The scenarios not marked `ignore` are the short selection that `cargo test` runs; `scripts/chaos`
//! runs them all and keeps the output in docs/CHAOS.md. Every scenario holds `fault_lock`: the
//! gaps they measure must not be skewed by another scenario loading the two cores.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

mod support;

use std::time::Duration;

use support::chaos::{ChaosCluster, FaultWindow, REPLACED_WITHIN, SESSION, TAKEOVER, plant};
use support::daemon::now_ms;
use support::fault_lock;
use support::proxy::Fault;

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

const _: () = assert!(
    BEYOND_SESSION.as_millis() > SESSION.as_millis() + TAKEOVER.as_millis()
        && WITHIN_SESSION.as_millis() * 2 <= SESSION.as_millis()
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
    let _guard = fault_lock();
    let cluster = ChaosCluster::start(name, 3).await;
    cluster.run_for(BEFORE).await;
    let (owner, id) = cluster.owner_and_id().await;
    let from = cluster.partition(owner, fault);
    tokio::time::sleep(span).await;
    let to = cluster.partition(owner, Fault::None);
    cluster.run_for(AFTER).await;
    let beyond = span > SESSION;
    if !beyond {
        assert_eq!(
            cluster.owner().await,
            owner,
            "the session survived: so did the lock"
        );
    }
    let report = cluster
        .finish(Some(if beyond {
            FaultWindow::between(from, to, CATCH_UP).hitting(id)
        } else {
            FaultWindow::between(from, to, SESSION + CATCH_UP)
        }))
        .await;
    if beyond {
        report.assert_failover_within(REPLACED_WITHIN);
    } else {
        report.assert_holds();
    }
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
    let to = now_ms();
    cluster.run_for(AFTER).await;
    let report = cluster
        .finish(Some(FaultWindow::between(from, to, REPLACED_WITHIN)))
        .await;
    report.assert_holds();
    // The servers may expire the sessions themselves as they wake (each server's session
    // tracker runs on its own clock); when the session lived, firing resumes within a second of
    // the ensemble serving again (the issue's target), plus the wait for the next tick.
    if report.json["session_taken_back"] == true {
        let gap = report.resume_gap_ms.expect("resumed");
        assert!(gap <= 2000, "resumed after {gap} ms: {}", report.json);
    }
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
