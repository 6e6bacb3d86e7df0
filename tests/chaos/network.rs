//! The chaos suite's network faults (issue 53), beyond the partitions of the owner: latency,
//! one direction stalled or dropped, and packet loss — to the owner, to a member, to every
//! node. The in-tree proxy (`support::proxy`) injects all but the loss, which `iptables` does
//! where the tests run as root.

use std::time::Duration;

use super::support::chaos::{ChaosCluster, FaultWindow, REPLACED_WITHIN, SESSION};
use super::support::fault_lock;
use super::support::netem::Loss;
use super::support::proxy::{Direction, Fault};
use super::{AFTER, BEFORE, BEYOND_SESSION, CATCH_UP, WITHIN_SESSION};

/// Whom a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hit {
    Owner,
    /// A node that does not own the lock.
    Member,
    Every,
}

impl Hit {
    /// The nodes it hits, `owner` owning the lock.
    pub(super) fn nodes(self, cluster: &ChaosCluster, owner: usize) -> Vec<usize> {
        match self {
            Hit::Owner => vec![owner],
            Hit::Member => vec![(owner + 1) % cluster.len()],
            Hit::Every => (0..cluster.len()).collect(),
        }
    }
}

/// `fault` on the connections of `hit` to every server for `span`. `expires`: the faulted
/// sessions expire (the owner's peers take over within the failover time); otherwise the
/// lock stays where it was.
pub(super) async fn network_fault(
    name: &str,
    hit: Hit,
    fault: Fault,
    span: Duration,
    expires: bool,
) {
    let _guard = fault_lock();
    let cluster = ChaosCluster::start(name, 3).await;
    cluster.run_for(BEFORE).await;
    let (owner, id) = cluster.owner_and_id().await;
    let nodes = hit.nodes(&cluster, owner);
    let from = nodes
        .iter()
        .map(|node| cluster.partition(*node, fault))
        .min()
        .unwrap_or_default();
    tokio::time::sleep(span).await;
    let to = nodes
        .iter()
        .map(|node| cluster.partition(*node, Fault::None))
        .max()
        .unwrap_or_default();
    cluster.run_for(AFTER).await;
    let owner_moves = expires && hit != Hit::Member;
    if !owner_moves {
        assert_eq!(cluster.owner().await, owner, "the lock stayed where it was");
    }
    let window = if owner_moves {
        FaultWindow::between(from, to, CATCH_UP).hitting(id)
    } else {
        FaultWindow::between(from, to, SESSION + CATCH_UP)
    };
    let report = cluster.finish(Some(window)).await;
    if owner_moves && hit == Hit::Owner {
        report.assert_failover_within(REPLACED_WITHIN);
    } else {
        report.assert_holds();
    }
}

/// 400 ms each way (0.8 s a round trip) between the owner and the servers: its claims go out
/// 250 ms ahead of their ticks, so ticks start late, or are recorded missed past the late-tick
/// rule; the session holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn latency_to_the_owner() {
    let delay = Fault::Delay { ms: 400 };
    network_fault(
        "latency 400 ms to the owner",
        Hit::Owner,
        delay,
        BEYOND_SESSION,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn latency_to_every_node() {
    let delay = Fault::Delay { ms: 400 };
    network_fault(
        "latency 400 ms to every node",
        Hit::Every,
        delay,
        BEYOND_SESSION,
        false,
    )
    .await;
}

/// The owner's requests held past the session timeout, the servers' answers passing: the
/// servers expire its session while it still hears them, and its held requests — claims of
/// ticks among them — reach them after the peers took over. The fence refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_stalled_from_the_owner_beyond_the_session() {
    let stall = Fault::Stall(Direction::Requests);
    network_fault(
        "requests stalled from the owner beyond the session",
        Hit::Owner,
        stall,
        BEYOND_SESSION,
        true,
    )
    .await;
}

/// The servers' answers to the owner held for 2 s, then all delivered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn replies_stalled_to_the_owner_within_the_session() {
    let stall = Fault::Stall(Direction::Replies);
    network_fault(
        "replies stalled to the owner within the session",
        Hit::Owner,
        stall,
        WITHIN_SESSION,
        false,
    )
    .await;
}

/// A member's requests dropped past the session timeout: its session expires, the owner's
/// firing goes on, and the member comes back with a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn requests_muted_from_a_member_beyond_the_session() {
    network_fault(
        "requests muted from a member beyond the session",
        Hit::Member,
        Fault::MuteRequests,
        BEYOND_SESSION,
        true,
    )
    .await;
}

/// 20 % of the packets between `hit` and the servers lost for 10 s (`iptables`, root only):
/// TCP retransmits, requests come late, a session may expire. Every invariant holds however
/// the loss falls.
async fn packet_loss(name: &str, hit: Hit) {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start(name, 3).await;
    cluster.run_for(BEFORE).await;
    let (owner, id) = cluster.owner_and_id().await;
    let nodes = hit.nodes(&cluster, owner);
    let ports: Vec<u16> = nodes
        .iter()
        .flat_map(|node| cluster.proxy_ports(*node))
        .collect();
    let from = super::now_ms();
    let loss = match Loss::on_ports(&ports, 20) {
        Ok(loss) => loss,
        Err(why) => {
            eprintln!("{name}: skipped, no packet loss here: {why}");
            return;
        }
    };
    tokio::time::sleep(Duration::from_secs(10)).await;
    drop(loss);
    let to = super::now_ms();
    cluster.run_for(AFTER).await;
    cluster.note("loss_percent", serde_json::json!(20));
    let window = FaultWindow::between(from, to, REPLACED_WITHIN + CATCH_UP);
    let window = if hit == Hit::Member {
        window
    } else {
        window.hitting(id)
    };
    cluster.finish(Some(window)).await.assert_holds();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn packet_loss_to_the_owner() {
    packet_loss("20 % packet loss to the owner", Hit::Owner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn packet_loss_to_a_member() {
    packet_loss("20 % packet loss to a member", Hit::Member).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn packet_loss_to_every_node() {
    packet_loss("20 % packet loss to every node", Hit::Every).await;
}
