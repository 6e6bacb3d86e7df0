//! The soak (issue 53): faults drawn at random from the whole chaos suite, one after another,
//! for an hour — Jepsen's nemeses on a real ensemble — while the ticks fire and delayed
//! submissions fall due; every invariant is checked once, at the end, over the whole run.
//!
//! Not in CI (an hour): `scripts/soak` runs it for the release checklist. `ZKCRON_SOAK_MINUTES`
//! sets its length (60), `ZKCRON_CHAOS_SEED` repeats a run's draws (its seed is in the JSON
//! line, with every fault it drew).

use std::time::Duration;

use super::clock::{Draw, STEPS_MS};
use super::disk::{fill_disk_for, slow_every_disk};
use super::ledger_limits::{LOCK_ROOT, set_count_quota};
use super::network::Hit;
use super::support::chaos::{ChaosCluster, FaultWindow, REPLACED_WITHIN, Submitted};
use super::support::fault_lock;
use super::support::netem::Loss;
use super::support::proxy::{Direction, Fault};
use super::support::zk_cluster::ServerOptions;
use super::{BEYOND_SESSION, CATCH_UP, WITHIN_SESSION, now_ms};

/// The servers' disks can be slowed and filled, and quotas are enforced.
const SERVERS: ServerOptions = ServerOptions {
    disk_faults: true,
    jute_maxbuffer: None,
    enforce_quota: true,
};

/// Between two faults: the fleet back to firing on time, and a few ticks of it.
const QUIET: Duration = Duration::from_secs(10);
/// How long a fault that the draw holds for a while lasts.
const HOLDS: [Duration; 3] = [WITHIN_SESSION, BEYOND_SESSION, Duration::from_secs(15)];
/// Submissions made every few faults, due over the next half minute.
const SUBMITTED_EACH_TIME: usize = 60;
const SUBMISSION_SPACING_MS: i64 = 500;

/// One of the faults the soak draws.
#[derive(Debug, Clone, Copy)]
enum Nemesis {
    /// SIGKILL of the owner; it comes back after the takeover.
    KillOwner,
    /// SIGSTOP of the owner, held; SIGCONT.
    FreezeOwner,
    /// SIGTERM of the owner (a graceful handover); it comes back.
    StopOwner,
    /// A node's connections to every server cut, muted one way or stalled, or slowed.
    Network(Hit, Fault),
    /// 20 % of the packets to a node, or every node, dropped (`iptables`, root only).
    PacketLoss(Hit),
    /// Every server's fsync takes 2 s.
    SlowFsync,
    /// The ZooKeeper leader's disk full; freed, the server restarted.
    FullDiskOnTheLeader,
    /// One server killed and started again.
    RestartServer,
    /// The node on a faked clock stepped off the servers', within or beyond
    /// `lock.max_clock_offset`; set right again.
    ClockStep,
    /// A quota of one znode on the lock root: every create under it refused; raised.
    Quota,
}

/// Every fault the soak draws from, as often as it appears here.
const NEMESES: [Nemesis; 15] = [
    Nemesis::KillOwner,
    Nemesis::FreezeOwner,
    Nemesis::StopOwner,
    Nemesis::Network(Hit::Owner, Fault::Blackhole),
    Nemesis::Network(Hit::Owner, Fault::MuteRequests),
    Nemesis::Network(Hit::Owner, Fault::Stall(Direction::Replies)),
    Nemesis::Network(Hit::Member, Fault::Cut),
    Nemesis::Network(Hit::Every, Fault::Delay { ms: 400 }),
    Nemesis::PacketLoss(Hit::Owner),
    Nemesis::PacketLoss(Hit::Every),
    Nemesis::SlowFsync,
    Nemesis::FullDiskOnTheLeader,
    Nemesis::RestartServer,
    Nemesis::ClockStep,
    Nemesis::Quota,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "an hour: scripts/soak"]
async fn soak_of_random_faults() {
    let _guard = fault_lock();
    let minutes: u64 = std::env::var("ZKCRON_SOAK_MINUTES")
        .ok()
        .and_then(|minutes| minutes.parse().ok())
        .unwrap_or(60);
    let seed = std::env::var("ZKCRON_CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| u64::try_from(now_ms()).unwrap_or(1) | 1);
    let name = format!("soak of random faults, {minutes} min");
    let mut cluster = ChaosCluster::start_keeping_history(&name, 3, SERVERS).await;
    let (faked, _) = cluster.add_node_with_clock(Some(0)).await;
    let mut draw = Draw(seed);
    let ends_ms = now_ms() + i64::try_from(minutes * 60_000).unwrap_or(i64::MAX);
    let mut windows = Vec::new();
    let mut drawn = Vec::new();
    let mut submitted = Submitted {
        ids: Vec::new(),
        last_due_ms: 0,
    };
    let mut turn = 0_usize;
    let started = now_ms();
    while now_ms() < ends_ms {
        if turn % 3 == 0 {
            let first_due = now_ms() + 2_000;
            let batch = cluster
                .submit_named(
                    &format!("t{turn}-"),
                    SUBMITTED_EACH_TIME,
                    first_due,
                    SUBMISSION_SPACING_MS,
                )
                .await;
            submitted.ids.extend(batch.ids);
            submitted.last_due_ms = batch.last_due_ms;
        }
        let nemesis = NEMESES[pick(&mut draw, NEMESES.len())];
        let hold = HOLDS[pick(&mut draw, HOLDS.len())];
        let (from, to, said) = inflict(&mut cluster, nemesis, hold, faked, &mut draw).await;
        windows.push(FaultWindow::between(from, to, REPLACED_WITHIN + CATCH_UP));
        drawn.push(serde_json::json!({
            "at_s": (from - started) / 1000,
            "fault": said,
            "held_ms": to - from,
        }));
        cluster.run_for(QUIET).await;
        turn += 1;
    }
    cluster.note("seed", serde_json::json!(seed));
    cluster.note("faults", serde_json::json!(drawn.len()));
    cluster.note("drawn", serde_json::json!(drawn));
    // Told, not panicked on, until the ticks are checked too: an hour's run says all it found.
    let submissions = cluster
        .check_each_submission_ran_once(&submitted, REPLACED_WITHIN + CATCH_UP)
        .await;
    if let Err(problem) = &submissions {
        eprintln!("the submissions' check failed: {problem}");
        cluster.note("submissions_problem", serde_json::json!(problem));
    }
    cluster.finish_windows(windows).await.assert_holds();
    if let Err(problem) = submissions {
        panic!("{problem}");
    }
}

fn pick(draw: &mut Draw, below: usize) -> usize {
    usize::try_from(draw.next(u64::try_from(below).unwrap_or(1))).unwrap_or_default()
}

/// Inflicts `nemesis` for `hold` and heals it: when it began, when it ended, and what it was.
async fn inflict(
    cluster: &mut ChaosCluster,
    nemesis: Nemesis,
    hold: Duration,
    faked: usize,
    draw: &mut Draw,
) -> (i64, i64, String) {
    // Every fault before it healed, and the quiet after it: the lock is owned again by now,
    // or the soak has found a stall.
    cluster
        .wait_owned("an owner before the next fault", REPLACED_WITHIN * 2)
        .await;
    let owner = cluster.owner().await;
    match nemesis {
        Nemesis::KillOwner => {
            let from = cluster.kill(owner);
            // Back once another node took over: a restart before then would reclaim the lock.
            tokio::time::sleep(REPLACED_WITHIN).await;
            let to = cluster.restart(owner);
            (from, to, format!("kill -9 of the owner n{owner}"))
        }
        Nemesis::FreezeOwner => {
            let from = cluster.freeze(owner);
            tokio::time::sleep(hold).await;
            let to = cluster.thaw(owner);
            (from, to, format!("SIGSTOP of the owner n{owner}"))
        }
        Nemesis::StopOwner => {
            let from = cluster.stop(owner).await;
            tokio::time::sleep(hold).await;
            let to = cluster.restart(owner);
            (
                from,
                to,
                format!("SIGTERM of the owner n{owner}, restarted"),
            )
        }
        Nemesis::Network(hit, fault) => {
            let nodes = hit.nodes(cluster, owner);
            let from = now_ms();
            for node in &nodes {
                cluster.partition(*node, fault);
            }
            tokio::time::sleep(hold).await;
            for node in &nodes {
                cluster.partition(*node, Fault::None);
            }
            (from, now_ms(), format!("{fault:?} to {hit:?} {nodes:?}"))
        }
        Nemesis::PacketLoss(hit) => {
            let nodes = hit.nodes(cluster, owner);
            let ports: Vec<u16> = nodes
                .iter()
                .flat_map(|node| cluster.proxy_ports(*node))
                .collect();
            let from = now_ms();
            match Loss::on_ports(&ports, 20) {
                Ok(loss) => {
                    tokio::time::sleep(hold).await;
                    drop(loss);
                    (
                        from,
                        now_ms(),
                        format!("20 % packet loss to {hit:?} {nodes:?}"),
                    )
                }
                Err(why) => (from, now_ms(), format!("no packet loss here: {why}")),
            }
        }
        Nemesis::SlowFsync => {
            let from = now_ms();
            slow_every_disk(cluster, 2_000);
            tokio::time::sleep(hold).await;
            slow_every_disk(cluster, 0);
            (
                from,
                now_ms(),
                "fsync slowed to 2 s on every server".to_owned(),
            )
        }
        Nemesis::FullDiskOnTheLeader => {
            let leader = cluster.ensemble.leader().await.expect("one leader");
            let (from, _, _) = fill_disk_for(cluster, leader, hold).await;
            (
                from,
                now_ms(),
                format!("a full disk on the leader z{leader}"),
            )
        }
        Nemesis::RestartServer => {
            let server = pick(draw, cluster.ensemble.len());
            let from = now_ms();
            cluster.ensemble.kill(server).expect("kill the server");
            tokio::time::sleep(hold).await;
            cluster
                .ensemble
                .restart(server)
                .await
                .expect("start the server again");
            (
                from,
                now_ms(),
                format!("server z{server} killed and restarted"),
            )
        }
        Nemesis::ClockStep => {
            let step = STEPS_MS[pick(draw, STEPS_MS.len())];
            let from = cluster.set_clock(faked, step);
            tokio::time::sleep(hold).await;
            let to = cluster.set_clock(faked, 0);
            (from, to, format!("n{faked}'s clock stepped {step} ms"))
        }
        Nemesis::Quota => {
            let from = now_ms();
            set_count_quota(cluster, LOCK_ROOT, 1).await;
            tokio::time::sleep(hold).await;
            set_count_quota(cluster, LOCK_ROOT, -1).await;
            (
                from,
                now_ms(),
                "a quota of one znode on the lock root".to_owned(),
            )
        }
    }
}
